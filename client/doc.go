// Package client is the Go client of the Norsk Manager: NorskManager mirrors
// the NorskManager class of the published SDK (@norskvideo/norsk-manager-sdk),
// one method per RPC of norsk.api.manager.Manager, plus a resumable event
// stream (EventSubscription) and builders for JobSearch filters.
//
// # Errors
//
// Every failed call returns a *CallError naming the RPC. It carries the gRPC
// status of the failure unchanged, so callers classify errors with
// status.Code(err) (codes.NotFound, codes.AlreadyExists,
// codes.FailedPrecondition for a stale current_hash, codes.InvalidArgument,
// codes.Unauthenticated, codes.ResourceExhausted, codes.Unavailable when no
// manager is reachable or the reached one has no quorum, codes.Canceled and
// codes.DeadlineExceeded for the caller's context) and read the manager's
// message with status.Convert(err).Message(). CallError.Local says the
// status was made by the client or gRPC (connection refused, no manager
// serving, the caller's deadline), not by a manager; CallError.Addr names
// the manager that answered. The few checks made on the
// client side (an empty job or node id, a nil request) fail the same way with
// codes.InvalidArgument, before anything is sent.
//
// # Several managers
//
// Settings.URL may list several managers. The connection keeps a sub-channel
// to each and balances calls over the reachable ones that report SERVING on
// grpc.health.v1 (gRPC round_robin over a static address list, with
// client-side health checking), so a manager that is down, or up without a
// Raft leader (NOT_SERVING), is skipped. When no manager serves, calls fail
// at once with codes.Unavailable; the *CallError is then Local and names the
// cause per manager (Tried: its last connection error, or the health it
// reports when asked right after the failure: "no manager serves: a:6790
// NOT_SERVING (no Raft leader), b:6790 unreachable: connect: connection
// refused"), not just the last dial error gRPC kept. Read-only calls
// (Version, JobByID, JobSearch, ListNodes, ListClusterNodes, GetBundle,
// ListBundles) that get Unavailable are retried on the next manager; calls
// that change state are not retried, because a write that failed with
// Unavailable may still have been applied (see NorskManager).
//
// This package owns the client side of the public API only: it imports the
// generated protocol packages and gRPC, and nothing of the manager itself.
package client
