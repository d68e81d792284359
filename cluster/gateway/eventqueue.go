package gateway

import (
	"context"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/norsk-oss/norsk-manager/proto/managerpb"
)

// The queue between an event stream's reader and its sender, bounded in
// events (Buffer) and in bytes (MaxQueueBytes, MaxTotalBytes through
// streamBudget), and the snapshot turns (docs/design/event-stream.md).

// queued is an event waiting for the sender, with the bytes it holds.
type queued struct {
	ev   *managerpb.EventStreamEvent
	size int64
}

// push queues ev, an event made by the stream (a snapshot's, a derived
// classification), for the sender, first taking its encoded size: within
// the subscriber's own bound (waiting for the sender to make room) and
// within the budget of all streams (streamBudget.take). The subscriber is
// cut off with ResourceExhausted if it has not made room within
// SendTimeout, or by the budget.
func (sub *subscriber) push(ctx context.Context, ev *managerpb.EventStreamEvent) error {
	if sub.redact {
		redactEnv(ev)
	}
	size := int64(proto.Size(ev))
	var w stall
	defer w.stop()
	for !sub.budget.fitsStream(sub, size, sub.cfg.MaxQueueBytes) {
		if err := sub.waitRoom(ctx, &w, size); err != nil {
			return err
		}
	}
	if err := sub.take(ctx, size, false); err != nil {
		return err
	}
	return sub.enqueue(ctx, queued{ev: ev, size: size}, &w)
}

// pushTaken queues a log event of the page, whose size bytes were taken
// when the page was read (ReadEventPageAdmit). Both pushes redact
// environment values for a caller below operator (redact.go): the event
// is the subscriber's own decoded copy.
func (sub *subscriber) pushTaken(ctx context.Context, ev *managerpb.EventStreamEvent, size int64) error {
	if sub.redact {
		redactEnv(ev)
	}
	var w stall
	defer w.stop()
	return sub.enqueue(ctx, queued{ev: ev, size: size}, &w)
}

// enqueue hands q to the sender, waiting while the queue is full.
func (sub *subscriber) enqueue(ctx context.Context, q queued, w *stall) error {
	for {
		select {
		case sub.out <- q:
			return nil
		default:
		}
		if err := sub.waitRoom(ctx, w, q.size); err != nil {
			return err
		}
	}
}

// take takes n bytes from the budget, waiting (without its snapshot turn)
// if they do not fit at once.
func (sub *subscriber) take(ctx context.Context, n int64, asCredit bool) error {
	if sub.budget.tryTake(sub, n, asCredit) {
		return nil
	}
	return sub.yieldingTurn(ctx, func() error { return sub.budget.take(ctx, sub, n, asCredit, sub.cfg.SendTimeout) })
}

// stall is the SendTimeout of one push, started at its first wait.
type stall struct{ t *time.Timer }

func (w *stall) expired(d time.Duration) <-chan time.Time {
	if w.t == nil {
		w.t = time.NewTimer(d)
	}
	return w.t.C
}

func (w *stall) stop() {
	if w.t != nil {
		w.t.Stop()
	}
}

// waitRoom waits (without its snapshot turn) until the sender has given
// bytes back, or the push has waited SendTimeout: then the subscriber is
// too slow (ResourceExhausted).
func (sub *subscriber) waitRoom(ctx context.Context, w *stall, need int64) error {
	return sub.yieldingTurn(ctx, func() error {
		select {
		case <-sub.room:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		case <-w.expired(sub.cfg.SendTimeout):
			hint, _, _ := sub.resumeHint()
			return status.Errorf(codes.ResourceExhausted,
				"event stream subscriber too slow: it accepted nothing for %s with %d events (%d bytes) queued and %d more bytes to send; %s",
				sub.cfg.SendTimeout, len(sub.out), sub.budget.heldBy(sub), need, hint)
		}
	})
}

// takeTurn takes one of the MaxConcurrentSnapshots snapshot turns.
func (sub *subscriber) takeTurn(ctx context.Context) error {
	select {
	case sub.srv.snapshotTurns <- struct{}{}:
		sub.slot = true
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// giveTurn gives the snapshot turn back, if the subscriber holds one.
func (sub *subscriber) giveTurn() {
	if sub.slot {
		sub.slot = false
		<-sub.srv.snapshotTurns
	}
}

// yieldingTurn runs wait (which blocks on the client or the budget)
// without the snapshot turn, if the subscriber holds one, and takes a
// turn again after it.
func (sub *subscriber) yieldingTurn(ctx context.Context, wait func() error) error {
	if !sub.slot {
		return wait()
	}
	sub.giveTurn()
	if err := wait(); err != nil {
		return err
	}
	return sub.takeTurn(ctx)
}

// makeRoom waits until an event of size bytes that a page refused fits
// the subscriber's own bound, then takes its bytes from the budget as the
// credit the next page read admits it with.
func (sub *subscriber) makeRoom(ctx context.Context, size int64) error {
	var w stall
	defer w.stop()
	for !sub.budget.fitsStream(sub, size, sub.cfg.MaxQueueBytes) {
		if err := sub.waitRoom(ctx, &w, size); err != nil {
			return err
		}
	}
	return sub.take(ctx, size, true)
}
