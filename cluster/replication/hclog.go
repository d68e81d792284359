package replication

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"strings"
	"sync/atomic"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
)

// hclogAdapter is an hclog.Logger over slog for hashicorp/raft: raft's
// message becomes the slog message and its key/value pairs slog
// attributes (slog adds the one timestamp), after lib=<name> ("raft",
// or "raft.<sub>" for Named loggers).
// Levels (raftLevel): raft's info and below at debug (raft is chatty at
// info), its warnings and errors at their level, except for known-benign
// messages and anything logged while the replicator shuts down, which are
// debug.
type hclogAdapter struct {
	l        *slog.Logger // with the implied args; lib is added per record
	name     string
	implied  []any
	stopping *atomic.Bool
}

// newHclogAdapter returns raft's logger; stopping (may be nil) is set when
// the replicator shuts down.
func newHclogAdapter(l *slog.Logger, stopping *atomic.Bool) *hclogAdapter {
	if stopping == nil {
		stopping = new(atomic.Bool)
	}
	return &hclogAdapter{l: l, name: "raft", stopping: stopping}
}

// benignRaftWarnings are raft warnings that are part of normal operation.
var benignRaftWarnings = map[string]bool{
	// Every start of a manager that has no Raft configuration yet
	// (waiting for --bootstrap-expect, or to be added by the leader).
	"no known peers, aborting election": true,
}

// raftLevel maps one raft log call to a slog level.
func raftLevel(level hclog.Level, msg string, args []any, stopping bool) slog.Level {
	switch {
	case level < hclog.Warn:
		return slog.LevelDebug
	case benignRaftWarnings[msg], stopping, causedByShutdown(args):
		return slog.LevelDebug
	case level == hclog.Warn:
		return slog.LevelWarn
	default:
		return slog.LevelError
	}
}

// causedByShutdown reports whether an "error" argument says this node's
// own transport or Raft is shutting down (a graceful stop, not a fault).
func causedByShutdown(args []any) bool {
	for i := 0; i+1 < len(args); i += 2 {
		err, ok := args[i+1].(error)
		if !ok {
			continue
		}
		if errors.Is(err, raft.ErrTransportShutdown) || errors.Is(err, raft.ErrRaftShutdown) ||
			strings.Contains(err.Error(), "use of closed network connection") {
			return true
		}
	}
	return false
}

// attrs turns hclog's alternating key/value arguments into slog
// attributes; a trailing value without a key is "EXTRA_VALUE_AT_END", as
// hclog names it.
func attrs(args []any) []any {
	out := make([]any, 0, (len(args)+1)/2)
	for i := 0; i < len(args); i += 2 {
		if i+1 == len(args) {
			out = append(out, slog.Any("EXTRA_VALUE_AT_END", value(args[i])))
			break
		}
		key, ok := args[i].(string)
		if !ok {
			key = fmt.Sprint(args[i])
		}
		out = append(out, slog.Any(key, value(args[i+1])))
	}
	return out
}

// value renders hclog's formatting helpers as hclog would.
func value(v any) any {
	switch v := v.(type) {
	case hclog.Format:
		if len(v) == 0 {
			return ""
		}
		return fmt.Sprintf(fmt.Sprint(v[0]), v[1:]...)
	case hclog.Hex:
		return fmt.Sprintf("0x%x", int(v))
	case hclog.Octal:
		return fmt.Sprintf("0%o", int(v))
	case hclog.Binary:
		return fmt.Sprintf("0b%b", int(v))
	case hclog.Quote:
		return string(v)
	case error:
		if v == nil {
			return nil
		}
		return v.Error()
	}
	return v
}

func (h *hclogAdapter) Log(level hclog.Level, msg string, args ...any) {
	lvl := raftLevel(level, msg, args, h.stopping.Load())
	ctx := context.Background()
	if !h.l.Enabled(ctx, lvl) {
		return
	}
	h.l.Log(ctx, lvl, msg, append([]any{slog.String("lib", h.name)}, attrs(args)...)...)
}

func (h *hclogAdapter) Trace(msg string, args ...any) { h.Log(hclog.Trace, msg, args...) }
func (h *hclogAdapter) Debug(msg string, args ...any) { h.Log(hclog.Debug, msg, args...) }
func (h *hclogAdapter) Info(msg string, args ...any)  { h.Log(hclog.Info, msg, args...) }
func (h *hclogAdapter) Warn(msg string, args ...any)  { h.Log(hclog.Warn, msg, args...) }
func (h *hclogAdapter) Error(msg string, args ...any) { h.Log(hclog.Error, msg, args...) }

func (h *hclogAdapter) enabled(l hclog.Level) bool {
	return h.l.Enabled(context.Background(), raftLevel(l, "", nil, false))
}
func (h *hclogAdapter) IsTrace() bool { return h.enabled(hclog.Trace) }
func (h *hclogAdapter) IsDebug() bool { return h.enabled(hclog.Debug) }
func (h *hclogAdapter) IsInfo() bool  { return h.enabled(hclog.Info) }
func (h *hclogAdapter) IsWarn() bool  { return h.enabled(hclog.Warn) }
func (h *hclogAdapter) IsError() bool { return h.enabled(hclog.Error) }

func (h *hclogAdapter) ImpliedArgs() []any { return h.implied }

func (h *hclogAdapter) With(args ...any) hclog.Logger {
	c := *h
	c.implied = append(append([]any(nil), h.implied...), args...)
	c.l = h.l.With(attrs(args)...)
	return &c
}

func (h *hclogAdapter) Name() string { return h.name }

func (h *hclogAdapter) Named(name string) hclog.Logger {
	if h.name != "" {
		name = h.name + "." + name
	}
	return h.ResetNamed(name)
}

func (h *hclogAdapter) ResetNamed(name string) hclog.Logger {
	c := *h
	c.name = name
	return &c
}

// SetLevel is a no-op: the slog handler decides.
func (h *hclogAdapter) SetLevel(hclog.Level) {}

func (h *hclogAdapter) GetLevel() hclog.Level {
	for _, l := range []hclog.Level{hclog.Debug, hclog.Warn, hclog.Error} {
		if h.enabled(l) {
			return l
		}
	}
	return hclog.Off
}

func (h *hclogAdapter) StandardLogger(opts *hclog.StandardLoggerOptions) *log.Logger {
	return log.New(h.StandardWriter(opts), "", 0)
}

// StandardWriter logs each line written at the level of its "[LEVEL]"
// prefix (info without one).
func (h *hclogAdapter) StandardWriter(*hclog.StandardLoggerOptions) io.Writer {
	return stdWriter{h: h}
}

type stdWriter struct{ h *hclogAdapter }

func (w stdWriter) Write(p []byte) (int, error) {
	sc := bufio.NewScanner(bytes.NewReader(p))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" {
			continue
		}
		level := hclog.Info
		for prefix, l := range map[string]hclog.Level{"[TRACE]": hclog.Trace, "[DEBUG]": hclog.Debug, "[INFO]": hclog.Info,
			"[WARN]": hclog.Warn, "[ERR]": hclog.Error, "[ERROR]": hclog.Error} {
			if rest, ok := strings.CutPrefix(line, prefix); ok {
				level, line = l, strings.TrimSpace(rest)
				break
			}
		}
		w.h.Log(level, line)
	}
	return len(p), nil
}
