package grains

import (
	"context"
	"sync"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"google.golang.org/protobuf/proto"

	"github.com/norsk-oss/norsk-manager/actors"
	"github.com/norsk-oss/norsk-manager/proto/internalpb"
)

// Switch is the actors.Router the rest of a manager holds while the
// Router beneath it may be replaced: when the manager rejoins the actor
// cluster under a new actor id (it was declared failed and fenced,
// docs/design/ha.md "Fenced actor ids"), the old actor system and its
// grains go and a new Router takes over. Requests made while no Router is
// installed wait for the next one (bounded by their context); one-way
// sends made then are dropped (what they carry is re-derived from worker
// hellos and records, as with any lost one-way command). Set must be
// called before any grain exists (grains call RequestFuture). Safe for
// concurrent use.
//
// Grains of the next actor layer can run before Set: protoactor routes
// commands to them as soon as the layer has joined. What they send while
// no Router is installed waits for it: one-way sends are queued (at most
// MaxQueuedSends, then the oldest are dropped) and delivered by the next
// Router in order; a RequestFuture waits for the next Router within its
// timeout.
type Switch struct {
	mu struct {
		sync.Mutex
		cur    *Router       // nil while switching
		last   *Router       // the most recent Router, for RequestFuture while switching
		ready  chan struct{} // closed when cur is set
		queued []queuedSend  // one-way sends made while switching
	}
}

// MaxQueuedSends bounds the one-way sends a Switch holds while no Router
// is installed.
const MaxQueuedSends = 10000

type queuedSend struct {
	kind, identity string
	cmd            proto.Message
}

var _ actors.Router = (*Switch)(nil)

// NewSwitch returns a Switch with no Router yet: requests wait until Set.
func NewSwitch() *Switch {
	s := &Switch{}
	s.mu.ready = make(chan struct{})
	return s
}

// Set installs r; waiting requests proceed on it.
func (s *Switch) Set(r *Router) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.mu.cur, s.mu.last = r, r
	for _, q := range s.mu.queued {
		r.Send(q.kind, q.identity, q.cmd)
	}
	s.mu.queued = nil
	select {
	case <-s.mu.ready:
	default:
		close(s.mu.ready)
	}
}

// Suspend removes the current Router (returned, nil if none): requests
// wait for the next Set. The caller stops the old Router.
func (s *Switch) Suspend() *Router {
	s.mu.Lock()
	defer s.mu.Unlock()
	old := s.mu.cur
	if old != nil {
		s.mu.cur = nil
		s.mu.ready = make(chan struct{})
	}
	return old
}

// Current returns the installed Router, nil while switching.
func (s *Switch) Current() *Router {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.mu.cur
}

// wait returns the installed Router, waiting for one until ctx ends.
func (s *Switch) wait(ctx context.Context) (*Router, error) {
	for {
		s.mu.Lock()
		cur, ready := s.mu.cur, s.mu.ready
		s.mu.Unlock()
		if cur != nil {
			return cur, nil
		}
		select {
		case <-ready:
		case <-ctx.Done():
			return nil, actors.ErrGrainTimeout
		}
	}
}

// Request implements actors.Router on the installed Router. A request
// that fails because its Router was replaced under it is made again on
// the new one. The first delivery may have been carried out (its grain
// may live on another manager; only the reply was lost with the old
// router): that is safe because every grain command carries a request id
// that its record, or its tombstone once deleted, remembers, as for any
// of protoactor's at-least-once redeliveries.
func (s *Switch) Request(ctx context.Context, kind, identity string, cmd proto.Message) (*internalpb.Reply, error) {
	for {
		r, err := s.wait(ctx)
		if err != nil {
			return nil, err
		}
		reply, err := r.Request(ctx, kind, identity, cmd)
		if err == nil || ctx.Err() != nil || s.Current() == r {
			return reply, err
		}
	}
}

// RequestFuture implements actors.Router on the installed Router; while
// switching, the request waits (within timeout) for the next one. The
// future's result is as Router.RequestFuture's.
func (s *Switch) RequestFuture(kind, identity string, cmd proto.Message, timeout time.Duration) *actor.Future {
	s.mu.Lock()
	cur, last := s.mu.cur, s.mu.last
	s.mu.Unlock()
	if cur != nil {
		return cur.RequestFuture(kind, identity, cmd, timeout)
	}
	// A future of the last system: futures are plain registry entries,
	// usable after their system stopped.
	system := last.c.ActorSystem
	f := actor.NewFuture(system, timeout)
	go func() { // ends within timeout
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		reply, err := s.Request(ctx, kind, identity, cmd)
		if err != nil {
			system.Root.Send(f.PID(), &actor.DeadLetterResponse{})
			return
		}
		system.Root.Send(f.PID(), reply)
	}()
	return f
}

// Send implements actors.Router on the installed Router; while switching,
// queued for the next one.
func (s *Switch) Send(kind, identity string, cmd proto.Message) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.mu.cur != nil {
		s.mu.cur.Send(kind, identity, cmd)
		return
	}
	if len(s.mu.queued) >= MaxQueuedSends {
		s.mu.queued = s.mu.queued[1:]
	}
	s.mu.queued = append(s.mu.queued, queuedSend{kind, identity, cmd})
}
