package persistence

import (
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"path/filepath"
	"sync"
	"time"

	"github.com/dgraph-io/badger/v4"
	"github.com/hashicorp/raft"
)

// RaftStoreConfig configures a RaftStore. Use DefaultRaftStoreConfig and
// override fields: the zero value has SyncWrites off.
type RaftStoreConfig struct {
	// Dir is the directory of the Raft store's own badger DB, for example
	// <data-dir>/raft; created if missing. Required. Open the manager's
	// Store first: Open refuses a new data dir that already has content.
	Dir string
	// SyncWrites makes every write durable (fsync) before it returns. Raft
	// relies on it: a vote or log entry it acknowledged must survive a
	// crash. Default true; false only for tests and benchmarks.
	SyncWrites bool
	// Logger receives store logs; nil logs nothing.
	Logger *slog.Logger
}

// DefaultRaftStoreConfig returns a RaftStoreConfig with production defaults
// for dir.
func DefaultRaftStoreConfig(dir string) RaftStoreConfig {
	return RaftStoreConfig{Dir: dir, SyncWrites: true}
}

// Validate reports the first invalid field.
func (c RaftStoreConfig) Validate() error {
	if c.Dir == "" {
		return errors.New("raft store config: Dir is required")
	}
	return nil
}

// Sizes of the Raft store's badger DB: the log holds only the entries since
// the last snapshot (plus raft's TrailingLogs), so it stays small.
const (
	raftStoreMemTableSize   = 16 << 20
	raftStoreBlockCacheSize = 8 << 20
	raftStoreGCInterval     = 5 * time.Minute
)

// RaftStore is hashicorp/raft's LogStore and StableStore over a badger DB of
// its own, separate from the manager's Store (the FSM's DB): Raft writes
// and compacts its log at its own pace, and a snapshot of the FSM never
// includes it. Keys are in keys.go (log/<u64 index>, stable/<key>); a log
// entry is stored as encodeRaftLog describes.
//
// All methods are safe for concurrent use (raft calls them from its main,
// replication and snapshot goroutines); writes are serialised. After Close
// every method returns ErrClosed. Shut raft down before closing the store.
type RaftStore struct {
	db     *badger.DB
	lock   *dirLock // released by Close after db
	logger *slog.Logger

	// mu serialises writes and guards the cached index bounds and closed.
	mu struct {
		sync.Mutex
		first, last uint64 // 0, 0 when the log is empty
		closed      bool
	}

	stopCh chan struct{} // closed by Close
	wg     sync.WaitGroup
}

var (
	_ raft.LogStore    = (*RaftStore)(nil)
	_ raft.StableStore = (*RaftStore)(nil)
)

// OpenRaftStore opens (or creates) the Raft store in cfg.Dir. It fails,
// changing nothing, if another process has the store open (ErrInUse), its
// files fail their integrity checks (a *DamageError naming the file, with
// the advice to rebuild the member from the cluster), badger cannot open
// the directory, or a stored log key is malformed (ErrCorrupt). Messages
// name cfg.Dir's parent as the data dir. Zero-length logs a crash left
// behind are removed first (removeEmptyLogs).
func OpenRaftStore(cfg RaftStoreConfig) (*RaftStore, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	logger := cfg.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	if !cfg.SyncWrites {
		logger.Warn("raft store writes are not synced: acknowledged votes and log entries may be lost in a crash", "dir", cfg.Dir)
	}
	od, err := openBadgerDir(raftStoreOptions(cfg, logger), filepath.Dir(cfg.Dir), ModeCluster, logger)
	if err != nil {
		return nil, err
	}
	s := &RaftStore{db: od.db, lock: od.lock, logger: logger, stopCh: make(chan struct{})}
	if err := od.db.View(func(txn *badger.Txn) error {
		var err error
		s.mu.first, s.mu.last, err = scanLogBounds(txn)
		return err
	}); err != nil {
		od.close()
		return nil, fmt.Errorf("raft store in %s: %w", cfg.Dir, err)
	}
	s.wg.Add(1)
	go s.gcLoop()
	return s, nil
}

// raftStoreOptions are the badger options of the Raft store in cfg.Dir.
func raftStoreOptions(cfg RaftStoreConfig, logger *slog.Logger) badger.Options {
	return badger.DefaultOptions(cfg.Dir).
		WithSyncWrites(cfg.SyncWrites).
		WithDetectConflicts(false).
		WithNumVersionsToKeep(1).
		WithMemTableSize(raftStoreMemTableSize).
		WithBlockCacheSize(raftStoreBlockCacheSize).
		WithLogger(badgerLogger{logger})
}

// Close closes the store. Idempotent.
func (s *RaftStore) Close() error {
	s.mu.Lock()
	if s.mu.closed {
		s.mu.Unlock()
		return nil
	}
	s.mu.closed = true
	s.mu.Unlock()
	close(s.stopCh)
	s.wg.Wait()
	err := s.db.Close()
	s.lock.release()
	return err
}

// FirstIndex returns the index of the oldest stored log entry, 0 if the log
// is empty.
func (s *RaftStore) FirstIndex() (uint64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.mu.closed {
		return 0, ErrClosed
	}
	return s.mu.first, nil
}

// LastIndex returns the index of the newest stored log entry, 0 if the log
// is empty.
func (s *RaftStore) LastIndex() (uint64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.mu.closed {
		return 0, ErrClosed
	}
	return s.mu.last, nil
}

// GetLog reads the entry at index into log. It returns raft.ErrLogNotFound
// if there is none, and an error wrapping ErrCorrupt if the stored bytes do
// not decode. log's slices are its own.
func (s *RaftStore) GetLog(index uint64, log *raft.Log) error {
	if s.isClosed() {
		return ErrClosed
	}
	err := s.db.View(func(txn *badger.Txn) error {
		item, err := txn.Get(raftLogKey(index))
		if errors.Is(err, badger.ErrKeyNotFound) {
			return raft.ErrLogNotFound
		}
		if err != nil {
			return err
		}
		v, err := item.ValueCopy(nil)
		if err != nil {
			return err
		}
		return decodeRaftLog(index, v, log)
	})
	if err != nil && !errors.Is(err, raft.ErrLogNotFound) {
		return fmt.Errorf("raft store: get log %d: %w", index, err)
	}
	return err
}

// StoreLog stores one log entry, replacing any entry at its index.
func (s *RaftStore) StoreLog(log *raft.Log) error { return s.StoreLogs([]*raft.Log{log}) }

// StoreLogs stores logs (in increasing index order, gaps allowed),
// replacing entries at the same indexes, in one badger transaction. Only a
// batch larger than badger's transaction limit (15% of the 16 MiB memtable,
// counting values under 1 MiB in full) is written as several transactions
// in index order, so a crash can leave only a prefix of it, which Raft
// tolerates (the entries were not acknowledged). Durable on return when
// SyncWrites is on.
func (s *RaftStore) StoreLogs(logs []*raft.Log) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.mu.closed {
		return ErrClosed
	}
	var lo, hi uint64
	flush := func(txn *badger.Txn) error {
		if err := txn.Commit(); err != nil {
			return err
		}
		s.extendBounds(lo, hi)
		lo, hi = 0, 0
		return nil
	}
	txn := s.db.NewTransaction(true)
	defer func() { txn.Discard() }()
	for _, l := range logs {
		key, val := raftLogKey(l.Index), encodeRaftLog(l)
		err := txn.Set(key, val)
		if errors.Is(err, badger.ErrTxnTooBig) {
			if err := flush(txn); err != nil {
				return fmt.Errorf("raft store: store logs: %w", err)
			}
			txn = s.db.NewTransaction(true)
			err = txn.Set(key, val)
		}
		if err != nil {
			return fmt.Errorf("raft store: store log %d: %w", l.Index, err)
		}
		if lo == 0 {
			lo = l.Index
		}
		lo, hi = min(lo, l.Index), max(hi, l.Index)
	}
	if err := flush(txn); err != nil {
		return fmt.Errorf("raft store: store logs: %w", err)
	}
	return nil
}

// extendBounds widens the cached bounds by stored indexes [lo, hi]
// (lo 0: none). Caller holds s.mu.
func (s *RaftStore) extendBounds(lo, hi uint64) {
	if lo == 0 {
		return
	}
	if s.mu.first == 0 || lo < s.mu.first {
		s.mu.first = lo
	}
	s.mu.last = max(s.mu.last, hi)
}

// DeleteRange deletes the entries with min ≤ index ≤ max (inclusive; absent
// entries are ignored), in one badger transaction unless the range exceeds
// badger's transaction limit; then it deletes in several transactions from
// the end that keeps the remaining log contiguous (from the top when the
// range includes the last entry, from the bottom otherwise).
func (s *RaftStore) DeleteRange(min, max uint64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.mu.closed {
		return ErrClosed
	}
	if min > max || s.mu.last == 0 || max < s.mu.first || min > s.mu.last {
		return nil
	}
	keys, err := s.logKeysIn(min, max, max >= s.mu.last)
	if err != nil {
		return fmt.Errorf("raft store: delete logs %d-%d: %w", min, max, err)
	}
	if err := s.deleteKeys(keys); err != nil {
		// Some transactions may have committed: find the bounds anew.
		if rerr := s.db.View(func(txn *badger.Txn) error {
			var err error
			s.mu.first, s.mu.last, err = scanLogBounds(txn)
			return err
		}); rerr != nil {
			s.logger.Error("raft store: rescan log bounds", "error", rerr)
		}
		return fmt.Errorf("raft store: delete logs %d-%d: %w", min, max, err)
	}
	return s.shrinkBounds(min, max)
}

// deleteKeys deletes keys in order, in as few transactions as badger's
// limit allows.
func (s *RaftStore) deleteKeys(keys [][]byte) error {
	txn := s.db.NewTransaction(true)
	defer func() { txn.Discard() }()
	for _, k := range keys {
		err := txn.Delete(k)
		if errors.Is(err, badger.ErrTxnTooBig) {
			if err := txn.Commit(); err != nil {
				return err
			}
			txn = s.db.NewTransaction(true)
			err = txn.Delete(k)
		}
		if err != nil {
			return err
		}
	}
	return txn.Commit()
}

// logKeysIn returns the keys of the stored entries in [min, max], in
// decreasing index order if reverse.
func (s *RaftStore) logKeysIn(min, max uint64, reverse bool) ([][]byte, error) {
	var keys [][]byte
	err := s.db.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: []byte(prefixRaftLog), Reverse: reverse})
		defer it.Close()
		start, inRange := raftLogKey(min), func(i uint64) bool { return i <= max }
		if reverse {
			start, inRange = raftLogKey(max), func(i uint64) bool { return i >= min }
		}
		for it.Seek(start); it.Valid(); it.Next() {
			k := it.Item().KeyCopy(nil)
			if len(k) != len(prefixRaftLog)+8 {
				return fmt.Errorf("log key %x: %w", k, ErrCorrupt)
			}
			if !inRange(raftLogIndex(k)) {
				break
			}
			keys = append(keys, k)
		}
		return nil
	})
	return keys, err
}

// shrinkBounds recomputes the cached bounds after [min, max] was deleted.
// Caller holds s.mu.
func (s *RaftStore) shrinkBounds(min, max uint64) error {
	firstGone := s.mu.first >= min && s.mu.first <= max
	lastGone := s.mu.last >= min && s.mu.last <= max
	if !firstGone && !lastGone {
		return nil
	}
	if (firstGone && lastGone) || (firstGone && max == math.MaxUint64) || (lastGone && min == 0) {
		s.mu.first, s.mu.last = 0, 0
		return nil
	}
	return s.db.View(func(txn *badger.Txn) error {
		from, reverse := max+1, false
		if lastGone {
			from, reverse = min-1, true
		}
		i, ok, err := seekLog(txn, from, reverse)
		switch {
		case err != nil:
			return err
		case !ok:
			s.mu.first, s.mu.last = 0, 0
		case lastGone:
			s.mu.last = i
		default:
			s.mu.first = i
		}
		return nil
	})
}

// scanLogBounds finds the first and last stored log index (0, 0 if none).
func scanLogBounds(txn *badger.Txn) (first, last uint64, err error) {
	first, ok, err := seekLog(txn, 0, false)
	if err != nil || !ok {
		return 0, 0, err
	}
	last, _, err = seekLog(txn, math.MaxUint64, true)
	return first, last, err
}

// seekLog returns the index of the first stored entry at or after from (at
// or before it if reverse); ok is false if there is none.
func seekLog(txn *badger.Txn, from uint64, reverse bool) (index uint64, ok bool, err error) {
	it := txn.NewIterator(badger.IteratorOptions{Prefix: []byte(prefixRaftLog), Reverse: reverse})
	defer it.Close()
	it.Seek(raftLogKey(from))
	if !it.Valid() {
		return 0, false, nil
	}
	k := it.Item().Key()
	if len(k) != len(prefixRaftLog)+8 {
		return 0, false, fmt.Errorf("log key %x: %w", k, ErrCorrupt)
	}
	return raftLogIndex(k), true, nil
}

// Set stores val under key (StableStore). Durable on return when
// SyncWrites is on.
func (s *RaftStore) Set(key, val []byte) error {
	if s.isClosed() {
		return ErrClosed
	}
	err := s.db.Update(func(txn *badger.Txn) error { return txn.Set(raftStableKey(key), val) })
	if err != nil {
		return fmt.Errorf("raft store: set %q: %w", key, err)
	}
	return nil
}

// Get returns the value stored under key, or nil with a nil error if there
// is none (raft treats any error as fatal). The slice is the caller's.
func (s *RaftStore) Get(key []byte) ([]byte, error) {
	if s.isClosed() {
		return nil, ErrClosed
	}
	var val []byte
	err := s.db.View(func(txn *badger.Txn) error {
		item, err := txn.Get(raftStableKey(key))
		if errors.Is(err, badger.ErrKeyNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		val, err = item.ValueCopy(nil)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("raft store: get %q: %w", key, err)
	}
	return val, nil
}

// SetUint64 stores val under key as 8 big-endian bytes.
func (s *RaftStore) SetUint64(key []byte, val uint64) error {
	return s.Set(key, binary.BigEndian.AppendUint64(nil, val))
}

// GetUint64 returns the value SetUint64 stored under key, or 0 with a nil
// error if there is none. A value that is not 8 bytes is an error wrapping
// ErrCorrupt.
func (s *RaftStore) GetUint64(key []byte) (uint64, error) {
	b, err := s.Get(key)
	switch {
	case err != nil:
		return 0, err
	case b == nil:
		return 0, nil
	case len(b) != 8:
		return 0, fmt.Errorf("raft store: %q holds %d bytes, not a uint64: %w", key, len(b), ErrCorrupt)
	}
	return binary.BigEndian.Uint64(b), nil
}

func (s *RaftStore) isClosed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.mu.closed
}

// gcLoop collects the value log: entries of 1 MiB or more live there and
// are garbage once raft compacts them away.
func (s *RaftStore) gcLoop() {
	defer s.wg.Done()
	t := time.NewTicker(raftStoreGCInterval)
	defer t.Stop()
	for {
		select {
		case <-s.stopCh:
			return
		case <-t.C:
			for s.db.RunValueLogGC(0.5) == nil {
				// Each successful run rewrote a value-log file; try again
				// until nothing is worth collecting.
			}
		}
	}
}

// Raft log encoding (the value of log/<index>), version 1. All integers are
// big-endian:
//
//	version     u8   = 1
//	index       u64  (must equal the key's index)
//	term        u64
//	type        u8   (raft.LogType)
//	appended    u8   0: AppendedAt is the zero time; 1: followed by
//	  seconds   i64  Unix seconds
//	  nanos     u32  nanoseconds within the second
//	data        u32 length ‖ bytes
//	extensions  u32 length ‖ bytes
//
// Empty Data and Extensions decode as nil.
const raftLogEncodingV1 = 1

func encodeRaftLog(l *raft.Log) []byte {
	b := make([]byte, 0, 1+8+8+1+1+12+4+len(l.Data)+4+len(l.Extensions))
	b = append(b, raftLogEncodingV1)
	b = binary.BigEndian.AppendUint64(b, l.Index)
	b = binary.BigEndian.AppendUint64(b, l.Term)
	b = append(b, byte(l.Type))
	if l.AppendedAt.IsZero() {
		b = append(b, 0)
	} else {
		b = append(b, 1)
		b = binary.BigEndian.AppendUint64(b, uint64(l.AppendedAt.Unix()))
		b = binary.BigEndian.AppendUint32(b, uint32(l.AppendedAt.Nanosecond()))
	}
	b = binary.BigEndian.AppendUint32(b, uint32(len(l.Data)))
	b = append(b, l.Data...)
	b = binary.BigEndian.AppendUint32(b, uint32(len(l.Extensions)))
	return append(b, l.Extensions...)
}

// decodeRaftLog decodes b, stored under index, into l. l's slices alias b.
func decodeRaftLog(index uint64, b []byte, l *raft.Log) error {
	d := decoder{b: b}
	if v := d.u8(); v != raftLogEncodingV1 {
		return fmt.Errorf("log %d: encoding version %d: %w", index, v, ErrCorrupt)
	}
	out := raft.Log{Index: d.u64(), Term: d.u64(), Type: raft.LogType(d.u8())}
	if d.u8() == 1 {
		sec, nsec := int64(d.u64()), d.u32()
		out.AppendedAt = time.Unix(sec, int64(nsec))
	}
	out.Data = d.bytes()
	out.Extensions = d.bytes()
	switch {
	case d.err:
		return fmt.Errorf("log %d: truncated value of %d bytes: %w", index, len(b), ErrCorrupt)
	case len(d.b) != 0:
		return fmt.Errorf("log %d: %d trailing bytes: %w", index, len(d.b), ErrCorrupt)
	case out.Index != index:
		return fmt.Errorf("log %d: value holds index %d: %w", index, out.Index, ErrCorrupt)
	}
	*l = out
	return nil
}

// decoder reads fixed-width big-endian fields; after a short read every
// further read returns zero and err is set.
type decoder struct {
	b   []byte
	err bool
}

func (d *decoder) take(n int) []byte {
	if d.err || len(d.b) < n {
		d.err = true
		return nil
	}
	v := d.b[:n:n]
	d.b = d.b[n:]
	return v
}

func (d *decoder) u8() byte {
	if v := d.take(1); v != nil {
		return v[0]
	}
	return 0
}

func (d *decoder) u32() uint32 {
	if v := d.take(4); v != nil {
		return binary.BigEndian.Uint32(v)
	}
	return 0
}

func (d *decoder) u64() uint64 {
	if v := d.take(8); v != nil {
		return binary.BigEndian.Uint64(v)
	}
	return 0
}

// bytes reads a u32 length and that many bytes (nil if the length is 0).
func (d *decoder) bytes() []byte {
	n := d.u32()
	if n == 0 || d.err {
		return nil
	}
	return d.take(int(n))
}
