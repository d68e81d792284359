package persistence

import (
	"errors"
	"fmt"
	"io"

	"github.com/dgraph-io/badger/v4"
	"github.com/hashicorp/raft"
	"google.golang.org/protobuf/proto"

	"github.com/norsk-oss/norsk-manager/proto/internalpb"
)

// RaftFSM is the raft.BatchingFSM of the HA manager: it applies committed
// Raft logs to a Store through the same FSM code path LocalLog uses. Each
// LogCommand's Data is a marshalled internalpb.AppendBatch (EncodeAppend).
//
// The store is persistent and synced, and every apply records its log
// index in the same badger transaction, so the manager runs raft with
// Config.NoSnapshotRestoreOnStart = true: raft does not reload the last
// snapshot at start and instead replays the logs after it, which ApplyBatch
// skips (index ≤ applied index). The exceptions, where the store is behind
// raft's latest snapshot, are reported by NeedsSnapshotRestore; start raft
// with NoSnapshotRestoreOnStart = !needed.
//
// Concurrency is raft's: ApplyBatch, Apply, Snapshot and Restore are called
// from raft's FSM goroutine only; FSMSnapshot.Persist runs concurrently
// with ApplyBatch. Store reads may run at any time. Shut raft down before
// closing the store.
type RaftFSM struct {
	store *Store
}

var _ raft.BatchingFSM = (*RaftFSM)(nil)

// NewRaftFSM returns the Raft FSM over store. No other log (LocalLog) may
// write to store while raft runs.
func NewRaftFSM(store *Store) *RaftFSM { return &RaftFSM{store: store} }

// CommandOutcome is the result of one AppendCommand of a Raft log.
type CommandOutcome struct {
	// Result is the append's result when Err is nil.
	Result AppendResult
	// Err is the command's own failure: a *ConflictError (errors.Is
	// ErrSeqConflict) on a failed expected-sequence check, ErrTooLarge when
	// it does not fit the store's limits, ErrCorrupt when the command is
	// malformed. Such a command wrote nothing, on every replica alike.
	Err error
}

// RaftApplyResponse is the raft.ApplyFuture.Response of a LogCommand: one
// outcome per command of the log's AppendBatch, in order. A log at or below
// the store's applied index (a replay) is skipped and answered nil, as are
// logs of other types.
type RaftApplyResponse struct {
	// Results has one outcome per command of the log, in order.
	Results []CommandOutcome
}

// EncodeAppend returns the Raft log data of one append: an AppendBatch
// holding cmd. The FSM panics on data that does not decode, so it is
// produced here only; a command that cannot be marshalled (a string that is
// not valid UTF-8) is an error.
func EncodeAppend(cmd *internalpb.AppendCommand) ([]byte, error) {
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(&internalpb.AppendBatch{Commands: []*internalpb.AppendCommand{cmd}})
	if err != nil {
		return nil, fmt.Errorf("encode append to %s: %w", cmd.GetEntityKey(), err)
	}
	return b, nil
}

// Apply applies one log; see ApplyBatch.
func (f *RaftFSM) Apply(l *raft.Log) any { return f.ApplyBatch([]*raft.Log{l})[0] }

// ApplyBatch applies logs (committed, in index order, without gaps among
// the logs raft passes) and returns one response per log: a
// *RaftApplyResponse for a LogCommand above the applied index, nil for
// every other log. All command logs are applied in one badger transaction
// that also records the last log's index as applied (a batch beyond
// badger's transaction limit is split, deterministically, at log
// boundaries; one log that alone exceeds it fails each of its commands with
// ErrTooLarge).
//
// It panics if a command log's data does not decode as an AppendBatch, or
// if the store fails (I/O, corrupt stored data, an interrupted restore):
// raft considers the log applied once this returns, so carrying on would
// leave this replica silently diverged. After a restart the log is applied
// again.
func (f *RaftFSM) ApplyBatch(logs []*raft.Log) []any {
	if len(logs) == 0 {
		return nil
	}
	entries := make([]logEntry, 0, len(logs))
	pos := make([]int, 0, len(logs)) // entries[i] is logs[pos[i]]
	for i, l := range logs {
		if l.Type != raft.LogCommand {
			continue
		}
		batch := &internalpb.AppendBatch{}
		if err := proto.Unmarshal(l.Data, batch); err != nil {
			panic(fmt.Sprintf("persistence: raft log %d (term %d) is not an AppendBatch: %v", l.Index, l.Term, err))
		}
		entries = append(entries, logEntry{index: l.Index, cmds: batch.GetCommands()})
		pos = append(pos, i)
	}
	results := f.apply(entries, logs[len(logs)-1].Index)
	resp := make([]any, len(logs))
	for i, r := range results {
		if r == nil {
			continue
		}
		out := make([]CommandOutcome, len(r))
		for j, c := range r {
			out[j] = CommandOutcome{Result: c.res, Err: c.err}
		}
		resp[pos[i]] = &RaftApplyResponse{Results: out}
	}
	return resp
}

// apply applies entries and records last as applied, splitting on
// badger.ErrTxnTooBig; it panics on any other store error.
func (f *RaftFSM) apply(entries []logEntry, last uint64) [][]commandResult {
	results, err := f.store.fsm.applyEntries(entries, last)
	switch {
	case err == nil:
		return results
	case !errors.Is(err, badger.ErrTxnTooBig):
		panic(fmt.Sprintf("persistence: apply raft logs up to %d: %v", last, err))
	case len(entries) > 1:
		h := len(entries) / 2
		return append(f.apply(entries[:h], entries[h-1].index), f.apply(entries[h:], last)...)
	}
	// One log too big for a transaction: fail its commands, record the
	// index. Every replica (with the same store limits) decides alike.
	e := entries[0]
	f.store.logger.Warn("raft log too large for one transaction; its commands fail", "index", e.index, "commands", len(e.cmds))
	failed := make([]commandResult, len(e.cmds))
	for i, cmd := range e.cmds {
		failed[i].err = fmt.Errorf("append to %s: log %d is too large for one transaction: %w", cmd.GetEntityKey(), e.index, ErrTooLarge)
	}
	if _, err := f.store.fsm.applyEntries(nil, last); err != nil {
		panic(fmt.Sprintf("persistence: record raft log %d as applied: %v", last, err))
	}
	return [][]commandResult{failed}
}

// Snapshot captures the store's current state (a badger read transaction);
// the returned snapshot's Persist streams it in the WriteSnapshot format
// while applies continue. It never fails.
func (f *RaftFSM) Snapshot() (raft.FSMSnapshot, error) {
	return &raftSnapshot{txn: f.store.db.NewTransaction(false)}, nil
}

// Restore replaces the store's content with the snapshot (RestoreSnapshot);
// a truncated or corrupt snapshot is refused (ErrCorrupt) and the store
// left as it was. raft calls it only when no apply runs. It does not close
// rc (raft does).
func (f *RaftFSM) Restore(rc io.ReadCloser) error { return f.store.RestoreSnapshot(rc) }

// NeedsSnapshotRestore reports whether raft must restore its latest
// snapshot into the store when it starts (Config.NoSnapshotRestoreOnStart
// = false), which is the case when the store is behind that snapshot:
// after a crash during a snapshot restore (Store.RestoreInterrupted), or
// when raft kept a snapshot it received but the store refused or never
// applied it (the snapshot's applied index is above the store's). Raft
// would otherwise consider that state applied and never apply it. Call it
// before raft.NewRaft, with the snapshot store raft will use. An error
// (a snapshot that cannot be opened or read) should stop the start-up.
func (f *RaftFSM) NeedsSnapshotRestore(snaps raft.SnapshotStore) (bool, error) {
	if f.store.RestoreInterrupted() {
		return true, nil
	}
	metas, err := snaps.List()
	if err != nil {
		return false, fmt.Errorf("list raft snapshots: %w", err)
	}
	if len(metas) == 0 {
		return false, nil
	}
	_, rc, err := snaps.Open(metas[0].ID)
	if err != nil {
		return false, fmt.Errorf("open raft snapshot %s: %w", metas[0].ID, err)
	}
	defer rc.Close()
	hdr, err := ReadSnapshotHeader(rc)
	if err != nil {
		return false, fmt.Errorf("raft snapshot %s: %w", metas[0].ID, err)
	}
	return hdr.Applied > f.store.fsm.AppliedIndex(), nil
}

// raftSnapshot is a raft.FSMSnapshot over a badger read transaction.
type raftSnapshot struct {
	txn *badger.Txn
}

// Persist streams the captured state into sink and closes it, or cancels
// it on error.
func (s *raftSnapshot) Persist(sink raft.SnapshotSink) error {
	if err := writeSnapshot(s.txn, sink); err != nil {
		sink.Cancel()
		return err
	}
	return sink.Close()
}

// Release ends the read transaction.
func (s *raftSnapshot) Release() { s.txn.Discard() }
