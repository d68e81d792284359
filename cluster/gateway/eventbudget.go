package gateway

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/dustin/go-humanize"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// streamBudget accounts the bytes every event stream of a manager holds —
// its read page, its queue and the message gRPC is sending for it — against
// EventStreamConfig.MaxTotalBytes (docs/design/event-stream.md, "Memory").
// A subscriber that needs more than the budget has left cuts the slowest
// subscriber (itself, possibly) with ResourceExhausted and waits for the
// bytes to be let go.
type streamBudget struct {
	limit int64
	mu    struct {
		sync.Mutex
		total int64
		// cutting is the bytes still held by subscribers already cut:
		// they are on their way out.
		cutting int64
		subs    map[*subscriber]struct{}
		// freed is closed (and replaced) when bytes are given back while
		// waiters > 0.
		freed   chan struct{}
		waiters int
	}
}

func newStreamBudget(limit int64) *streamBudget {
	b := &streamBudget{limit: limit}
	b.mu.subs = map[*subscriber]struct{}{}
	b.mu.freed = make(chan struct{})
	return b
}

// Held returns the bytes all event streams hold (tests, metrics).
func (b *streamBudget) Held() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.mu.total
}

// join starts accounting sub.
func (b *streamBudget) join(sub *subscriber) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.mu.subs[sub] = struct{}{}
}

// leave stops accounting sub and gives back whatever it still holds.
func (b *streamBudget) leave(sub *subscriber) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.giveLocked(sub, sub.held)
	delete(b.mu.subs, sub)
}

// give gives back n bytes sub held.
func (b *streamBudget) give(sub *subscriber, n int64) {
	if n == 0 {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.giveLocked(sub, n)
}

func (b *streamBudget) giveLocked(sub *subscriber, n int64) {
	sub.held -= n
	b.mu.total -= n
	if sub.cutErr != nil {
		b.mu.cutting -= n
	}
	if b.mu.waiters > 0 {
		close(b.mu.freed)
		b.mu.freed = make(chan struct{})
	}
}

// admit is a page's admission of an event of size bytes for sub, inside
// the read view (it never blocks): from sub's credit (bytes taken for it
// by take after a refusal), else if sub stays within its own bound
// (perStream; one event is always admitted to a subscriber that holds
// nothing) and the total within the budget.
func (b *streamBudget) admit(sub *subscriber, size, perStream int64) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if sub.credit >= size {
		sub.credit -= size
		return true
	}
	if sub.cutErr != nil || (sub.held > 0 && sub.held+size > perStream) || b.mu.total+size > b.limit {
		return false
	}
	sub.held += size
	b.mu.total += size
	return true
}

// tryTake takes n bytes for sub if they fit the budget now (as take,
// without cutting or waiting).
func (b *streamBudget) tryTake(sub *subscriber, n int64, asCredit bool) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if sub.cutErr != nil || b.mu.total+n > b.limit {
		return false
	}
	sub.held += n
	b.mu.total += n
	if asCredit {
		sub.credit += n
	}
	return true
}

// heldBy returns the bytes sub holds.
func (b *streamBudget) heldBy(sub *subscriber) int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return sub.held
}

// fitsStream reports whether sub may hold size more bytes under its own
// bound.
func (b *streamBudget) fitsStream(sub *subscriber, size, perStream int64) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return sub.held == 0 || sub.held+size <= perStream
}

// dropCredit gives back the credit a page did not use.
func (b *streamBudget) dropCredit(sub *subscriber) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if sub.credit > 0 {
		c := sub.credit
		sub.credit = 0
		b.giveLocked(sub, c)
	}
}

// take takes n bytes for sub within the budget. While they do not fit it
// cuts the slowest subscriber that holds bytes (counting n as sub's): the
// one whose client has gone longest without accepting a message, ties to
// the one holding the most (slowestLocked); and
// waits for the bytes of the subscribers cut to be given back — at most
// wait, after which sub is cut itself. If sub is the one to cut, take
// returns its cut status. asCredit: the bytes are for an event a page
// refused (sub.credit, admitted by the next page read).
func (b *streamBudget) take(ctx context.Context, sub *subscriber, n int64, asCredit bool, wait time.Duration) error {
	var timeout <-chan time.Time
	for {
		b.mu.Lock()
		if sub.cutErr != nil {
			err := sub.cutErr
			b.mu.Unlock()
			return err
		}
		if b.mu.total+n <= b.limit {
			sub.held += n
			b.mu.total += n
			if asCredit {
				sub.credit += n
			}
			b.mu.Unlock()
			return nil
		}
		if b.mu.total-b.mu.cutting+n > b.limit {
			victim := b.slowestLocked(sub, n)
			err := b.cutLocked(victim, n)
			if victim == sub {
				b.mu.Unlock()
				return err
			}
		}
		// Wait for the subscribers cut to let go.
		freed := b.mu.freed
		b.mu.waiters++
		b.mu.Unlock()
		if timeout == nil {
			t := time.NewTimer(wait)
			defer t.Stop()
			timeout = t.C
		}
		var err error
		select {
		case <-freed:
		case <-ctx.Done():
			err = ctx.Err()
		case <-timeout:
			b.mu.Lock()
			err = b.cutLocked(sub, n)
			b.mu.Unlock()
		}
		b.mu.Lock()
		b.mu.waiters--
		b.mu.Unlock()
		if err != nil {
			return err
		}
	}
}

// slowestLocked returns the subscriber not yet cut, holding bytes (sub
// counted with extra more), whose client has gone longest without
// accepting a message — the slowest — ties going to the one holding the
// most.
func (b *streamBudget) slowestLocked(sub *subscriber, extra int64) *subscriber {
	var best *subscriber
	var bestHeld, bestSent int64
	for s := range b.mu.subs {
		h := s.held
		if s == sub {
			h += extra
		}
		if s.cutErr != nil || h <= 0 {
			continue
		}
		sent := s.lastSent.Load()
		if best == nil || sent < bestSent || (sent == bestSent && h > bestHeld) {
			best, bestHeld, bestSent = s, h, sent
		}
	}
	return best
}

// cutLocked ends victim with ResourceExhausted (its cut status, also
// returned): its handler sees its context cancelled with that cause.
func (b *streamBudget) cutLocked(victim *subscriber, wanted int64) error {
	held := victim.held
	victim.cutErr = budgetStatus(victim, held, b.mu.total, wanted, b.limit)
	b.mu.cutting += held
	victim.cancel(victim.cutErr)
	return victim.cutErr
}

// budgetStatus is the status of a subscriber cut by the budget: the
// message names the limit and where to resume, and an ErrorInfo detail
// (reason EVENT_STREAM_MEMORY) carries the same in its metadata
// ("resume_from_index", absent while the stream's snapshot was not
// complete; "held_bytes"; "limit_bytes").
func budgetStatus(sub *subscriber, held, total, wanted, limit int64) error {
	hint, idx, ok := sub.resumeHint()
	st := status.Newf(codes.ResourceExhausted,
		"event stream ended: the manager's event streams hold %s and need %s more, past their budget of %s (--event-stream-memory); "+
			"this stream was the slowest to read, holding %s; %s",
		humanize.IBytes(uint64(total)), humanize.IBytes(uint64(wanted)), humanize.IBytes(uint64(limit)), humanize.IBytes(uint64(held)), hint)
	md := map[string]string{"held_bytes": strconv.FormatInt(held, 10), "limit_bytes": strconv.FormatInt(limit, 10)}
	if ok {
		md["resume_from_index"] = strconv.FormatUint(idx, 10)
	}
	if d, err := st.WithDetails(&errdetails.ErrorInfo{Reason: "EVENT_STREAM_MEMORY", Domain: "norsk-manager", Metadata: md}); err == nil {
		st = d
	}
	return st.Err()
}

// resumeHint says how the client of sub resumes: from the last log index
// sent to it, once its snapshot (if any) was complete; else without an
// index.
func (sub *subscriber) resumeHint() (hint string, index uint64, ok bool) {
	if !sub.resumable.Load() {
		return "reconnect without resume_from_index (its snapshot was not complete)", 0, false
	}
	idx := sub.sentIndex.Load()
	return fmt.Sprintf("reconnect with resume_from_index=%d (the last log_index sent to it)", idx), idx, true
}
