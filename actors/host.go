package actors

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"google.golang.org/protobuf/proto"

	"github.com/norsk-oss/norsk-manager/proto/internalpb"
)

// Kind describes one grain kind to a Host.
type Kind struct {
	// Name is the kind ("job", "node", …); it never contains '/'.
	Name string
	// Props returns the props of the stateful actor of one grain. The actor
	// receives *actor.Started first, then commands; it passivates by
	// sending Passivate to its parent.
	Props func(identity string) *actor.Props
	// Strategy supervises the stateful actor. Nil: restart it with
	// exponential backoff (DefaultGrainStrategy).
	Strategy actor.SupervisorStrategy
	// OnActivate, if set, is called each time a grain of the kind is
	// activated (metrics). It must not block.
	OnActivate func()
}

// Passivate asks a grain's supervisor to stop the grain because it is idle.
// The grain is re-activated by the next command addressed to it.
type Passivate struct{}

// DefaultGrainStrategy restarts a crashed grain actor up to 10 times within
// 10 s (then stops it: the next command re-activates it from its record).
func DefaultGrainStrategy() actor.SupervisorStrategy {
	return actor.NewOneForOneStrategy(10, 10*time.Second, actor.DefaultDecider)
}

// HostConfig configures a Host.
type HostConfig struct {
	// RequestTimeout bounds Request when ctx has no earlier deadline.
	// Default 10 s.
	RequestTimeout time.Duration
	Logger         *slog.Logger
}

// Host activates grains of a single manager: one activator actor per kind
// keeps identity → grain and spawns a grain (a thin supervisor with the
// stateful actor as its child) on its first command. It implements Router.
type Host struct {
	system     *actor.ActorSystem
	cfg        HostConfig
	activators map[string]*actor.PID
	// dispatcher runs the activators' and grains' mailboxes.
	dispatcher *PooledDispatcher
}

var _ Router = (*Host)(nil)

// route asks an activator to deliver Msg to the grain Identity, on behalf
// of the original sender.
type route struct {
	Identity string
	Msg      proto.Message
}

// NewHost starts activators for kinds on system.
func NewHost(system *actor.ActorSystem, cfg HostConfig, kinds ...Kind) (*Host, error) {
	if cfg.RequestTimeout <= 0 {
		cfg.RequestTimeout = 10 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	h := &Host{system: system, cfg: cfg, activators: map[string]*actor.PID{}, dispatcher: NewPooledDispatcher()}
	for _, k := range kinds {
		if k.Strategy == nil {
			k.Strategy = DefaultGrainStrategy()
		}
		k := k
		pid, err := system.Root.SpawnNamed(actor.PropsFromProducer(func() actor.Actor {
			return &activator{kind: k, grains: map[string]*actor.PID{}, byPID: map[string]string{}, logger: cfg.Logger.With("kind", k.Name),
				dispatcher: h.dispatcher}
		}, actor.WithDispatcher(h.dispatcher)), "activator-"+k.Name)
		if err != nil {
			return nil, fmt.Errorf("spawn %s activator: %w", k.Name, err)
		}
		h.activators[k.Name] = pid
	}
	return h, nil
}

// Request implements Router. A command that reaches a grain while it is
// passivating is delivered again (at most 3 attempts).
func (h *Host) Request(ctx context.Context, kind, identity string, cmd proto.Message) (*internalpb.Reply, error) {
	timeout := h.cfg.RequestTimeout
	if dl, ok := ctx.Deadline(); ok {
		timeout = time.Until(dl)
	}
	for attempt := 0; ; attempt++ {
		if timeout <= 0 {
			return nil, ErrGrainTimeout
		}
		f := h.RequestFuture(kind, identity, cmd, timeout)
		res, err := f.Result()
		if _, dead := res.(*actor.DeadLetterResponse); dead && attempt < 2 {
			continue
		}
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		return FutureReply(res, err)
	}
}

// RequestFuture implements Router.
func (h *Host) RequestFuture(kind, identity string, cmd proto.Message, timeout time.Duration) *actor.Future {
	pid, ok := h.activators[kind]
	if !ok {
		f := actor.NewFuture(h.system, time.Millisecond)
		h.system.Root.Send(f.PID(), &actor.DeadLetterResponse{})
		return f
	}
	return h.system.Root.RequestFuture(pid, &route{Identity: identity, Msg: cmd}, timeout)
}

// Send implements Router.
func (h *Host) Send(kind, identity string, cmd proto.Message) {
	if pid, ok := h.activators[kind]; ok {
		h.system.Root.Send(pid, &route{Identity: identity, Msg: cmd})
	}
}

// Active reports whether the grain (kind, identity) is currently activated
// (for tests and diagnostics).
func (h *Host) Active(kind, identity string) bool {
	pid, ok := h.activators[kind]
	if !ok {
		return false
	}
	res, err := h.system.Root.RequestFuture(pid, &isActive{identity}, time.Second).Result()
	return err == nil && res == true
}

type isActive struct{ identity string }

// activator owns identity → grain for one kind.
type activator struct {
	kind   Kind
	grains map[string]*actor.PID // identity → supervisor
	byPID  map[string]string     // supervisor PID id → identity
	logger *slog.Logger
	// dispatcher runs the grains' mailboxes (the Host's).
	dispatcher actor.Dispatcher
}

func (a *activator) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *route:
		pid := a.grains[m.Identity]
		if pid == nil {
			pid = a.activate(ctx, m.Identity)
		}
		if ctx.Sender() != nil {
			ctx.RequestWithCustomSender(pid, m.Msg, ctx.Sender())
		} else {
			ctx.Send(pid, m.Msg)
		}
	case *passivateGrain:
		// Forget the grain first, so no new command reaches it, then let it
		// drain what was already routed to it before it stops.
		if id, ok := a.byPID[m.pid.GetId()]; ok {
			delete(a.grains, id)
			delete(a.byPID, m.pid.GetId())
			ctx.Send(m.pid, &drainAndStop{})
		}
	case *actor.Terminated:
		if id, ok := a.byPID[m.Who.GetId()]; ok {
			delete(a.grains, id)
			delete(a.byPID, m.Who.GetId())
		}
	case *isActive:
		_, ok := a.grains[m.identity]
		ctx.Respond(ok)
	}
}

func (a *activator) activate(ctx actor.Context, identity string) *actor.PID {
	childProps := a.kind.Props(identity).Configure(actor.WithDispatcher(a.dispatcher))
	props := actor.PropsFromProducer(func() actor.Actor {
		return &grainSupervisor{childProps: childProps}
	}, actor.WithSupervisor(a.kind.Strategy), actor.WithDispatcher(a.dispatcher))
	pid := ctx.SpawnPrefix(props, identity)
	if a.kind.OnActivate != nil {
		a.kind.OnActivate()
	}
	ctx.Watch(pid)
	a.grains[identity] = pid
	a.byPID[pid.GetId()] = identity
	return pid
}

// passivateGrain asks the activator to forget and stop a grain.
type passivateGrain struct{ pid *actor.PID }

// drainAndStop tells a grain supervisor that its activator has forgotten
// it: it stops once its child has handled every command queued before.
type drainAndStop struct{}

// drainTimeout bounds how long a passivating grain may take to drain.
const drainTimeout = 30 * time.Second

// grainSupervisor is the per-grain supervisor: it spawns the stateful actor
// as its child (supervised by the kind's strategy) and forwards every
// command to it.
type grainSupervisor struct {
	childProps *actor.Props
	child      *actor.PID
}

func (s *grainSupervisor) Receive(ctx actor.Context) {
	switch ctx.Message().(type) {
	case *actor.Started:
		s.child = ctx.Spawn(s.childProps)
	case *Passivate:
		ctx.Send(ctx.Parent(), &passivateGrain{pid: ctx.Self()})
	case *drainAndStop:
		// Touch is answered by the child's context in mailbox order: once
		// it answers, everything forwarded before has been handled.
		f := ctx.RequestFuture(s.child, &actor.Touch{}, drainTimeout)
		ctx.ReenterAfter(f, func(any, error) { ctx.Stop(ctx.Self()) })
	case *actor.Terminated:
		// The child gave up (supervision stopped it): stop, so that the next
		// command activates a fresh grain from its record.
		ctx.Send(ctx.Parent(), &passivateGrain{pid: ctx.Self()})
	case actor.SystemMessage, actor.AutoReceiveMessage:
	default:
		if s.child != nil {
			ctx.Forward(s.child)
		}
	}
}

// ErrorIsTimeout reports whether err means a grain did not answer in time.
func ErrorIsTimeout(err error) bool { return errors.Is(err, ErrGrainTimeout) }

// Stop stops every grain (their supervisors stop their children: worker
// sessions close) and the activators, waiting for each.
func (h *Host) Stop() {
	for _, pid := range h.activators {
		_ = h.system.Root.StopFuture(pid).Wait()
	}
}
