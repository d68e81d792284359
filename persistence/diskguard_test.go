package persistence

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"
)

// fakeSpace is an injected SpaceProbe: free bytes set by the test, and a
// count of probes.
type fakeSpace struct {
	mu     sync.Mutex
	free   uint64
	err    error
	probes int
}

func (f *fakeSpace) set(free uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.free = free
}

func (f *fakeSpace) probe(string) (uint64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.probes++
	return f.free, f.err
}

func (f *fakeSpace) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.probes
}

// fakeClock is a settable clock.
type fakeClock struct{ t time.Time }

func (c *fakeClock) now() time.Time { return c.t }

func TestDiskGuard_Admit(t *testing.T) {
	const mb = 1 << 20
	type step struct {
		free    uint64        // the filesystem's free space before the write
		advance time.Duration // clock advance before the write
		n       int           // the write's bytes
		refused bool
		low     bool
	}
	tests := []struct {
		name    string
		minFree uint64
		steps   []step
	}{
		{"above the reserve", 10 * mb, []step{
			{free: 50 * mb, n: 1000}, {free: 50 * mb, n: 1000},
		}},
		{"below the reserve is refused", 10 * mb, []step{
			{free: 9 * mb, n: 1, refused: true, low: true},
		}},
		{"exactly the reserve is admitted", 10 * mb, []step{
			{free: 10 * mb, n: 1},
		}},
		{"refused, then admitted again once space is back, without waiting for the interval", 10 * mb, []step{
			{free: 20 * mb, n: 1},
			{free: 5 * mb, advance: time.Second, n: 1, refused: true, low: true},
			{free: 5 * mb, n: 1, refused: true, low: true},
			{free: 30 * mb, n: 1},
		}},
		{"a fresh sample is trusted until the admitted bytes bring the estimate under the reserve", 10 * mb, []step{
			{free: 12 * mb, n: mb},                         // sampled: 12, estimate 11
			{free: 9 * mb, n: mb},                          // estimate 11 ≥ 10: no probe, admitted; estimate 10
			{free: 9 * mb, n: mb},                          // estimate 10 ≥ 10: admitted; estimate 9
			{free: 9 * mb, n: 1, refused: true, low: true}, // estimate 9 < 10: probed, refused
		}},
		{"a stale sample is probed again", 10 * mb, []step{
			{free: 100 * mb, n: 1},
			{free: 1 * mb, advance: 2 * time.Second, n: 1, refused: true, low: true},
		}},
		{"disabled", 0, []step{
			{free: 0, n: 1 << 30},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fs := &fakeSpace{}
			clk := &fakeClock{t: time.Unix(1_000_000, 0)}
			g := NewDiskGuard(DiskGuardConfig{Dir: "/data", MinFree: tt.minFree, Probe: fs.probe, Now: clk.now, RecheckBytes: 64 * mb})
			refused := uint64(0)
			for i, s := range tt.steps {
				fs.set(s.free)
				clk.t = clk.t.Add(s.advance)
				err := g.Admit(s.n)
				if got := err != nil; got != s.refused {
					t.Fatalf("step %d: Admit(%d) with %d free = %v, want refused %v", i, s.n, s.free, err, s.refused)
				}
				if err != nil {
					refused++
					var ns *NoSpaceError
					if !errors.Is(err, ErrNoSpace) || !errors.As(err, &ns) {
						t.Fatalf("step %d: %v is not a *NoSpaceError wrapping ErrNoSpace", i, err)
					}
					if ns.Free != s.free || ns.MinFree != tt.minFree {
						t.Fatalf("step %d: error says %d free of reserve %d, want %d of %d", i, ns.Free, ns.MinFree, s.free, tt.minFree)
					}
				}
				if g.Low() != s.low {
					t.Fatalf("step %d: Low() = %v, want %v", i, g.Low(), s.low)
				}
			}
			if g.Refused() != refused {
				t.Fatalf("Refused() = %d, want %d", g.Refused(), refused)
			}
		})
	}
}

func TestDiskGuard_SamplesNotPerWrite(t *testing.T) {
	fs := &fakeSpace{free: 1 << 30}
	clk := &fakeClock{t: time.Unix(1_000_000, 0)}
	g := NewDiskGuard(DiskGuardConfig{Dir: "/data", MinFree: 1 << 20, Probe: fs.probe, Now: clk.now})
	for range 1000 {
		if err := g.Admit(100); err != nil {
			t.Fatal(err)
		}
	}
	if n := fs.count(); n != 1 {
		t.Fatalf("1000 small writes within the interval probed %d times, want 1", n)
	}
	clk.t = clk.t.Add(time.Second)
	if err := g.Admit(100); err != nil {
		t.Fatal(err)
	}
	if n := fs.count(); n != 2 {
		t.Fatalf("a write after the interval probed %d times in all, want 2", n)
	}
}

func TestDiskGuard_LogsOncePerTransition(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&buf, nil))
	fs := &fakeSpace{free: 1 << 30}
	g := NewDiskGuard(DiskGuardConfig{Dir: "/data", MinFree: 100 << 20, Probe: fs.probe, Logger: log})
	for _, free := range []uint64{1 << 30, 10 << 20, 10 << 20, 5 << 20, 1 << 30, 1 << 30} {
		fs.set(free)
		g.Sample()
		_ = g.Admit(1)
	}
	out := buf.String()
	if n := strings.Count(out, "level=ERROR"); n != 1 {
		t.Errorf("%d ERROR lines, want 1:\n%s", n, out)
	}
	if n := strings.Count(out, "level=WARN"); n != 1 {
		t.Errorf("%d WARN lines, want 1:\n%s", n, out)
	}
	if !strings.Contains(out, "refusing writes") || !strings.Contains(out, "writes resume") {
		t.Errorf("the logs do not say writes are refused and resume:\n%s", out)
	}
}

func TestDiskGuard_ProbeErrorAdmits(t *testing.T) {
	var buf bytes.Buffer
	fs := &fakeSpace{err: errors.New("statfs /data: no such file or directory")}
	g := NewDiskGuard(DiskGuardConfig{Dir: "/data", MinFree: 1 << 20, Probe: fs.probe, Logger: slog.New(slog.NewTextHandler(&buf, nil))})
	for range 3 {
		if err := g.Admit(1); err != nil {
			t.Fatalf("a write was refused because the probe failed: %v", err)
		}
		g.Sample()
	}
	if n := strings.Count(buf.String(), "cannot measure"); n != 1 {
		t.Errorf("the probe failure was logged %d times, want once:\n%s", n, buf.String())
	}
}

func TestNoSpaceError_Message(t *testing.T) {
	err := &NoSpaceError{Dir: "/var/lib/norsk-manager", Free: 3<<20 + 4095, MinFree: 256 << 20}
	want := "the data dir's filesystem has 3.00 MiB free, below the reserve of 256.0 MiB: free space or move the data dir (/var/lib/norsk-manager)"
	if !strings.HasPrefix(err.Error(), want) {
		t.Fatalf("message %q, want it to start %q", err.Error(), want)
	}
	if just := (&NoSpaceError{Free: 72<<20 - 1, MinFree: 72 << 20}).Error(); !strings.Contains(just, "has 71.99 MiB free, below the reserve of 72.0 MiB") {
		t.Fatalf("a free space just under the reserve reads %q", just)
	}
}

func TestLocalLog_Append_NoSpace(t *testing.T) {
	fs := &fakeSpace{free: 1 << 30}
	cfg := DefaultConfig(t.TempDir())
	cfg.SyncWrites, cfg.GCInterval = false, 0
	cfg.MinFreeDisk = 128 << 20
	cfg.SpaceProbe = fs.probe
	s, l := TestStoreWithConfig(t, cfg)
	ctx := context.Background()
	put := func(id string, seq Seq) error {
		_, err := l.Append(ctx, JobKey(id), seq, Change{Record: jobRecord(id, nil, time.Time{}), At: time.Now()})
		return err
	}
	if err := put("a", 0); err != nil {
		t.Fatal(err)
	}
	fs.set(10 << 20)
	s.DiskGuard().Sample() // what the store's sampler does every second
	err := put("b", 0)
	if !errors.Is(err, ErrNoSpace) || !strings.Contains(err.Error(), "below the reserve of 128.0 MiB") {
		t.Fatalf("append with 10 MiB free of a 128 MiB reserve: %v, want ErrNoSpace naming the reserve", err)
	}
	if _, _, err := s.Load(JobKey("b")); !errors.Is(err, ErrNotFound) {
		t.Fatalf("the refused append was written: Load = %v", err)
	}
	if _, seq, err := s.Load(JobKey("a")); err != nil || seq != 1 {
		t.Fatalf("reads while refusing writes: Load(job/a) = seq %d, %v", seq, err)
	}
	if !s.DiskGuard().Low() {
		t.Fatal("the guard does not report low space")
	}
	fs.set(1 << 30)
	if err := put("b", 0); err != nil {
		t.Fatalf("append after space came back: %v", err)
	}
}

func TestConfig_Validate_MinFreeDisk(t *testing.T) {
	tests := []struct {
		minFree uint64
		ok      bool
	}{
		{0, true},
		{68 << 20, true},
		{DefaultMinFreeDisk(64 << 20), true},
		{68<<20 - 1, false},
		{4 << 20, false},
	}
	for _, tt := range tests {
		cfg := DefaultConfig("/d")
		cfg.MinFreeDisk = tt.minFree
		err := cfg.Validate()
		if (err == nil) != tt.ok {
			t.Errorf("MinFreeDisk %d: Validate = %v, want ok %v", tt.minFree, err, tt.ok)
		}
		if err != nil && !strings.Contains(err.Error(), "MinFreeDisk") {
			t.Errorf("the error %q does not name MinFreeDisk", err)
		}
	}
}
