package persistence

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/dgraph-io/badger/v4"
)

// FormatVersion is the version of the on-disk layout (keys.go, the record
// types of proto/internal). A store of another version is refused at Open.
const FormatVersion = 1

// markerFile is written into the data dir when it is initialised; its
// presence distinguishes "a new data dir" from "a data dir whose store has
// gone missing", which must never be silently re-initialised.
const markerFile = "norsk-manager.json"

// storeSubdir holds the badger files inside the data dir.
const storeSubdir = "store"

// raftSubdir is where a cluster member keeps its Raft log and snapshots
// (cluster/agent). Its presence marks a data dir of a cluster member whose
// marker predates Mode (see inferMode).
const raftSubdir = "raft"

// Mode is how a data dir is used: by a single manager, whose writes go
// straight to the store, or by a member of an HA cluster, whose store is
// Raft's state machine. The two must never share a data dir: a single
// manager's writes never reach the cluster's Raft log (so the members'
// states split), and a single manager started on a member's dir would dial
// the cluster's workers and accept writes the cluster never sees.
type Mode string

const (
	// ModeUnchecked opens any data dir and records no mode in a new one
	// (tools, benchmarks, tests of this package).
	ModeUnchecked Mode = ""
	// ModeSingle is a single manager (no cluster flags).
	ModeSingle Mode = "single"
	// ModeCluster is a member of an HA cluster.
	ModeCluster Mode = "cluster"
)

// Config configures a Store. Use DefaultConfig and override fields.
type Config struct {
	// Dir is the data directory. Created (with a marker file) if it does not
	// exist; an existing directory must be empty or hold a store made by
	// this program. Required unless InMemory.
	Dir string
	// InMemory keeps everything in memory (tests only; nothing survives).
	InMemory bool
	// SyncWrites makes every commit durable (fsync) before it is
	// acknowledged. Default true; false only for tests and benchmarks.
	SyncWrites bool
	// EventRetention is how many events the event log keeps; older ones are
	// trimmed as new ones are appended, and a subscriber resuming before the
	// oldest retained index gets an explicit reset. Default 100000.
	EventRetention uint64
	// AuditRetention is how many audit entries the audit log keeps; older
	// ones are dropped as new ones are appended, the last dropped one
	// replaced by an anchor so the chain still verifies (audit.go).
	// Default 100000; 0 keeps every entry. Every manager of a cluster must
	// use the same value (the FSM trims deterministically).
	AuditRetention uint64
	// MaxBatch bounds how many appends one group commit carries. Default 256.
	MaxBatch int
	// MaxBatchBytes bounds the encoded size of one group commit, and so of
	// one change (larger ones fail with ErrTooLarge). Default 4 MiB. It must
	// stay under badger's transaction limit, 15% of MemTableSize (Validate
	// allows at most 12%).
	MaxBatchBytes int
	// MemTableSize is badger's memtable size in bytes; it bounds the memory
	// of recent writes and the size of one transaction. Default 64 MiB, at
	// least 7 MiB.
	MemTableSize int64
	// BlockCacheSize is badger's block cache in bytes. Default 32 MiB.
	BlockCacheSize int64
	// GCInterval is how often value-log garbage collection runs. Default 5m;
	// 0 disables it.
	GCInterval time.Duration
	// MinFreeDisk is the free-space reserve of the data dir's filesystem,
	// in bytes: while less is free, writes are refused with a
	// *NoSpaceError (ErrNoSpace) and nothing is written, before badger
	// could fault on a full disk (DiskGuard). Default
	// DefaultMinFreeDisk(MemTableSize), 256 MiB; 0 disables the guard.
	// Ignored when InMemory.
	MinFreeDisk uint64
	// SpaceProbe measures the data dir's free space; nil is StatfsFree
	// (tests inject their own).
	SpaceProbe SpaceProbe
	// Mode is the manager mode the data dir is opened in. A new data dir
	// records it in its marker; a data dir recorded (or inferred, for a
	// marker without a mode) as the other mode is refused with ErrWrongMode,
	// and nothing in it is touched. ModeUnchecked (the zero value) skips
	// the check. Ignored when InMemory.
	Mode Mode
	// Logger receives store logs; nil logs nothing.
	Logger *slog.Logger
}

// minMemTableSize is the smallest memtable badger opens with its default
// 1 MiB value threshold: ValueThreshold <= 15% of MemTableSize.
const minMemTableSize = 7 << 20

// DefaultConfig returns a Config with production defaults for dir.
func DefaultConfig(dir string) Config {
	return Config{
		Dir:            dir,
		SyncWrites:     true,
		EventRetention: 100_000,
		AuditRetention: 100_000,
		MaxBatch:       256,
		MaxBatchBytes:  4 << 20,
		MemTableSize:   64 << 20,
		BlockCacheSize: 32 << 20,
		GCInterval:     5 * time.Minute,
		MinFreeDisk:    DefaultMinFreeDisk(64 << 20),
	}
}

// Validate reports the first invalid field.
func (c Config) Validate() error {
	switch {
	case c.Dir == "" && !c.InMemory:
		return errors.New("persistence config: Dir is required (or set InMemory)")
	case c.Mode != ModeUnchecked && c.Mode != ModeSingle && c.Mode != ModeCluster:
		return fmt.Errorf("persistence config: Mode %q must be %q, %q or empty", c.Mode, ModeSingle, ModeCluster)
	case c.MaxBatch < 1:
		return fmt.Errorf("persistence config: MaxBatch (%d) must be at least 1", c.MaxBatch)
	case c.MaxBatchBytes < 1<<16:
		return fmt.Errorf("persistence config: MaxBatchBytes (%d) must be at least 65536", c.MaxBatchBytes)
	case c.MemTableSize < minMemTableSize:
		return fmt.Errorf("persistence config: MemTableSize (%d) must be at least 7 MiB: badger refuses a memtable whose transaction limit (15%%) is under its 1 MiB value threshold",
			c.MemTableSize)
	case int64(c.MaxBatchBytes)*100 > c.MemTableSize*12:
		return fmt.Errorf("persistence config: MaxBatchBytes (%d) must be at most 12%% of MemTableSize (%d): badger refuses transactions over 15%%",
			c.MaxBatchBytes, c.MemTableSize)
	case c.MinFreeDisk != 0 && c.MinFreeDisk < c.MinSafeFreeDisk():
		return fmt.Errorf("persistence config: MinFreeDisk (%s) must be 0 (off) or at least %s, the memtable (%s) plus one batch (%s): "+
			"badger flushes a full memtable into a table of up to its size through an mmap'd file, and a flush that finds the disk full crashes the manager",
			mib(c.MinFreeDisk), mib(c.MinSafeFreeDisk()), mib(uint64(c.MemTableSize)), mib(uint64(c.MaxBatchBytes)))
	}
	return nil
}

// MinSafeFreeDisk is the smallest MinFreeDisk that keeps badger from
// faulting on a full disk in the write path: what is left when the guard
// still admits a write must hold that batch and the table a full memtable
// is then flushed into (at most MemTableSize, also at the first open after
// a crash, which flushes the replayed write-ahead log).
func (c Config) MinSafeFreeDisk() uint64 { return uint64(c.MemTableSize) + uint64(c.MaxBatchBytes) }

// Store is the manager's badger store with its FSM. Open it, wrap it in a
// log (NewLocalLog) to write, and read with View and the read helpers.
type Store struct {
	cfg    Config
	db     *badger.DB
	lock   *dirLock // nil when InMemory; released by Close after db
	fsm    *FSM
	logger *slog.Logger
	// space refuses writes while the data dir is low on space (nil when
	// InMemory: admits everything).
	space *DiskGuard

	stopCh chan struct{} // closed by Close
	wg     sync.WaitGroup
	once   sync.Once
}

// marker is the content of the data dir's marker file.
type marker struct {
	Format    int       `json:"format"`
	StoreID   string    `json:"store_id"`
	CreatedAt time.Time `json:"created_at"`
	// Mode is the manager mode the dir was initialised in (Config.Mode);
	// empty in markers written before modes were recorded, and by
	// ModeUnchecked opens.
	Mode Mode `json:"mode,omitempty"`
}

// Open opens (or initialises) the store in cfg.Dir. It refuses, with an
// error naming the directory and the reason and without changing
// anything, a data dir that exists but is not a norsk-manager store, one
// whose store files are missing, one of another format version (errors
// wrapping ErrCorrupt), one of the other mode (ErrWrongMode), one another
// process has open (ErrInUse), one whose files fail their integrity checks
// (a *DamageError naming the file and the way out, see integrity.go), and
// one badger cannot open. Zero-length logs a crash left behind are removed
// first (removeEmptyLogs): a store opens after a SIGKILL at any instant.
func Open(cfg Config) (*Store, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	logger := cfg.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	var (
		db          *badger.DB
		lock        *dirLock
		initPending *initPlan
	)
	if cfg.InMemory {
		var err error
		if db, err = badger.Open(storeOptions(badger.DefaultOptions("").WithInMemory(true), cfg, logger)); err != nil {
			return nil, fmt.Errorf("open in-memory store: %w", err)
		}
	} else {
		dir, plan, err := prepareDataDir(cfg.Dir, cfg.Mode, logger)
		if err != nil {
			return nil, err
		}
		initPending = plan
		od, err := openBadgerDir(storeOptions(badger.DefaultOptions(dir), cfg, logger), cfg.Dir, cfg.Mode, logger)
		if err != nil {
			return nil, err
		}
		// Under the store's lock: no other manager's restore is running.
		removeRestoreSpools(cfg.Dir, logger)
		db, lock = od.db, od.lock
	}
	fail := func(err error) (*Store, error) {
		db.Close()
		lock.release()
		return nil, fmt.Errorf("data dir %s: %w", cfg.Dir, err)
	}
	if err := checkFormat(db); err != nil {
		return fail(err)
	}
	if initPending != nil {
		if err := initPending.finish(db, cfg.Dir, logger); err != nil {
			return fail(err)
		}
	}
	fsm, err := newFSM(db, cfg.EventRetention)
	if err != nil {
		return fail(err)
	}
	fsm.auditRetention = cfg.AuditRetention
	s := &Store{cfg: cfg, db: db, lock: lock, fsm: fsm, logger: logger, stopCh: make(chan struct{})}
	if !cfg.InMemory {
		s.space = NewDiskGuard(DiskGuardConfig{Dir: cfg.Dir, MinFree: cfg.MinFreeDisk, Probe: cfg.SpaceProbe, Logger: logger})
	}
	if s.space.Enabled() {
		s.space.Sample()
		s.wg.Add(1)
		go s.spaceLoop()
	}
	if cfg.GCInterval > 0 && !cfg.InMemory {
		s.wg.Add(1)
		go s.gcLoop()
	}
	return s, nil
}

// storeOptions applies cfg to badger options of the FSM store.
func storeOptions(opts badger.Options, cfg Config, logger *slog.Logger) badger.Options {
	return opts.WithSyncWrites(cfg.SyncWrites).
		WithDetectConflicts(false).
		WithNumVersionsToKeep(1).
		WithMemTableSize(cfg.MemTableSize).
		WithBlockCacheSize(cfg.BlockCacheSize).
		WithLogger(badgerLogger{logger})
}

// prepareDataDir checks (or initialises) dir for use in mode and returns
// the badger dir. For a new data dir it also returns the plan that writes
// its marker once the store exists (initPlan.finish).
func prepareDataDir(dir string, mode Mode, logger *slog.Logger) (string, *initPlan, error) {
	storeDir := filepath.Join(dir, storeSubdir)
	mb, err := os.ReadFile(filepath.Join(dir, markerFile))
	switch {
	case err == nil:
		var m marker
		if err := json.Unmarshal(mb, &m); err != nil {
			return "", nil, fmt.Errorf("data dir %s: marker file %s is unreadable (%v): %w", dir, markerFile, err, ErrCorrupt)
		}
		if m.Format != FormatVersion {
			return "", nil, fmt.Errorf("data dir %s: format version %d, this build reads %d: %w", dir, m.Format, FormatVersion, ErrCorrupt)
		}
		if _, err := os.Stat(filepath.Join(storeDir, "MANIFEST")); err != nil {
			return "", nil, fmt.Errorf("data dir %s was initialised on %s but its store (%s) is missing or incomplete: %v; "+
				"refusing to start with empty state — restore the store, or use a new --data-dir: %w",
				dir, m.CreatedAt.Format(time.RFC3339), storeDir, err, ErrCorrupt)
		}
		if mode == ModeUnchecked {
			return storeDir, nil, nil
		}
		held, inferred := m.Mode, false
		if held == "" {
			held, inferred = inferMode(dir), true
		}
		if err := checkMode(dir, held, inferred, mode); err != nil {
			return "", nil, err
		}
		if m.Mode == "" {
			// Record the inferred mode, so that the rule is applied once,
			// while the raft subdir it relies on is still there.
			m.Mode = held
			if err := writeMarker(dir, m); err != nil {
				return "", nil, err
			}
			logger.Info("recorded the data dir's mode in its marker", "dir", dir, "mode", held)
		}
		return storeDir, nil, nil
	case !errors.Is(err, fs.ErrNotExist):
		return "", nil, fmt.Errorf("data dir %s: read marker: %w", dir, err)
	}
	entries, err := os.ReadDir(dir)
	resumed := false
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return "", nil, fmt.Errorf("data dir %s: %w", dir, err)
	case len(entries) > 0:
		if resumed = interruptedInit(dir, entries); !resumed {
			return "", nil, errNotDataDir(dir)
		}
	}
	if err := os.MkdirAll(storeDir, 0o700); err != nil {
		return "", nil, fmt.Errorf("create data dir %s: %w", dir, err)
	}
	id := make([]byte, 16)
	if _, err := rand.Read(id); err != nil {
		return "", nil, err
	}
	m := marker{Format: FormatVersion, StoreID: hex.EncodeToString(id), CreatedAt: time.Now().UTC(), Mode: mode}
	return storeDir, &initPlan{marker: m, resumed: resumed}, nil
}

// writeMarker writes m as dir's marker file, atomically and durably.
func writeMarker(dir string, m marker) error {
	mb, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return err
	}
	if err := writeFileSync(filepath.Join(dir, markerFile), mb); err != nil {
		return fmt.Errorf("data dir %s: write marker: %w", dir, err)
	}
	return nil
}

// inferMode is the mode of a data dir whose marker predates Mode: a
// cluster member's dir has a raft subdirectory (its Raft log, created when
// the member first starts); any other dir was a single manager's.
func inferMode(dir string) Mode {
	if fi, err := os.Stat(filepath.Join(dir, raftSubdir)); err == nil && fi.IsDir() {
		return ModeCluster
	}
	return ModeSingle
}

// checkMode refuses a data dir holding mode held when opened as want.
func checkMode(dir string, held Mode, inferred bool, want Mode) error {
	if held == want {
		return nil
	}
	how := "recorded in its marker"
	switch {
	case inferred && held == ModeCluster:
		how = "inferred: its marker predates modes and it has a " + raftSubdir + "/ subdirectory"
	case inferred:
		how = "inferred: its marker predates modes and it has no " + raftSubdir + "/ subdirectory"
	}
	var holds, asked, todo string
	switch held {
	case ModeCluster:
		holds = "a cluster member's state"
	case ModeSingle:
		holds = "a single manager's state"
	default:
		holds = fmt.Sprintf("state of unknown mode %q", held)
	}
	switch want {
	case ModeCluster:
		asked = "as a cluster member (--join/--bootstrap-expect)"
		todo = "start it without cluster flags to run the single manager it belongs to, or give this cluster member a fresh --data-dir " +
			"(a single manager's jobs are not moved into a cluster: its writes never went through Raft)"
	default:
		asked = "as a single manager (no cluster flags)"
		todo = "this data dir belongs to a cluster member; start it with its cluster flags (--join/--bootstrap-expect, --name, ...), " +
			"or use a fresh --data-dir"
	}
	return fmt.Errorf("data dir %s holds %s (mode %q, %s) but this manager was started %s; refusing to start, nothing was changed: %s: %w",
		dir, holds, held, how, asked, todo, ErrWrongMode)
}

// removeRestoreSpools removes the temporary files of snapshot restores
// that a crash left in dir.
func removeRestoreSpools(dir string, logger *slog.Logger) {
	spools, _ := filepath.Glob(filepath.Join(dir, "snapshot-restore-*.tmp"))
	for _, p := range spools {
		if err := os.Remove(p); err != nil {
			logger.Warn("remove stale snapshot spool", "path", p, "error", err)
		}
	}
}

// writeFileSync writes b to path atomically and durably.
func writeFileSync(path string, b []byte) error {
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		return err
	}
	d, err := os.Open(filepath.Dir(path))
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// checkFormat writes the format version into a new store or checks it.
func checkFormat(db *badger.DB) error {
	return db.Update(func(txn *badger.Txn) error {
		v, err := getU64(txn, keyFormat)
		if err != nil {
			return err
		}
		switch v {
		case 0:
			return setU64(txn, keyFormat, FormatVersion)
		case FormatVersion:
			return nil
		}
		return fmt.Errorf("store format version %d, this build reads %d: %w", v, FormatVersion, ErrCorrupt)
	})
}

// FSM returns the store's state machine (for the log that drives it).
func (s *Store) FSM() *FSM { return s.fsm }

// Close stops background work and closes badger. Idempotent. The log
// driving the FSM must be closed first.
func (s *Store) Close() error {
	var err error
	s.once.Do(func() {
		close(s.stopCh)
		s.wg.Wait()
		err = s.db.Close()
		s.lock.release()
	})
	return err
}

func (s *Store) gcLoop() {
	defer s.wg.Done()
	t := time.NewTicker(s.cfg.GCInterval)
	defer t.Stop()
	for {
		select {
		case <-s.stopCh:
			return
		case <-t.C:
			if s.space.Low() {
				// Collecting rewrites live values before it frees a
				// file: it needs the space it would free.
				continue
			}
			for s.db.RunValueLogGC(0.5) == nil {
				// Each successful run rewrote a value-log file; try again
				// until nothing is worth collecting.
			}
		}
	}
}

// spaceLoop samples the data dir's free space every second, so the
// metrics and the low-space logs follow the filesystem without writes (a
// cluster follower, whose writes come from the leader, is told this way).
func (s *Store) spaceLoop() {
	defer s.wg.Done()
	t := time.NewTicker(s.space.cfg.Interval)
	defer t.Stop()
	for {
		select {
		case <-s.stopCh:
			return
		case <-t.C:
			s.space.Sample()
		}
	}
}

// DiskGuard returns the store's free-space guard (nil for an in-memory
// store; a nil guard admits everything). A cluster member's replicator
// admits leader writes through it; the agent exports its metrics.
func (s *Store) DiskGuard() *DiskGuard { return s.space }

// WaitForEvents blocks until the event log's head is above after, and
// returns the head; it returns ctx.Err() if ctx ends first.
func (s *Store) WaitForEvents(ctx context.Context, after Index) (Index, error) {
	for {
		head, ch := s.fsm.headChanged()
		if head > after {
			return head, nil
		}
		select {
		case <-ctx.Done():
			return head, ctx.Err()
		case <-s.stopCh:
			return head, ErrClosed
		case <-ch:
		}
	}
}

// badgerLogger routes badger's logs to slog: its errors and warnings only.
type badgerLogger struct{ l *slog.Logger }

func (b badgerLogger) Errorf(f string, a ...any)   { b.l.Error("badger: " + fmt.Sprintf(f, a...)) }
func (b badgerLogger) Warningf(f string, a ...any) { b.l.Warn("badger: " + fmt.Sprintf(f, a...)) }
func (b badgerLogger) Infof(string, ...any)        {}
func (b badgerLogger) Debugf(string, ...any)       {}

// World returns the store's in-memory view of the records the placement
// engine reads (world.go), fed by every apply of this store.
func (s *Store) World() *World { return s.fsm.world }
