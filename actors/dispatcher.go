package actors

import (
	"time"

	"github.com/asynkron/protoactor-go/actor"
)

// Pooled dispatcher settings (issue 22 §2, docs/benchmarks.md).
const (
	// dispatcherThroughput is protoactor's default: messages a mailbox
	// handles before it yields.
	dispatcherThroughput = 300
	// dispatcherWorkers bounds the goroutines a PooledDispatcher keeps.
	// Grains block in their journal appends (a group commit, a Raft
	// commit), so the pool is sized for the calls in flight, not the
	// cores; a mailbox scheduled while all are busy runs on a new
	// goroutine, as protoactor's default dispatcher does.
	dispatcherWorkers = 256
	// dispatcherIdle is how long an idle worker waits for work before it
	// exits, so an idle manager (and a test's stopped actor system) keeps
	// no workers.
	dispatcherIdle = 10 * time.Second
	// dispatcherReset is how many mailbox runs a worker carries out before
	// it hands its place to a fresh goroutine, so that a stack grown once
	// by a deep call is not kept forever (gRPC's stream workers do the
	// same).
	dispatcherReset = 1 << 16
)

// PooledDispatcher is a protoactor Dispatcher that runs mailboxes on a
// pool of long-lived goroutines instead of a new goroutine per schedule.
// A new goroutine starts with a small stack and grows it (copying) on the
// first deep call — a badger read in a grain's activation, a journal
// append: at 64 CreateJob clients the copies were ~4 % of a manager's CPU.
// A worker keeps its grown stack across runs. It is safe for concurrent
// use; the zero value is not usable (NewPooledDispatcher).
type PooledDispatcher struct {
	work  chan func()
	slots chan struct{}
}

var _ actor.Dispatcher = (*PooledDispatcher)(nil)

// NewPooledDispatcher returns a dispatcher with at most dispatcherWorkers
// pooled goroutines.
func NewPooledDispatcher() *PooledDispatcher {
	return &PooledDispatcher{work: make(chan func()), slots: make(chan struct{}, dispatcherWorkers)}
}

// Schedule implements actor.Dispatcher: fn runs on an idle worker, on a
// new worker if the pool has room, or else on a new goroutine.
func (d *PooledDispatcher) Schedule(fn func()) {
	select {
	case d.work <- fn:
		return
	default:
	}
	select {
	case d.slots <- struct{}{}:
		go d.worker(fn)
	default:
		go fn()
	}
}

// Throughput implements actor.Dispatcher.
func (d *PooledDispatcher) Throughput() int { return dispatcherThroughput }

// worker runs fn, then whatever is scheduled to it, until it has been
// idle for dispatcherIdle (it frees its slot) or has run dispatcherReset
// functions (a fresh goroutine takes its slot).
func (d *PooledDispatcher) worker(fn func()) {
	fn()
	idle := time.NewTimer(dispatcherIdle)
	defer idle.Stop()
	for range dispatcherReset {
		idle.Reset(dispatcherIdle)
		select {
		case fn = <-d.work:
			fn()
		case <-idle.C:
			<-d.slots
			return
		}
	}
	go d.worker(func() {})
}
