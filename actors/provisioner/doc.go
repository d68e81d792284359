// Package provisioner decides, as pure functions, which nodes the placement
// engine creates for the job roles no node fits, and which of the nodes it
// created it releases (issue 13 §1; docs/design/placement.md,
// "Provisioning and release").
//
//   - Plan bin-packs the waiting roles of each pool into the offerings of
//     the pool's tiers that have a provisioner, cheapest tier first, below
//     each tier's max_nodes, counting the nodes being created as room
//     already coming, keeping out the offerings backed off after a capacity
//     error (Backoffs, after Karpenter's ICE cache) and the locations the
//     provider reports FAILED. A job (or tier) naming a security group
//     missing in an AWS tier's region gets no node of that tier and a
//     reason; nothing is backed off for it (groups.go).
//   - Release says when an engine-created node that runs nothing has
//     lingered long enough, from the idle-since instant in its record, so a
//     leader change neither restarts nor forgets the linger.
//
// Everything is read from records (NodeOf converts a node record), so two
// leaders deciding on the same store decide the same: node ids are
// "<pool>-<tier>-<n>" with n one above the highest of the tier's nodes.
//
// The package owns no state, starts no goroutines and does no I/O. It
// imports only the generated protos; the engine in actors/placement calls
// it and carries the decisions out through the node grains.
package provisioner
