package persistence

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/dgraph-io/badger/v4"
	"google.golang.org/protobuf/proto"

	"github.com/norsk-oss/norsk-manager/proto/internalpb"
)

// FSM is the state machine that applies journal appends to the store. It is
// the only writer of replicated state: ApplyBatch must be called from one
// goroutine at a time (the log's apply loop). Reads go through Store.View
// and may run concurrently with ApplyBatch.
//
// Apply is deterministic: it reads no clock and no randomness, so every
// replica that applies the same batches in the same order holds the same
// bytes (ARCHITECTURE §4).
type FSM struct {
	db        *badger.DB
	retention uint64
	// auditRetention is Config.AuditRetention (set once by Open).
	auditRetention uint64
	// world is the in-memory view the applies feed (world.go).
	world *World

	// mu guards the cached meta values below (written by the apply
	// goroutine, read by readers).
	mu struct {
		sync.Mutex
		applied uint64
		evHead  uint64
		evFirst uint64
		// restoring is true while RestoreSnapshot replaces the store's
		// content, and after an interrupted restore (meta/restoring).
		restoring bool
		// headCh is closed (and replaced) whenever evHead grows.
		headCh chan struct{}
		// appliedCh is closed (and replaced) whenever applied changes.
		appliedCh chan struct{}
	}
}

// maxKeyLen is badger's key size limit (65000) less room for its own
// suffixes.
const maxKeyLen = 64000

// commandResult is the outcome of one AppendCommand of a batch.
type commandResult struct {
	res AppendResult
	err error
}

func newFSM(db *badger.DB, retention uint64) (*FSM, error) {
	m, err := readMeta(db)
	if err != nil {
		return nil, err
	}
	world, err := newWorld()
	if err != nil {
		return nil, err
	}
	if m.restoring { // a store with a half-done restore refuses applies and reads
		world.markBroken(fmt.Errorf("the store holds an interrupted snapshot restore: %w", ErrCorrupt))
	} else if err := world.rebuild(db); err != nil {
		return nil, err
	}
	f := &FSM{db: db, retention: retention, world: world}
	f.mu.headCh = make(chan struct{})
	f.mu.appliedCh = make(chan struct{})
	f.mu.applied, f.mu.evHead, f.mu.evFirst, f.mu.restoring = m.applied, m.evHead, m.evFirst, m.restoring
	return f, nil
}

// AppliedIndex returns the log index of the last applied batch (0: none).
func (f *FSM) AppliedIndex() uint64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.mu.applied
}

// AppliedChanged returns the applied index and a channel closed when it
// next changes, so that a caller can wait for an index without polling.
func (f *FSM) AppliedChanged() (uint64, <-chan struct{}) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.mu.applied, f.mu.appliedCh
}

// EventBounds returns the oldest retained and the newest event-log index
// as last published by applyEntries. With an empty log, first is head+1.
// The values are published after the batch's transaction commits, so a
// concurrent read can already see events above head (never the reverse):
// see Store.EventBounds.
func (f *FSM) EventBounds() (first, head Index) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return Index(f.mu.evFirst), Index(f.mu.evHead)
}

// headChanged returns the current event head and a channel closed when it
// next grows.
func (f *FSM) headChanged() (Index, <-chan struct{}) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return Index(f.mu.evHead), f.mu.headCh
}

// ApplyBatch applies cmds, in order and atomically, as the batch at log
// index idx, and returns one result per command. A batch at or below the
// applied index is skipped (nil results, nil error): replaying a log is
// harmless. A command that fails its expected-sequence check gets a
// *ConflictError, one whose index keys exceed the store's key limit an
// ErrTooLarge error, and a malformed one (bad entity key, a record that
// does not decode as its kind) an ErrCorrupt error; each writes nothing and
// the other commands still apply. An error return (I/O, encoding, corrupt
// stored data, badger.ErrTxnTooBig) means nothing of the batch was applied.
func (f *FSM) ApplyBatch(idx uint64, cmds []*internalpb.AppendCommand) ([]commandResult, error) {
	results, err := f.applyEntries([]logEntry{{index: idx, cmds: cmds}}, idx)
	if err != nil || len(results) == 0 {
		return nil, err
	}
	return results[0], nil
}

// logEntry is the commands of one log entry and the entry's log index.
type logEntry struct {
	index uint64
	cmds  []*internalpb.AppendCommand
}

// applyEntries applies entries (in increasing index order) in ONE badger
// transaction and records last (≥ every entry's index) as the applied
// index. It returns one result slice per entry, nil for an entry at or
// below the applied index, which is skipped. If last is at or below the
// applied index nothing is written. The error cases are those of
// ApplyBatch; on error nothing was written. ApplyBatch and the Raft FSM
// both apply through here.
func (f *FSM) applyEntries(entries []logEntry, last uint64) ([][]commandResult, error) {
	f.mu.Lock()
	applied, head, first, restoring := f.mu.applied, f.mu.evHead, f.mu.evFirst, f.mu.restoring
	f.mu.Unlock()
	if restoring {
		return nil, fmt.Errorf("apply log %d: the store holds an interrupted snapshot restore: %w", last, ErrCorrupt)
	}
	if last <= applied {
		return make([][]commandResult, len(entries)), nil
	}
	ab := &applyBatch{fsm: f, head: head, first: first}
	results := make([][]commandResult, len(entries))
	txn := f.db.NewTransaction(true)
	defer txn.Discard()
	for i, e := range entries {
		if e.index <= applied {
			continue
		}
		results[i] = make([]commandResult, len(e.cmds))
		for j, cmd := range e.cmds {
			res, err := ab.applyCommand(txn, cmd)
			if err != nil && !isCommandFailure(err) {
				return nil, fmt.Errorf("apply %s at log %d: %w", cmd.GetEntityKey(), e.index, err)
			}
			results[i][j] = commandResult{res: res, err: err}
		}
	}
	if err := setU64(txn, keyApplied, last); err != nil {
		return nil, err
	}
	if err := ab.audit.save(txn); err != nil {
		return nil, err
	}
	if ab.head != head {
		if err := setU64(txn, keyEvHead, ab.head); err != nil {
			return nil, err
		}
		if err := setU64(txn, keyEvFirst, ab.first); err != nil {
			return nil, err
		}
	}
	if err := txn.Commit(); err != nil {
		return nil, fmt.Errorf("commit log %d: %w", last, err)
	}
	// The World takes the batch before the applied index moves, so that a
	// reader who waited for an index finds its writes in the World too.
	f.world.take(ab.changes)
	// From here until the cache below is updated, readers can see the
	// batch's events above the cached head (Store.EventBounds).
	f.mu.Lock()
	f.mu.applied = last
	f.notifyAppliedLocked()
	if ab.head != head {
		f.mu.evHead, f.mu.evFirst = ab.head, ab.first
		f.notifyHeadLocked()
	}
	f.mu.Unlock()
	return results, nil
}

// notifyHeadLocked wakes the event-head waiters. Caller holds f.mu.
func (f *FSM) notifyHeadLocked() {
	close(f.mu.headCh)
	f.mu.headCh = make(chan struct{})
}

// notifyAppliedLocked wakes the applied-index waiters. Caller holds f.mu.
func (f *FSM) notifyAppliedLocked() {
	close(f.mu.appliedCh)
	f.mu.appliedCh = make(chan struct{})
}

// reload re-reads the cached meta values (applied index, event bounds,
// restore marker) from the store, after RestoreSnapshot replaced its
// content, and wakes the event-head waiters. Must not run concurrently
// with applyEntries.
func (f *FSM) reload() error {
	m, err := readMeta(f.db)
	if err != nil {
		return err
	}
	if m.restoring {
		// Half the records are the snapshot's: nothing may read the
		// World until a restore completes and rebuilds it.
		f.world.markBroken(fmt.Errorf("the store holds an interrupted snapshot restore: %w", ErrCorrupt))
	} else if err := f.world.rebuild(f.db); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.mu.applied, f.mu.evHead, f.mu.evFirst, f.mu.restoring = m.applied, m.evHead, m.evFirst, m.restoring
	f.notifyHeadLocked()
	f.notifyAppliedLocked()
	return nil
}

// setRestoring records (in the cache) that a restore is replacing the
// store's content, so that no apply runs on a half-written store.
func (f *FSM) setRestoring() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.mu.restoring = true
}

// restoreInterrupted reports whether the store holds an unfinished restore.
func (f *FSM) restoreInterrupted() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.mu.restoring
}

// storeMeta is the FSM's cached meta as stored.
type storeMeta struct {
	applied, evHead, evFirst uint64
	restoring                bool
}

func readMeta(db *badger.DB) (storeMeta, error) {
	var m storeMeta
	err := db.View(func(txn *badger.Txn) error {
		var err error
		if m.applied, err = getU64(txn, keyApplied); err != nil {
			return err
		}
		if m.evHead, err = getU64(txn, keyEvHead); err != nil {
			return err
		}
		if m.evFirst, err = getU64(txn, keyEvFirst); err != nil {
			return err
		}
		_, err = txn.Get(keyRestoring)
		switch {
		case err == nil:
			m.restoring = true
		case !errors.Is(err, badger.ErrKeyNotFound):
			return err
		}
		return nil
	})
	if err != nil {
		return storeMeta{}, fmt.Errorf("read store meta: %w", err)
	}
	if m.evFirst == 0 {
		m.evFirst = 1
	}
	return m, nil
}

// invalidCommandError marks a failure caused by the command itself (not by
// the store): it fails that command alone, identically on every replica.
type invalidCommandError struct{ err error }

func (e *invalidCommandError) Error() string { return e.err.Error() }
func (e *invalidCommandError) Unwrap() error { return e.err }

// isCommandFailure reports whether err fails one command only (a value in
// its result) rather than the whole batch.
func isCommandFailure(err error) bool {
	var ic *invalidCommandError
	return errors.Is(err, ErrSeqConflict) || errors.Is(err, ErrTooLarge) || errors.As(err, &ic)
}

// applyBatch carries the event-log cursor through one batch.
type applyBatch struct {
	fsm         *FSM
	head, first uint64
	// audit is the audit log's cursor (audit.go), loaded at the batch's
	// first audit entry.
	audit auditCursor
	// changes are the batch's entity writes, for the World once the
	// batch commits.
	changes []worldChange
}

func (ab *applyBatch) applyCommand(txn *badger.Txn, cmd *internalpb.AppendCommand) (AppendResult, error) {
	key := EntityKey(cmd.GetEntityKey())
	if key == "" && cmd.GetAudit() != nil {
		return ab.applyAuditOnly(txn, cmd)
	}
	kind := key.Kind()
	if kind == "" || key.ID() == "" {
		return AppendResult{}, &invalidCommandError{fmt.Errorf("malformed entity key %q: %w", key, ErrCorrupt)}
	}
	cur, err := loadEntity(txn, key)
	if err != nil {
		return AppendResult{}, err
	}
	var old record
	if cur.live {
		if old, err = decodeRecord(kind, cur.record); err != nil {
			return AppendResult{}, err
		}
	}
	if rid := cmd.GetRequestId(); rid != "" && slices.Contains(recentRequests(old, cur), rid) {
		return AppendResult{Seq: cur.seq, Duplicate: true}, nil
	}
	if cur.seq != Seq(cmd.GetExpectedSeq()) {
		return AppendResult{}, &ConflictError{Key: key, Expected: Seq(cmd.GetExpectedSeq()), Actual: cur.seq}
	}
	var next record
	if !cmd.GetDelete() {
		if next, err = decodeRecord(kind, cmd.GetRecord()); err != nil {
			return AppendResult{}, &invalidCommandError{fmt.Errorf("%s: %w", key, err)}
		}
		// Check before writing anything: a failure after the first write
		// would fail the whole batch.
		for k := range indexEntries(key, next) {
			if len(k) > maxKeyLen {
				return AppendResult{}, fmt.Errorf("%s: an index key of %d bytes exceeds the store's key limit of %d (a tag too long?): %w",
					key, len(k), maxKeyLen, ErrTooLarge)
			}
		}
	}
	if err := updateIndexes(txn, key, old, next); err != nil {
		return AppendResult{}, err
	}
	seq := cur.seq + 1
	payload := cmd.GetRecord()
	if cmd.GetDelete() {
		if payload, err = tombstone(old, cmd.GetRequestId()); err != nil {
			return AppendResult{}, err
		}
	}
	if err := txn.Set(entKey(key), encodeEntity(seq, !cmd.GetDelete(), payload)); err != nil {
		return AppendResult{}, err
	}
	if worldKinds[kind] {
		ab.changes = append(ab.changes, worldChange{key: key, seq: seq, rec: next})
	}
	last, err := ab.appendEvents(txn, cmd)
	if err != nil {
		return AppendResult{}, err
	}
	if in := cmd.GetAudit(); in != nil {
		if err := ab.appendAudit(txn, in, cmd.GetAt()); err != nil {
			return AppendResult{}, err
		}
	}
	return AppendResult{Seq: seq, LastEvent: last}, nil
}

// appendEvents writes the command's events to the event log, assigning
// their log indexes, and trims the log to the retention limit.
func (ab *applyBatch) appendEvents(txn *badger.Txn, cmd *internalpb.AppendCommand) (Index, error) {
	var last Index
	for _, ev := range cmd.GetEvents() {
		ab.head++
		ev.LogIndex = ab.head
		// Deterministic: every replica stores the same bytes (map order).
		b, err := proto.MarshalOptions{Deterministic: true}.Marshal(&internalpb.StoredEvent{Event: ev, At: cmd.GetAt()})
		if err != nil {
			return 0, fmt.Errorf("encode event: %w", err)
		}
		if err := txn.Set(evKey(Index(ab.head)), b); err != nil {
			return 0, err
		}
		last = Index(ab.head)
		for ab.fsm.retention > 0 && ab.head-ab.first+1 > ab.fsm.retention {
			if err := txn.Delete(evKey(Index(ab.first))); err != nil {
				return 0, err
			}
			ab.first++
		}
	}
	return last, nil
}

// entity is a stored entity value: seq ‖ live flag ‖ record.
type entity struct {
	seq    Seq
	live   bool
	record []byte
}

// encodeEntity encodes an entity's value: seq ‖ live flag (0 live, 1
// deleted) ‖ its record, or for a deleted entity its tombstone (a
// marshalled internalpb.Tombstone; empty in tombstones written before
// tombstones kept request ids).
func encodeEntity(seq Seq, live bool, rec []byte) []byte {
	b := make([]byte, 0, 9+len(rec))
	b = binary.BigEndian.AppendUint64(b, uint64(seq))
	if live {
		b = append(b, 0)
	} else {
		b = append(b, 1)
	}
	return append(b, rec...)
}

// maxTombstoneRequests bounds the request ids a tombstone keeps (as many
// as a record does).
const maxTombstoneRequests = 32

// tombstone returns the payload of the tombstone a delete by rid leaves of
// old: old's recent request ids and rid.
func tombstone(old record, rid string) ([]byte, error) {
	var ids []string
	if old != nil {
		ids = slices.Clone(old.GetRecentRequests())
	}
	if rid != "" {
		ids = append(ids, rid)
	}
	if over := len(ids) - maxTombstoneRequests; over > 0 {
		ids = ids[over:]
	}
	if len(ids) == 0 {
		return nil, nil
	}
	return proto.Marshal(&internalpb.Tombstone{RecentRequests: ids})
}

// recentRequests returns the request ids applied to the entity: old's
// (live), or its tombstone's (deleted).
func recentRequests(old record, cur entity) []string {
	if old != nil {
		return old.GetRecentRequests()
	}
	return TombstoneRequests(cur.record)
}

// TombstoneRequests decodes the request ids a tombstone payload (what Load
// returns with ErrNotFound for a deleted entity) keeps; nil for an empty
// or undecodable one.
func TombstoneRequests(payload []byte) []string {
	if len(payload) == 0 {
		return nil
	}
	var t internalpb.Tombstone
	if proto.Unmarshal(payload, &t) != nil {
		return nil
	}
	return t.GetRecentRequests()
}

func decodeEntity(key EntityKey, v []byte) (entity, error) {
	if len(v) < 9 {
		return entity{}, fmt.Errorf("entity %s: value of %d bytes: %w", key, len(v), ErrCorrupt)
	}
	e := entity{seq: Seq(binary.BigEndian.Uint64(v)), live: v[8] == 0}
	// A live entity's record, or a deleted one's tombstone.
	e.record = bytes.Clone(v[9:])
	return e, nil
}

// loadEntity returns the stored entity (seq 0, not live, if absent).
func loadEntity(txn *badger.Txn, key EntityKey) (entity, error) {
	item, err := txn.Get(entKey(key))
	if errors.Is(err, badger.ErrKeyNotFound) {
		return entity{}, nil
	}
	if err != nil {
		return entity{}, err
	}
	v, err := item.ValueCopy(nil)
	if err != nil {
		return entity{}, err
	}
	return decodeEntity(key, v)
}

func getU64(txn *badger.Txn, key []byte) (uint64, error) {
	item, err := txn.Get(key)
	if errors.Is(err, badger.ErrKeyNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	var v uint64
	err = item.Value(func(b []byte) error {
		if len(b) != 8 {
			return fmt.Errorf("meta %s has %d bytes: %w", key, len(b), ErrCorrupt)
		}
		v = binary.BigEndian.Uint64(b)
		return nil
	})
	return v, err
}

func setU64(txn *badger.Txn, key []byte, v uint64) error { return txn.Set(key, u64(v)) }
