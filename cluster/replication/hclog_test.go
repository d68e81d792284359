package replication

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
)

func TestRaftLevel(t *testing.T) {
	t.Parallel()
	closed := fmt.Errorf("read tcp 127.0.0.1:1->127.0.0.1:2: %w", errors.New("use of closed network connection"))
	for _, tc := range []struct {
		name     string
		level    hclog.Level
		msg      string
		args     []any
		stopping bool
		want     slog.Level
	}{
		{"trace", hclog.Trace, "x", nil, false, slog.LevelDebug},
		{"debug", hclog.Debug, "x", nil, false, slog.LevelDebug},
		{"info is debug (raft is chatty)", hclog.Info, "entering follower state", nil, false, slog.LevelDebug},
		{"warn", hclog.Warn, "heartbeat timeout reached, starting election", nil, false, slog.LevelWarn},
		{"error", hclog.Error, "failed to appendEntries to", []any{"peer", "m2", "error", errors.New("dial tcp: connection refused")}, false, slog.LevelError},
		{"no known peers at every bootstrap", hclog.Warn, "no known peers, aborting election", nil, false, slog.LevelDebug},
		{"not part of the configuration stays a warning", hclog.Warn, "not part of stable configuration, aborting election", nil, false, slog.LevelWarn},
		{"own transport shut down", hclog.Error, "failed to decode incoming command", []any{"error", raft.ErrTransportShutdown}, false, slog.LevelDebug},
		{"own raft shut down", hclog.Error, "x", []any{"error", fmt.Errorf("apply: %w", raft.ErrRaftShutdown)}, false, slog.LevelDebug},
		{"own socket closed", hclog.Error, "failed to accept connection", []any{"error", closed}, false, slog.LevelDebug},
		{"error while stopping", hclog.Error, "failed to appendEntries to", []any{"error", errors.New("EOF")}, true, slog.LevelDebug},
		{"warn while stopping", hclog.Warn, "x", nil, true, slog.LevelDebug},
		{"error string arg is not an error", hclog.Error, "x", []any{"error", "transport shutdown"}, false, slog.LevelError},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := raftLevel(tc.level, tc.msg, tc.args, tc.stopping); got != tc.want {
				t.Fatalf("raftLevel = %v, want %v", got, tc.want)
			}
		})
	}
}

// TestHclogAdapter_Output checks that raft's message and arguments become
// slog's message and attributes: one timestamp (slog's), component once,
// lib=raft.
func TestHclogAdapter_Output(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	base := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug})).With("component", "replication")
	stopping := new(atomic.Bool)
	var hl hclog.Logger = newHclogAdapter(base, stopping)
	hl.Warn("heartbeat timeout reached, starting election", "last-leader-addr", raft.ServerAddress("127.0.0.1:7948"), "last-leader-id", raft.ServerID("m1"))
	hl.With("snapshot-id", "1-2-3").Info("starting snapshot up to", "index", uint64(42))
	hl.Error("failed to appendEntries to", "peer", raft.Server{ID: "m2", Address: "127.0.0.1:7949"}, "error", errors.New("connection refused"), "extra")
	hl.Named("snapshot").Warn("x", "n", hclog.Fmt("%d items", 3))
	stopping.Store(true)
	hl.Error("failed to decode incoming command", "error", errors.New("EOF"))
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	want := []string{
		`level=WARN msg="heartbeat timeout reached, starting election" component=replication lib=raft last-leader-addr=127.0.0.1:7948 last-leader-id=m1`,
		`level=DEBUG msg="starting snapshot up to" component=replication snapshot-id=1-2-3 lib=raft index=42`,
		`level=ERROR msg="failed to appendEntries to" component=replication lib=raft peer="{Suffrage:Voter ID:m2 Address:127.0.0.1:7949}" error="connection refused" EXTRA_VALUE_AT_END=extra`,
		`level=WARN msg=x component=replication lib=raft.snapshot n="3 items"`,
		`level=DEBUG msg="failed to decode incoming command" component=replication lib=raft error=EOF`,
	}
	if len(lines) != len(want) {
		t.Fatalf("got %d lines, want %d:\n%s", len(lines), len(want), buf.String())
	}
	for i, l := range lines {
		// Strip slog's own time=... (the only timestamp).
		if !strings.HasPrefix(l, "time=") || strings.Count(l, "time=") != 1 {
			t.Errorf("line %d: want exactly one leading time=: %s", i, l)
		}
		_, rest, _ := strings.Cut(l, " ")
		if rest != want[i] {
			t.Errorf("line %d:\n got %s\nwant %s", i, rest, want[i])
		}
		if strings.Count(l, "component=") != 1 || strings.Count(l, "lib=") != 1 {
			t.Errorf("line %d: component or lib not exactly once: %s", i, l)
		}
	}
}

func TestHclogAdapter_Enabled(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		level                      slog.Level
		debug, info, warn, errorOn bool
	}{
		{slog.LevelDebug, true, true, true, true},
		{slog.LevelInfo, false, false, true, true},
		{slog.LevelWarn, false, false, true, true},
		{slog.LevelError, false, false, false, true},
	} {
		hl := newHclogAdapter(slog.New(slog.NewTextHandler(&bytes.Buffer{}, &slog.HandlerOptions{Level: tc.level})), nil)
		got := [4]bool{hl.IsDebug(), hl.IsInfo(), hl.IsWarn(), hl.IsError()}
		if want := [4]bool{tc.debug, tc.info, tc.warn, tc.errorOn}; got != want {
			t.Errorf("slog level %v: IsDebug/IsInfo/IsWarn/IsError = %v, want %v", tc.level, got, want)
		}
	}
}
