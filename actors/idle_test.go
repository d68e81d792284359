package actors_test

import (
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/norsk-oss/norsk-manager/actors"
)

// idleProbe is a grain-like actor that reports each IdleTick's verdict.
type idleProbe struct {
	idle     actors.IdleTimer
	timeout  time.Duration
	verdicts chan bool
}

type poke struct{}

func (p *idleProbe) Receive(ctx actor.Context) {
	if _, tick := ctx.Message().(*actors.IdleTick); !tick {
		p.idle.Touch()
	}
	switch ctx.Message().(type) {
	case *actor.Started:
		p.idle.Start(ctx, p.timeout)
	case *actors.IdleTick:
		p.verdicts <- p.idle.Expired()
	case *actor.Stopping:
		p.idle.Stop()
	}
}

// TestIdleTimer: an actor left alone is told it is idle, and told again a
// timeout later (a grain that could not passivate the first time is asked
// again); one that keeps receiving messages is not idle meanwhile.
func TestIdleTimer(t *testing.T) {
	var unstarted actors.IdleTimer
	unstarted.Stop() // harmless before Start
	sys := actor.NewActorSystem()
	const timeout = 100 * time.Millisecond
	p := &idleProbe{timeout: timeout, verdicts: make(chan bool, 16)}
	start := time.Now()
	pid := sys.Root.Spawn(actor.PropsFromProducer(func() actor.Actor { return p }))
	defer sys.Root.Stop(pid)

	// Busy: poke faster than the timeout; no tick may say idle.
	busyUntil := start.Add(3 * timeout)
	for time.Now().Before(busyUntil) {
		sys.Root.Send(pid, &poke{})
		select {
		case v := <-p.verdicts:
			if v {
				t.Fatalf("idle after %v although poked every %v", time.Since(start), timeout/10)
			}
		case <-time.After(timeout / 10):
		}
	}
	// Alone: the next verdicts say idle, twice in a row.
	deadline := time.After(10 * time.Second)
	for n := 0; n < 2; {
		select {
		case v := <-p.verdicts:
			if v {
				n++
			}
		case <-deadline:
			t.Fatalf("not told idle twice within 10s of the last message (told %d times)", n)
		}
	}
}
