// Package persistence owns the manager's durable state: the badger store,
// the journal through which grains append changes (expected-sequence
// fencing, group commit), the state machine (FSM) that applies appends to
// entity records, secondary indexes and the global event log, and the
// read paths (job search, node listing, event-log reads) served from it.
//
// It knows the stored record types (proto/internalpb) but nothing of actors,
// gRPC handlers or the cluster: it must not import actors/, cluster/,
// worker/ or providers/ (ARCHITECTURE §8).
//
// Write path: Journal.Append → Log (LocalLog today: one goroutine batching
// appends into one synced badger transaction; a Raft log in the HA
// manager) → FSM.Apply, the only writer of replicated state. Every applied
// batch carries its log index; the FSM records the applied index in the
// same transaction and skips batches at or below it, so replaying a log is
// harmless.
//
// The HA manager replaces LocalLog with hashicorp/raft: RaftStore
// (raftstore.go) is raft's LogStore and StableStore over a badger DB of its
// own, RaftFSM (raftfsm.go) applies committed logs through the same FSM
// code path, and snapshot.go streams and restores the store's content for
// raft snapshots.
//
// Opening a store (badgeropen.go) takes its lock (dirlock.go: one process
// per store), verifies the MANIFEST and every table's checksums before
// badger sees them and refuses a damaged store (integrity.go), and removes
// the zero-length logs a SIGKILL can leave, which badger cannot open.
// Verify (verify.go, verify_raft.go) checks a stopped data dir offline.
package persistence
