package membership

import (
	"context"
	"io"
	"log"
	"log/slog"
	"strings"
)

// newStdLogger returns a *log.Logger for memberlist that forwards every line
// to logger, mapping memberlist's "[DEBUG]", "[INFO]", "[WARN]" and "[ERR]"
// prefixes to slog levels (unprefixed lines are Info). Per-stream and
// push/pull chatter is DEBUG in memberlist, so an Info handler sees only
// joins, failures and conflicts. Lines about this manager's own closed
// sockets (a graceful stop: "use of closed network connection") are
// debug at any level (lineLevel).
func newStdLogger(logger *slog.Logger) *log.Logger {
	return log.New(slogWriter{logger: logger}, "", 0)
}

type slogWriter struct{ logger *slog.Logger }

var levelPrefixes = []struct {
	prefix string
	level  slog.Level
}{
	{"[DEBUG]", slog.LevelDebug},
	{"[INFO]", slog.LevelInfo},
	{"[WARN]", slog.LevelWarn},
	{"[ERR]", slog.LevelError},
	{"[ERROR]", slog.LevelError},
}

// Write logs one memberlist line. It never fails.
func (w slogWriter) Write(p []byte) (int, error) {
	line := strings.TrimSpace(string(p))
	level := slog.LevelInfo
	for _, lp := range levelPrefixes {
		if rest, ok := strings.CutPrefix(line, lp.prefix); ok {
			level, line = lp.level, strings.TrimSpace(rest)
			break
		}
	}
	line = strings.TrimPrefix(line, "memberlist: ")
	level = lineLevel(level, line)
	if h := hintFor(line); h != "" {
		w.logger.Log(context.Background(), level, line, "hint", h)
		return len(p), nil
	}
	w.logger.Log(context.Background(), level, line)
	return len(p), nil
}

// lineLevel adjusts the level of one memberlist line: a send or read on
// a socket this manager closed itself (net.ErrClosed: memberlist's
// goroutines racing its Shutdown) is not a fault.
func lineLevel(level slog.Level, line string) slog.Level {
	if level > slog.LevelDebug && strings.Contains(line, "use of closed network connection") {
		return slog.LevelDebug
	}
	return level
}

// gossipKeyHint is added to memberlist's lines about mismatched gossip
// encryption.
const gossipKeyHint = "the managers' gossip keys differ: give every manager the same --gossip-key (or NORSK_GOSSIP_KEY), or none to all"

// hintFor returns a hint for a memberlist line whose cause is a
// configuration mistake, or "".
func hintFor(line string) string {
	for _, s := range []string{
		"encryption is configured but remote state is not encrypted",
		"remote state is encrypted and encryption is not configured",
		"no installed keys could decrypt the message",
	} {
		if strings.Contains(line, s) {
			return gossipKeyHint
		}
	}
	return ""
}

// discardLogger is used when Config.Logger is nil.
func discardLogger() *slog.Logger {
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}
