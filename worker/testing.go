package worker

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestLogger returns a logger that writes to t.Log.
func TestLogger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(testLogWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

type testLogWriter struct{ t testing.TB }

func (w testLogWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// TestAgent runs an Agent over rt with DevConfig (loopback, port 0, a
// state directory from t.TempDir, logs to t) modified by mutate, and
// returns it once it listens. The agent is stopped when the test ends (its
// jobs keep running: stop them, or shut the runtime down, in the test's
// own cleanup). Run's result is available from the returned channel
// (buffered; it receives exactly once).
func TestAgent(t testing.TB, rt Runtime, mutate func(*Config)) (*Agent, <-chan error) {
	t.Helper()
	cfg := DevConfig()
	cfg.StateDir = t.TempDir()
	cfg.Logger = TestLogger(t)
	cfg.Runtime = rt
	if mutate != nil {
		mutate(&cfg)
	}
	a, err := New(cfg)
	if err != nil {
		t.Fatalf("worker.TestAgent: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	errCh := make(chan error, 1)
	runDone := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer close(runDone)
		errCh <- a.Run(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		wg.Wait()
	})
	timer := time.NewTimer(10 * time.Second)
	defer timer.Stop()
	select {
	case <-a.Ready():
	case <-timer.C:
		t.Fatal("worker.TestAgent: agent did not start listening within 10s")
	case <-runDone:
		t.Fatalf("worker.TestAgent: agent stopped before listening: %v", <-errCh)
	}
	return a, errCh
}
