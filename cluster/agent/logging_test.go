package agent

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// logLines returns buf's text-handler lines without their time= attribute.
func logLines(buf *bytes.Buffer) []string {
	var out []string
	for _, l := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		if l == "" {
			continue
		}
		if strings.HasPrefix(l, "time=") {
			_, l, _ = strings.Cut(l, " ")
		}
		out = append(out, l)
	}
	return out
}

func TestQuietOnStop(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		min      slog.Level
		stopping bool
		level    slog.Level
		want     string // "" : dropped
	}{
		{"error while running", slog.LevelInfo, false, slog.LevelError, "level=ERROR msg=m component=gossip"},
		{"warn while running", slog.LevelInfo, false, slog.LevelWarn, "level=WARN msg=m component=gossip"},
		{"info while running", slog.LevelInfo, false, slog.LevelInfo, "level=INFO msg=m component=gossip"},
		{"error while stopping, info handler", slog.LevelInfo, true, slog.LevelError, ""},
		{"warn while stopping, info handler", slog.LevelInfo, true, slog.LevelWarn, ""},
		{"info while stopping", slog.LevelInfo, true, slog.LevelInfo, "level=INFO msg=m component=gossip"},
		{"error while stopping, debug handler", slog.LevelDebug, true, slog.LevelError, "level=DEBUG msg=m component=gossip"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var buf bytes.Buffer
			stopping := new(atomic.Bool)
			stopping.Store(tc.stopping)
			l := newQuietOnStop(slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: tc.min})).With("component", "gossip"), stopping)
			l.Log(context.Background(), tc.level, "m")
			got := strings.Join(logLines(&buf), "\n")
			if got != tc.want {
				t.Fatalf("got %q, want %q", got, tc.want)
			}
		})
	}
}

func TestActorLog(t *testing.T) {
	t.Parallel()
	refused := errors.New("connection refused")
	type entry struct {
		level slog.Level
		msg   string
		args  []any
	}
	fail := func(addr string, retry int) entry {
		return entry{slog.LevelError, paConnectFailed, []any{slog.String("address", addr), slog.Any("error", refused), slog.Int("retry", retry)}}
	}
	connected := func(addr string) entry {
		return entry{slog.LevelInfo, paConnected, []any{slog.String("address", addr), slog.Duration("cost", 0)}}
	}
	const down = `level=WARN msg="cannot connect to a peer manager's actor remote; retrying (logged again when it reconnects)" component=protoactor address=`
	const up = `level=INFO msg="connected to a peer manager's actor remote again" component=protoactor address=`
	for _, tc := range []struct {
		name     string
		min      slog.Level // the agent's log level
		stopping bool
		in       []entry
		want     []string
	}{
		{
			name: "one warning per outage, one info when back",
			min:  slog.LevelInfo,
			in:   []entry{connected("a:1"), fail("a:1", 0), fail("a:1", 1), fail("a:1", 2), connected("a:1"), connected("a:1")},
			want: []string{down + "a:1 error=\"connection refused\"", up + "a:1"},
		},
		{
			name: "per peer",
			min:  slog.LevelInfo,
			in:   []entry{fail("a:1", 0), fail("b:2", 0), fail("a:1", 1), fail("b:2", 1), connected("b:2"), fail("b:2", 0)},
			want: []string{down + "a:1 error=\"connection refused\"", down + "b:2 error=\"connection refused\"", up + "b:2", down + "b:2 error=\"connection refused\""},
		},
		{
			name: "the connect phase's other errors are part of the outage",
			min:  slog.LevelInfo,
			in: []entry{fail("a:1", 0), {slog.LevelError, "EndpointWriter failed to create receive stream", []any{slog.String("address", "a:1"), slog.Any("error", refused)}},
				{slog.LevelError, "EndpointWriter failed to send connect request", []any{slog.String("address", "a:1"), slog.Any("error", refused)}}, connected("a:1")},
			want: []string{down + "a:1 error=\"connection refused\"", up + "a:1"},
		},
		{
			name: "lost connection starts the outage",
			min:  slog.LevelInfo,
			in: []entry{{slog.LevelError, paLostConn, []any{slog.String("address", "a:1"), slog.Any("error", refused)}},
				fail("a:1", 0), connected("a:1")},
			want: []string{`level=WARN msg="lost the connection to a peer manager's actor remote; retrying (logged again when it reconnects)" component=protoactor address=a:1 error="connection refused"`,
				up + "a:1"},
		},
		{
			name: "other records: info dropped (chatty), warnings and errors kept",
			min:  slog.LevelDebug,
			in: []entry{{slog.LevelInfo, "Started EndpointWriter. connecting", nil}, {slog.LevelDebug, "d", nil},
				{slog.LevelWarn, "w", nil}, {slog.LevelError, "e", nil}},
			want: []string{"level=WARN msg=w component=protoactor", "level=ERROR msg=e component=protoactor"},
		},
		{
			name: "warn-level agent: the reconnection info is not shown",
			min:  slog.LevelWarn,
			in:   []entry{fail("a:1", 0), fail("a:1", 1), connected("a:1")},
			want: []string{down + "a:1 error=\"connection refused\""},
		},
		{
			name: "grain request failures (retried by the router) are debug, below protoactor's minimum",
			min:  slog.LevelDebug,
			in:   []entry{{slog.LevelError, paRequestFailed, []any{slog.String("error", "future: dead letter")}}, {slog.LevelError, "e", nil}},
			want: []string{"level=ERROR msg=e component=protoactor"},
		},
		{
			name:     "stopping: errors are debug",
			min:      slog.LevelInfo,
			stopping: true,
			in:       []entry{fail("a:1", 0), {slog.LevelError, "EndpointWriter error when closing the stream", nil}},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var buf bytes.Buffer
			stopping := new(atomic.Bool)
			stopping.Store(tc.stopping)
			h := newActorLog(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: tc.min}).WithAttrs([]slog.Attr{slog.String("component", "protoactor")}), slog.LevelWarn, stopping)
			l := slog.New(h)
			for _, e := range tc.in {
				l.Log(context.Background(), e.level, e.msg, e.args...)
			}
			if got := logLines(&buf); strings.Join(got, "\n") != strings.Join(tc.want, "\n") {
				t.Fatalf("got:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tc.want, "\n"))
			}
		})
	}
}

func TestActorLog_GossipFailuresOncePerMinute(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	h := newActorLog(slog.NewTextHandler(&buf, nil), slog.LevelWarn, new(atomic.Bool))
	t0 := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	send := func(at time.Duration, member string) {
		r := slog.NewRecord(t0.Add(at), slog.LevelWarn, paGossipFailed, 0)
		r.AddAttrs(slog.String("MemberId", member), slog.String("error", "future: timeout"))
		if err := h.Handle(context.Background(), r); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 10 {
		send(time.Duration(i)*300*time.Millisecond, "A")
	}
	send(time.Second, "B")
	send(61*time.Second, "A")
	want := []string{
		`level=WARN msg="sendGossipForMember failed" MemberId=A error="future: timeout"`,
		`level=WARN msg="sendGossipForMember failed" MemberId=B error="future: timeout"`,
		`level=WARN msg="sendGossipForMember failed" MemberId=A error="future: timeout" dropped_since_last=9`,
	}
	if got := logLines(&buf); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("got:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
