package actors

import (
	"sync"
	"time"

	"github.com/asynkron/protoactor-go/actor"
)

// IdleTick is the message an IdleTimer sends its grain. A grain handles it
// by asking IdleTimer.Expired and, if it may passivate, doing so; it must
// not count as activity (IdleTimer.Touch).
type IdleTick struct{}

// IdleTimer tells a grain when it has received no message for a timeout,
// in place of protoactor's SetReceiveTimeout. That one's timer goroutine
// writes the actor context's fields while the actor may be running (a
// data race inside protoactor-go, reported by -race in
// actorContext.receiveTimeoutHandler against InvokeUserMessage), and it
// stops for good once it has fired, so a grain that was busy at the first
// timeout never passivated later. Here the timer goroutine only sends
// IdleTick through the actor system's root context (safe from any
// goroutine); every field the grain reads is touched only on the grain's
// own goroutine, except the re-arm timer, which has its own lock.
//
// The zero value is unusable: call Start in the grain's Started handler,
// Touch on every other message, Expired on IdleTick, Stop in Stopping.
type IdleTimer struct {
	timeout time.Duration
	last    time.Time // the grain's goroutine only

	mu      sync.Mutex
	timer   *time.Timer // guarded by mu
	stopped bool        // guarded by mu
	send    func()      // sends IdleTick to the grain
}

// Start arms t for the grain of ctx: after timeout (> 0; 0 or less
// disables the timer) without a Touch, the grain receives an IdleTick.
func (t *IdleTimer) Start(ctx actor.Context, timeout time.Duration) {
	t.timeout, t.last = timeout, time.Now()
	if timeout <= 0 {
		return
	}
	root, self := ctx.ActorSystem().Root, ctx.Self()
	t.send = func() { root.Send(self, &IdleTick{}) }
	t.arm(timeout)
}

// Touch records activity now (any message other than IdleTick).
func (t *IdleTimer) Touch() { t.last = time.Now() }

// Expired reports, on an IdleTick, whether the grain has been idle for the
// whole timeout. Either way the timer is armed again: for what is left of
// the timeout when it has not expired, or for a full timeout when it has
// (a grain that cannot passivate yet is asked again later).
func (t *IdleTimer) Expired() bool {
	if t.timeout <= 0 {
		return false
	}
	idle := time.Since(t.last)
	if idle < t.timeout {
		t.arm(t.timeout - idle)
		return false
	}
	t.arm(t.timeout)
	return true
}

// Stop disarms t for good (safe to call more than once, and before Start).
func (t *IdleTimer) Stop() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.stopped = true
	if t.timer != nil {
		t.timer.Stop()
	}
}

func (t *IdleTimer) arm(d time.Duration) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.stopped {
		return
	}
	if t.timer != nil {
		t.timer.Stop()
	}
	t.timer = time.AfterFunc(d, t.send)
}
