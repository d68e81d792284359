// Package scheduler is the placement decision of the placement engine, as
// pure functions: given a view of the nodes and of what is placed on them,
// and an Ask (one job role, or a co-located group of them), it picks a node
// and the whole cores to pin, or explains why no node fits.
//
// The shape follows Nomad's scheduler/feasible: hard filters, each named and
// counting the nodes it removed (filter*.go), a ranking of the nodes that
// pass (rank.go), and the chain that runs both (select.go). The counts are
// the explanation an operator reads ("constraint cloud filtered 3 nodes,
// capacity exhausted on 2 nodes"; explain.go). RestartPolicy (restart.go)
// is the restart ceiling and backoff of issue 11 §4. The rules and the
// choices behind them are in docs/design/placement.md.
//
// The leader-only engine in actors/placement builds a View from the
// replicated node and job records, calls View.Select and carries the
// Decision out through the job grains' StartJob.
//
// The package owns no state beyond a View the caller builds, starts no
// goroutines and does no I/O. It imports only the generated proto message
// types (for Cloud and the requirement and resilience messages); it must not
// import actors, the store, the cluster or any gRPC service.
package scheduler
