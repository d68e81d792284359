package agent

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
)

// quietOnStop wraps the handler of a library's logger (gossip, Raft, the
// actor remote): once stopping is set (a graceful stop has begun), its
// warnings and errors are logged at debug. Sockets closing under the
// libraries' goroutines are the expected way they stop, not faults.
type quietOnStop struct {
	h        slog.Handler
	stopping *atomic.Bool
}

func newQuietOnStop(l *slog.Logger, stopping *atomic.Bool) *slog.Logger {
	return slog.New(quietOnStop{h: l.Handler(), stopping: stopping})
}

// stopLevel is the level a record of level l is logged at.
func stopLevel(l slog.Level, stopping bool) slog.Level {
	if stopping && l >= slog.LevelWarn {
		return slog.LevelDebug
	}
	return l
}

func (q quietOnStop) Enabled(ctx context.Context, l slog.Level) bool {
	return q.h.Enabled(ctx, stopLevel(l, q.stopping.Load()))
}

func (q quietOnStop) Handle(ctx context.Context, r slog.Record) error {
	if l := stopLevel(r.Level, q.stopping.Load()); l != r.Level {
		if !q.h.Enabled(ctx, l) {
			return nil
		}
		r = r.Clone()
		r.Level = l
	}
	return q.h.Handle(ctx, r)
}

func (q quietOnStop) WithAttrs(as []slog.Attr) slog.Handler {
	return quietOnStop{h: q.h.WithAttrs(as), stopping: q.stopping}
}

func (q quietOnStop) WithGroup(n string) slog.Handler {
	return quietOnStop{h: q.h.WithGroup(n), stopping: q.stopping}
}

// protoactor's remote logs, by message (remote/endpoint_writer.go).
const (
	paConnectFailed = "EndpointWriter failed to connect"
	paLostConn      = "EndpointWriter lost connection"
	paConnected     = "EndpointWriter connected"
	// paGossipFailed is protoactor's cluster gossip to a member that does
	// not answer, a warning every 300 ms while a peer is down.
	paGossipFailed = "sendGossipForMember failed"
	// paRequestFailed is protoactor's cluster request to a grain that
	// failed (dead letter: the activation moved or stopped; timeout). The
	// grains router retries these until the caller's deadline and reports
	// a real failure itself, so they are debug (below protoactor's minimum
	// level, so dropped): during a topology change they came by the hundred
	// at ERROR.
	paRequestFailed = "cluster.RequestFuture failed"
)

// paOutage are the endpoint writer's errors about a peer it cannot reach:
// each starts an outage of the peer (logged once) or, during one, is
// dropped.
var paOutage = map[string]bool{
	paConnectFailed: true,
	paLostConn:      true,
	"EndpointWriter failed to create receive stream":    true,
	"EndpointWriter failed to send connect request":     true,
	"EndpointWriter failed to receive connect response": true,
}

// paGossipEvery is how often paGossipFailed is logged per member.
const paGossipEvery = time.Minute

// actorLog is the handler of protoactor's logger. protoactor is chatty at
// info: records below min are dropped. Its endpoint writer retries a peer
// that does not answer every 2 s, each attempt an ERROR; actorLog logs one
// WARN per peer outage instead (the first failed attempt or the lost
// connection, with the peer's address), drops the retries, and logs at
// info when the peer is connected again. Its cluster gossip's failures to
// reach a member are logged once a minute per member (with the count
// dropped). During a graceful stop its warnings and errors are debug
// (stopping).
type actorLog struct {
	h     slog.Handler
	min   slog.Level
	state *actorLogState
}

type actorLogState struct {
	stopping *atomic.Bool
	mu       sync.Mutex
	down     map[string]bool // peer address → in an outage logged; guarded by mu
	// gossip: member id → when paGossipFailed was last logged and how
	// many were dropped since; guarded by mu.
	gossip map[string]*gossipFailures
}

type gossipFailures struct {
	last    time.Time
	dropped int
}

func newActorLog(h slog.Handler, min slog.Level, stopping *atomic.Bool) actorLog {
	return actorLog{h: h, min: min, state: &actorLogState{stopping: stopping, down: map[string]bool{}, gossip: map[string]*gossipFailures{}}}
}

// Enabled lets info through (below min) for paConnected, which ends an
// outage.
func (a actorLog) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= min(a.min, slog.LevelInfo) && a.h.Enabled(ctx, l)
}

// rewrite returns the record to log in place of r, or false to drop it.
func (a actorLog) rewrite(r slog.Record) (slog.Record, bool) {
	var addr, member string
	var errAttr slog.Attr
	r.Attrs(func(at slog.Attr) bool {
		switch at.Key {
		case "address":
			addr = at.Value.String()
		case "MemberId":
			member = at.Value.String()
		case "error":
			errAttr = at
		}
		return true
	})
	s := a.state
	switch {
	case r.Message == paGossipFailed:
		s.mu.Lock()
		defer s.mu.Unlock()
		g := s.gossip[member]
		if g == nil {
			g = &gossipFailures{}
			s.gossip[member] = g
		}
		if !g.last.IsZero() && r.Time.Sub(g.last) < paGossipEvery {
			g.dropped++
			return r, false
		}
		if g.dropped > 0 {
			r = r.Clone()
			r.AddAttrs(slog.Int("dropped_since_last", g.dropped))
		}
		g.last, g.dropped = r.Time, 0
		return r, r.Level >= a.min
	case paOutage[r.Message]:
		s.mu.Lock()
		first := !s.down[addr]
		s.down[addr] = true
		s.mu.Unlock()
		if !first {
			return r, false
		}
		msg := "cannot connect to a peer manager's actor remote; retrying (logged again when it reconnects)"
		if r.Message == paLostConn {
			msg = "lost the connection to a peer manager's actor remote; retrying (logged again when it reconnects)"
		}
		out := slog.NewRecord(r.Time, slog.LevelWarn, msg, r.PC)
		out.AddAttrs(slog.String("address", addr))
		if errAttr.Key != "" {
			out.AddAttrs(errAttr)
		}
		return out, true
	case r.Message == paRequestFailed:
		if r.Level > slog.LevelDebug {
			r = r.Clone()
			r.Level = slog.LevelDebug
		}
		return r, r.Level >= a.min
	case r.Message == paConnected:
		s.mu.Lock()
		was := s.down[addr]
		delete(s.down, addr)
		s.mu.Unlock()
		if !was {
			return r, r.Level >= a.min
		}
		out := slog.NewRecord(r.Time, slog.LevelInfo, "connected to a peer manager's actor remote again", r.PC)
		out.AddAttrs(slog.String("address", addr))
		return out, true
	}
	return r, r.Level >= a.min
}

func (a actorLog) Handle(ctx context.Context, r slog.Record) error {
	r, ok := a.rewrite(r)
	if !ok {
		return nil
	}
	if l := stopLevel(r.Level, a.state.stopping.Load()); l != r.Level {
		r = r.Clone()
		r.Level = l
	}
	if !a.h.Enabled(ctx, r.Level) {
		return nil
	}
	return a.h.Handle(ctx, r)
}

func (a actorLog) WithAttrs(as []slog.Attr) slog.Handler {
	return actorLog{h: a.h.WithAttrs(as), min: a.min, state: a.state}
}

func (a actorLog) WithGroup(n string) slog.Handler {
	return actorLog{h: a.h.WithGroup(n), min: a.min, state: a.state}
}
