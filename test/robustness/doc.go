// Package robustness is a linearizability suite for the HA manager, in
// the manner of etcd's tests/robustness: several clients, each bound to
// one manager of a real cluster (test/testproc), drive random JobById,
// UpdateJob (compare-and-set on current_hash), CreateJob and DeleteJob
// traffic at a few jobs while a nemesis SIGKILLs and restarts managers,
// freezes them with SIGSTOP/SIGCONT and partitions one off with iptables;
// every call is recorded with its invocation and response times, its
// answer classified from the documented gRPC codes (done, definitely not
// done, unknown), and the history is checked per job against a model of
// one job with porcupine. On a violation the checker's visualisation
// (HTML) and the history (JSON) are written out.
//
// Beyond linearizability it checks that no acknowledged write is lost (a
// final read through every manager after healing) and that after the
// last fault heals every manager accepts an UpdateJob of every job
// within a bound (the time taken is reported).
//
// The model, the classification table and what a pass does and does not
// prove are in docs/design/ha.md ("Robustness suite"). The short CI run
// is robustness_test.go; long runs are `go run ./test/bench robustness`.
//
// This package is test code: it may import anything in the module, and
// nothing outside test/ imports it.
package robustness
