package membership

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestLogger returns a debug-level logger writing to t.Log that drops lines
// once the test has finished (memberlist's goroutines may still log briefly
// after Shutdown, and t.Log would panic then).
func TestLogger(t testing.TB) *slog.Logger {
	return testLoggerAt(t, slog.LevelDebug)
}

func testLoggerAt(t testing.TB, level slog.Level) *slog.Logger {
	w := &testLogWriter{t: t}
	t.Cleanup(w.close)
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: level}))
}

type testLogWriter struct {
	t    testing.TB
	mu   sync.Mutex
	done bool // guarded by mu
}

func (w *testLogWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.done {
		w.t.Log(strings.TrimRight(string(p), "\n"))
	}
	return len(p), nil
}

func (w *testLogWriter) close() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.done = true
}

// TestConfig returns LocalConfig (127.0.0.1, free port) named name, with
// Label set to the test's name (so concurrent tests' clusters never merge,
// even through a reused port) and logs to t.
func TestConfig(t testing.TB, name string) Config {
	cfg := LocalConfig()
	cfg.Name = name
	cfg.Label = t.Name()
	if len(cfg.Label) > 255 {
		cfg.Label = cfg.Label[:255]
	}
	cfg.Logger = TestLogger(t)
	return cfg
}

// TestMembership starts a Membership from TestConfig(t, name) modified by
// mutate (may be nil), failing the test on error; it is shut down when the
// test ends.
func TestMembership(t testing.TB, name string, mutate func(*Config)) *Membership {
	t.Helper()
	cfg := TestConfig(t, name)
	if mutate != nil {
		mutate(&cfg)
	}
	m, err := New(cfg)
	if err != nil {
		t.Fatalf("membership.New(%s): %v", name, err)
	}
	t.Cleanup(func() { _ = m.Shutdown() })
	return m
}

// TestJoin makes ms[1:] join ms[0] and waits (up to 10 s) until every one
// of them sees len(ms) alive members, failing the test otherwise.
func TestJoin(t testing.TB, ms ...*Membership) {
	t.Helper()
	seed := ms[0].LocalMember().Addr
	for _, m := range ms[1:] {
		if _, err := m.ml.Join([]string{seed}); err != nil {
			t.Fatalf("%s: join %s: %v", m.cfg.Name, seed, err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, m := range ms {
		if err := m.WaitForMembers(ctx, len(ms)); err != nil {
			t.Fatalf("%s: %v", m.cfg.Name, err)
		}
	}
}
