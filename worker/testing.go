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

// Collector drains a Runtime's events into a list tests can wait on.
// Create it with Collect.
type Collector struct {
	wg   sync.WaitGroup
	stop chan struct{}
	mu   struct {
		sync.Mutex
		events  []Event
		changed chan struct{}
	}
}

// CollectTimeout bounds every wait of a Collector.
var CollectTimeout = 10 * time.Second

// Collect starts draining rt.Events() until the test ends.
func Collect(t testing.TB, rt Runtime) *Collector {
	c := &Collector{stop: make(chan struct{})}
	c.mu.changed = make(chan struct{})
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		for {
			select {
			case ev := <-rt.Events():
				c.mu.Lock()
				c.mu.events = append(c.mu.events, ev)
				close(c.mu.changed)
				c.mu.changed = make(chan struct{})
				c.mu.Unlock()
			case <-c.stop:
				return
			}
		}
	}()
	t.Cleanup(func() {
		close(c.stop)
		c.wg.Wait()
	})
	return c
}

// All returns the events received so far, in order.
func (c *Collector) All() []Event {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]Event(nil), c.mu.events...)
}

// WaitN waits until n events match pred and returns them; it fails the
// test, listing every event, after CollectTimeout. what names the events
// in that message.
func (c *Collector) WaitN(t testing.TB, n int, what string, pred func(Event) bool) []Event {
	t.Helper()
	deadline := time.NewTimer(CollectTimeout)
	defer deadline.Stop()
	for {
		c.mu.Lock()
		var got []Event
		for _, ev := range c.mu.events {
			if pred(ev) {
				got = append(got, ev)
			}
		}
		changed := c.mu.changed
		c.mu.Unlock()
		if len(got) >= n {
			return got
		}
		select {
		case <-changed:
		case <-deadline.C:
			t.Fatalf("timed out waiting for %d× %s; have %d; events:\n%s", n, what, len(got), DescribeEvents(c.All()))
		}
	}
}

// Wait waits for the first event matching pred (see WaitN).
func (c *Collector) Wait(t testing.TB, what string, pred func(Event) bool) Event {
	t.Helper()
	return c.WaitN(t, 1, what, pred)[0]
}

// Count returns how many events received so far match pred.
func (c *Collector) Count(pred func(Event) bool) int {
	n := 0
	for _, ev := range c.All() {
		if pred(ev) {
			n++
		}
	}
	return n
}

// DescribeEvents renders events one per line, for test failures.
func DescribeEvents(evs []Event) string {
	var b strings.Builder
	for _, ev := range evs {
		b.WriteString("  " + ev.Kind.String() + " " + ev.Key.String())
		if ev.Reason != "" {
			b.WriteString(" reason=" + ev.Reason)
		}
		if ev.Info != nil {
			b.WriteString(" " + ev.Info.String())
		}
		b.WriteString("\n")
	}
	return b.String()
}
