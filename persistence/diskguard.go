package persistence

import (
	"fmt"
	"log/slog"
	"math"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// SpaceProbe returns the bytes an unprivileged process may still write on
// the filesystem holding dir (statfs's f_bavail × f_bsize). Injected in
// tests; StatfsFree in production.
type SpaceProbe func(dir string) (uint64, error)

// StatfsFree is the production SpaceProbe: unix.Statfs of dir. It costs
// one system call (about a microsecond), which is why DiskGuard samples it
// rather than asking per write.
func StatfsFree(dir string) (uint64, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return 0, fmt.Errorf("statfs %s: %w", dir, err)
	}
	return st.Bavail * uint64(st.Bsize), nil
}

// DefaultMinFreeDisk returns the default free-space reserve of a store
// whose memtable is memTableSize bytes: four memtables (256 MiB for the
// default 64 MiB). Badger writes its files through mmap'd regions it only
// sized with ftruncate (write-ahead and value logs, new tables), so a write
// into one on a full filesystem faults (SIGBUS) instead of failing; the
// reserve must hold what badger may still write after the guard refuses:
// the batch admitted last (at most MaxBatchBytes), the flush of a full
// memtable into a table (at most a memtable), the Raft store's own memtable
// (16 MiB) in a cluster, and the tables a compaction writes before it
// deletes the ones it merged. docs/design/persistence.md, "A full disk".
func DefaultMinFreeDisk(memTableSize int64) uint64 { return 4 * uint64(memTableSize) }

// DiskGuardConfig configures a DiskGuard.
type DiskGuardConfig struct {
	// Dir is the data dir whose filesystem is probed.
	Dir string
	// MinFree is the reserve in bytes: writes are refused while the
	// filesystem has less free. 0 disables the guard (Admit always
	// succeeds, nothing is probed).
	MinFree uint64
	// Probe measures free space; nil is StatfsFree.
	Probe SpaceProbe
	// Interval is the longest a sample is trusted. Default 1 s.
	Interval time.Duration
	// RecheckBytes makes Admit probe again once this many bytes were
	// admitted since the last sample, however recent. Default MinFree/8
	// (at least 64 KiB).
	RecheckBytes uint64
	// Now is the clock; nil is time.Now.
	Now func() time.Time
	// Logger receives the transitions (an ERROR when writes start being
	// refused, a WARN when they resume); nil logs nothing.
	Logger *slog.Logger
}

// DiskGuard refuses writes before the data dir's filesystem is full, as
// etcd's NOSPACE alarm does: while the free space (sampled, minus the bytes
// admitted since the sample) is under the reserve, Admit returns a
// *NoSpaceError and nothing is written; once space comes back (a later
// sample) writes are admitted again by themselves. Safe for concurrent use.
// A nil *DiskGuard admits everything.
type DiskGuard struct {
	cfg DiskGuardConfig

	mu struct {
		sync.Mutex
		free     uint64    // last sample, bytes
		sampled  time.Time // when; zero: never
		since    uint64    // bytes admitted since the sample
		low      bool      // writes are being refused
		probeErr bool      // the last probe failed (logged once)
		refused  uint64    // writes refused so far
	}
}

// NewDiskGuard returns a guard for cfg, with its defaults filled in. It does
// not probe until the first Admit or Sample.
func NewDiskGuard(cfg DiskGuardConfig) *DiskGuard {
	if cfg.Probe == nil {
		cfg.Probe = StatfsFree
	}
	if cfg.Interval <= 0 {
		cfg.Interval = time.Second
	}
	if cfg.RecheckBytes == 0 {
		cfg.RecheckBytes = max(cfg.MinFree/8, 64<<10)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &DiskGuard{cfg: cfg}
}

// Enabled reports whether the guard checks anything (MinFree > 0).
func (g *DiskGuard) Enabled() bool { return g != nil && g.cfg.MinFree > 0 }

// MinFree returns the reserve in bytes (0: disabled).
func (g *DiskGuard) MinFree() uint64 {
	if g == nil {
		return 0
	}
	return g.cfg.MinFree
}

// Admit decides whether a write of about n bytes may go ahead. It probes
// again when the sample is older than Interval, when RecheckBytes were
// admitted since, when the sample minus the bytes admitted since is under
// the reserve, or while writes are refused (so they resume with the first
// write after space came back). It returns nil and counts n, or a
// *NoSpaceError (errors.Is ErrNoSpace) when the filesystem has less free
// than the reserve; the caller must then write nothing.
func (g *DiskGuard) Admit(n int) error {
	if !g.Enabled() {
		return nil
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	now := g.cfg.Now()
	if g.mu.sampled.IsZero() || g.mu.low || now.Sub(g.mu.sampled) >= g.cfg.Interval ||
		g.mu.since >= g.cfg.RecheckBytes || g.estimateLocked() < g.cfg.MinFree {
		g.sampleLocked(now)
	}
	if g.mu.low {
		g.mu.refused++
		return &NoSpaceError{Dir: g.cfg.Dir, Free: g.mu.free, MinFree: g.cfg.MinFree}
	}
	g.mu.since += uint64(max(n, 0))
	return nil
}

// Sample probes now (the store's sampler calls it every Interval, so the
// metrics and the transition logs follow the filesystem without writes).
func (g *DiskGuard) Sample() {
	if !g.Enabled() {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.sampleLocked(g.cfg.Now())
}

// sampleLocked probes and logs a transition. A failed probe (logged once)
// admits writes: the guard never refuses one because statfs failed.
func (g *DiskGuard) sampleLocked(now time.Time) {
	free, err := g.cfg.Probe(g.cfg.Dir)
	if err != nil {
		if !g.mu.probeErr {
			g.cfg.Logger.Warn("cannot measure the data dir's free space; writes are not checked against the reserve until it can", "data_dir", g.cfg.Dir, "error", err)
		}
		g.mu.probeErr = true
		g.mu.sampled, g.mu.since, g.mu.low = now, 0, false
		return
	}
	g.mu.probeErr = false
	g.mu.free, g.mu.sampled, g.mu.since = free, now, 0
	low := free < g.cfg.MinFree
	switch {
	case low && !g.mu.low:
		g.cfg.Logger.Error("the data dir's filesystem is low on space: refusing writes until space is freed (reads keep working)",
			"data_dir", g.cfg.Dir, "free_bytes", free, "min_free_bytes", g.cfg.MinFree, "free", mib(free), "reserve", mib(g.cfg.MinFree))
	case !low && g.mu.low:
		g.cfg.Logger.Warn("the data dir's filesystem has space again: writes resume",
			"data_dir", g.cfg.Dir, "free_bytes", free, "min_free_bytes", g.cfg.MinFree, "refused_writes", g.mu.refused)
	}
	g.mu.low = low
}

// estimateLocked is the last sample minus what was admitted since.
func (g *DiskGuard) estimateLocked() uint64 {
	if g.mu.since >= g.mu.free {
		return 0
	}
	return g.mu.free - g.mu.since
}

// Free returns the free bytes of the last sample (0 before the first, or
// with the guard disabled).
func (g *DiskGuard) Free() uint64 {
	if !g.Enabled() {
		return 0
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.mu.free
}

// Low reports whether writes are being refused for space.
func (g *DiskGuard) Low() bool {
	if !g.Enabled() {
		return false
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.mu.low
}

// Refused returns how many writes Admit refused so far.
func (g *DiskGuard) Refused() uint64 {
	if !g.Enabled() {
		return 0
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.mu.refused
}

// NoSpaceError is a write refused because the data dir's filesystem has
// less free space than the reserve (DiskGuard). Nothing was written. It
// wraps ErrNoSpace; the gateway answers it RESOURCE_EXHAUSTED.
type NoSpaceError struct {
	// Dir is the data dir.
	Dir string
	// Free is the estimated free space, bytes.
	Free uint64
	// MinFree is the reserve, bytes.
	MinFree uint64
	// Manager, if set, is the cluster member whose data dir it is (the
	// leader, which refused a write forwarded to it).
	Manager string
}

// Error says how much is free, the reserve and what to do.
func (e *NoSpaceError) Error() string {
	who := ""
	if e.Manager != "" {
		who = "manager " + e.Manager + " (the Raft leader): "
	}
	return fmt.Sprintf("%sthe data dir's filesystem has %s free, below the reserve of %s: free space or move the data dir (%s) "+
		"to a larger filesystem; writes resume by themselves once there is space, nothing was written", who, mibFloor(e.Free), mib(e.MinFree), e.Dir)
}

// Unwrap makes errors.Is(err, ErrNoSpace) true.
func (e *NoSpaceError) Unwrap() error { return ErrNoSpace }

// mibFloor is mib with two decimals, rounded down: a free space just under
// the reserve never reads as equal to it.
func mibFloor(b uint64) string {
	return fmt.Sprintf("%.2f MiB", math.Floor(float64(b)/(1<<20)*100)/100)
}

// mib formats bytes as MiB with one decimal ("3.5 MiB").
func mib(b uint64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }
