// Package acl authenticates and authorises calls to the manager's API
// (issue 12 §2; docs/design/security.md, "ACL tokens"): roles and what
// each allows (roles.go), the one table of what every method of
// norsk.api.manager.Manager needs (methods.go), token secrets and their
// hashes (secret.go), and the gRPC interceptors that check a call's
// "authorization: Bearer <secret>" metadata against the replicated tokens
// and put the caller in the context (identity.With) for every call, ACLs
// on or off (interceptor.go).
//
// It owns no state: tokens are read from the local replica of the store
// on every call, so a revocation holds on a manager as soon as its replica
// applies it. It never sees a stored secret, only hashes. It imports
// persistence (to read tokens) and cluster/identity; the gateway and the
// agent import it, never the grains (ARCHITECTURE §9).
package acl
