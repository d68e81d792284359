package membership

import (
	"log/slog"
	"strings"
	"testing"
)

func TestSlogWriter_LevelMapping(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, line string
		want       string
	}{
		{"debug", "[DEBUG] memberlist: stream connection from=1", "DEBUG stream connection from=1"},
		{"info", "[INFO] memberlist: Suspect b has failed", "INFO Suspect b has failed"},
		{"warn", "[WARN] memberlist: Refuting a suspect message", "WARN Refuting a suspect message"},
		{"error", "[ERR] memberlist: Failed to send ping: write udp 127.0.0.1:1->127.0.0.1:2: connection refused",
			"ERROR Failed to send ping: write udp 127.0.0.1:1->127.0.0.1:2: connection refused"},
		{"error after our own socket closed", "[ERR] memberlist: Failed to send gossip to 127.0.0.1:7946: write udp 127.0.0.1:7947->127.0.0.1:7946: use of closed network connection",
			"DEBUG Failed to send gossip to 127.0.0.1:7946: write udp 127.0.0.1:7947->127.0.0.1:7946: use of closed network connection"},
		{"warning after our own socket closed", "[WARN] memberlist: Error accepting TCP connection: accept tcp 127.0.0.1:7946: use of closed network connection",
			"DEBUG Error accepting TCP connection: accept tcp 127.0.0.1:7946: use of closed network connection"},
		{"unprefixed", "no prefix", "INFO no prefix"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var rec recordHandler
			newStdLogger(slogNew(&rec)).Print(tc.line)
			if got := rec.lines(); len(got) != 1 || got[0] != tc.want {
				t.Fatalf("got %q, want %q", got, tc.want)
			}
		})
	}
}

func TestLineLevel(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in   slog.Level
		line string
		want slog.Level
	}{
		{slog.LevelError, "Failed to send gossip: use of closed network connection", slog.LevelDebug},
		{slog.LevelError, "Failed to send gossip: connection refused", slog.LevelError},
		{slog.LevelInfo, "Marking x as failed", slog.LevelInfo},
		{slog.LevelDebug, "use of closed network connection", slog.LevelDebug},
	} {
		if got := lineLevel(tc.in, tc.line); got != tc.want {
			t.Errorf("lineLevel(%v, %q) = %v, want %v", tc.in, strings.TrimSpace(tc.line), got, tc.want)
		}
	}
}
