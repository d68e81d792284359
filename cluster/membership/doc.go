// Package membership owns the manager cluster's gossip membership: which
// managers exist, where their API, Raft and actor endpoints are, and whether
// a manager that went away left gracefully or failed.
//
// Membership wraps hashicorp/memberlist (v0.7.0): every manager runs one,
// advertises a small Meta (≤ 512 bytes encoded) and joins the others through
// a background retry loop. Changes are delivered as coalesced pokes on
// channels from Subscribe; the current view is read with Members, and
// departed managers with Left (graceful versus failed, and since when), which
// is what the Raft leader needs to reconcile voters.
//
// Provider adapts a Membership to protoactor's cluster.ClusterProvider: it
// publishes the members that host actor kinds to protoactor's MemberList on
// every change and every second.
//
// This package must not import the grains, the gateway, persistence or
// replication; it depends only on memberlist and protoactor's actor and
// cluster packages (never cluster/clusterproviders/*).
package membership
