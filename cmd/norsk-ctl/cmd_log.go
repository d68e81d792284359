package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
)

// ctlLogHandler is the slog.Handler of the client's log inside norsk-ctl:
// one terse line per record on standard error, "norsk-ctl: msg k=v …",
// without time or level, for an operator reading a terminal.
type ctlLogHandler struct {
	mu    *sync.Mutex // guards w, shared by derived handlers
	w     io.Writer
	level slog.Level
	attrs []slog.Attr
}

var _ slog.Handler = (*ctlLogHandler)(nil)

// newCtlLogHandler returns a handler writing records at level or above to w.
func newCtlLogHandler(w io.Writer, level slog.Level) *ctlLogHandler {
	return &ctlLogHandler{mu: &sync.Mutex{}, w: w, level: level}
}

// Enabled reports whether level is at or above the handler's level.
func (h *ctlLogHandler) Enabled(_ context.Context, level slog.Level) bool { return level >= h.level }

// Handle writes r as one line. Attributes named "component" are omitted.
func (h *ctlLogHandler) Handle(_ context.Context, r slog.Record) error {
	var b strings.Builder
	b.WriteString("norsk-ctl: ")
	b.WriteString(r.Message)
	write := func(a slog.Attr) bool {
		if a.Key != "component" {
			fmt.Fprintf(&b, " %s=%v", a.Key, a.Value.Any())
		}
		return true
	}
	for _, a := range h.attrs {
		write(a)
	}
	r.Attrs(write)
	b.WriteByte('\n')
	h.mu.Lock()
	defer h.mu.Unlock()
	_, err := io.WriteString(h.w, b.String())
	return err
}

// WithAttrs returns a handler that adds attrs to every record.
func (h *ctlLogHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	c := *h
	c.attrs = append(append([]slog.Attr(nil), h.attrs...), attrs...)
	return &c
}

// WithGroup returns h: groups are flattened.
func (h *ctlLogHandler) WithGroup(string) slog.Handler { return h }
