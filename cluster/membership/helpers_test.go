package membership

import (
	"context"
	"log/slog"
	"os"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// TestMain checks for leaked goroutines when the race detector is on:
// then the protoactor tests skip, and memberlist and our own goroutines
// must all be gone. protoactor leaves goroutines behind after Shutdown, so
// without -race the check is off.
func TestMain(m *testing.M) {
	if raceEnabled {
		goleak.VerifyTestMain(m)
		return
	}
	os.Exit(m.Run())
}

// recordHandler is a slog.Handler keeping "LEVEL message" lines.
type recordHandler struct {
	mu  sync.Mutex
	got []string
}

func slogNew(h *recordHandler) *slog.Logger { return slog.New(h) }

func (h *recordHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h *recordHandler) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.got = append(h.got, r.Level.String()+" "+r.Message)
	return nil
}
func (h *recordHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *recordHandler) WithGroup(string) slog.Handler      { return h }
func (h *recordHandler) lines() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.got...)
}

// eventually polls cond every 20 ms until it returns "" or timeout passes,
// then fails with cond's last description.
func eventually(t testing.TB, timeout time.Duration, cond func() string) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		msg := cond()
		if msg == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %s: %s", timeout, msg)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
