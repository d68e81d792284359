package client

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/norsk-oss/norsk-manager/proto/managerpb"
)

// Default reconnect backoff of an EventSubscription.
const (
	DefaultEventInitialBackoff = 100 * time.Millisecond
	DefaultEventMaxBackoff     = 10 * time.Second
)

// EventStreamSettings configures an EventSubscription.
type EventStreamSettings struct {
	// PendingWindow is how far ahead of its start time a job is reported
	// as job_pending rather than job_out_of_window. It is sent in whole
	// seconds (rounded up) as pending_window_s; zero sends 0, the
	// manager's default. It must be in [0, MaxInt32 seconds].
	PendingWindow time.Duration

	// ResumeFromIndex, when set, makes the first stream start after this
	// log index (no snapshot), e.g. the LastIndex of an earlier
	// subscription. Nil starts with a snapshot.
	ResumeFromIndex *uint64

	// OnEvent receives every event, exactly once and in log order, from
	// the goroutine running Run. Snapshot events (node_running,
	// job_active, job_pending… up to and including initial_data_complete)
	// are delivered only once the whole snapshot has arrived. A
	// stream_reset event means the resume point was lost: the caller must
	// drop what it derived from earlier events and treat the snapshot that
	// follows as a fresh start. While OnEvent runs the stream is not read;
	// a manager drops a subscriber that falls too far behind, which costs a
	// reconnect but loses nothing. Returning an error stops Run, which
	// returns that error; the event then counts as not delivered, so a
	// later Run of the same subscription starts with it again (or, if it
	// was part of a snapshot, with a client-made stream_reset and a fresh
	// snapshot). The event belongs to the caller once passed. Required.
	OnEvent func(*managerpb.EventStreamEvent) error

	// InitialBackoff is the first delay before reconnecting a broken
	// stream; it doubles (with ±20% jitter) on each failure in a row, up to
	// MaxBackoff, and starts again after a stream that delivered events.
	// Zero means DefaultEventInitialBackoff.
	InitialBackoff time.Duration

	// MaxBackoff caps the reconnect delay. Zero means
	// DefaultEventMaxBackoff.
	MaxBackoff time.Duration
}

// EventSubscription follows the manager's event stream across broken
// streams, manager restarts and failover between managers, resuming each
// new stream after the last log index it delivered so that OnEvent sees
// every event exactly once and in order.
//
// Run delivers; LastIndex may be called from any goroutine.
type EventSubscription struct {
	m       *NorskManager
	window  int32
	onEvent func(*managerpb.EventStreamEvent) error
	initial time.Duration
	maxWait time.Duration

	// runMu is held by Run for its whole duration: one Run at a time.
	runMu sync.Mutex

	// mu guards the resume state below, written only by Run.
	mu struct {
		sync.Mutex
		// last is the log index of the last delivered event; valid if
		// haveIndex.
		last      uint64
		haveIndex bool
		// needSnapshot: the next stream must start with a snapshot (no
		// resume index): nothing was delivered yet, or a stream_reset was.
		needSnapshot bool
		// partial: part of a snapshot was delivered when OnEvent failed;
		// the next snapshot must be announced by a stream_reset.
		partial bool
	}
}

// callbackError marks an error returned by OnEvent, which ends Run.
type callbackError struct{ err error }

func (e *callbackError) Error() string { return e.err.Error() }
func (e *callbackError) Unwrap() error { return e.err }

// Subscribe prepares an EventSubscription; nothing is sent until Run. It
// fails if s.OnEvent is nil or s.PendingWindow or a backoff is out of range.
func (m *NorskManager) Subscribe(s EventStreamSettings) (*EventSubscription, error) {
	if s.OnEvent == nil {
		return nil, errors.New("client: EventStreamSettings.OnEvent is nil")
	}
	if s.PendingWindow < 0 || s.PendingWindow > math.MaxInt32*time.Second {
		return nil, fmt.Errorf("client: EventStreamSettings.PendingWindow (%s) must be between 0 and %d seconds", s.PendingWindow, math.MaxInt32)
	}
	secs := (s.PendingWindow + time.Second - 1) / time.Second
	if s.InitialBackoff < 0 || s.MaxBackoff < 0 {
		return nil, errors.New("client: EventStreamSettings.InitialBackoff and MaxBackoff must not be negative")
	}
	sub := &EventSubscription{
		m:       m,
		window:  int32(secs),
		onEvent: s.OnEvent,
		initial: orDefault(s.InitialBackoff, DefaultEventInitialBackoff),
		maxWait: orDefault(s.MaxBackoff, DefaultEventMaxBackoff),
	}
	sub.maxWait = max(sub.maxWait, sub.initial)
	if s.ResumeFromIndex != nil {
		sub.mu.last, sub.mu.haveIndex = *s.ResumeFromIndex, true
	} else {
		sub.mu.needSnapshot = true
	}
	return sub, nil
}

// orDefault returns d, or def if d is zero.
func orDefault(d, def time.Duration) time.Duration {
	if d == 0 {
		return def
	}
	return d
}

// EventStream follows the event stream with settings until ctx is done or
// OnEvent fails: it is Subscribe followed by Run. Use Subscribe to read the
// last delivered index afterwards.
func (m *NorskManager) EventStream(ctx context.Context, settings EventStreamSettings) error {
	sub, err := m.Subscribe(settings)
	if err != nil {
		return err
	}
	return sub.Run(ctx)
}

// LastIndex returns the log index of the last event delivered to OnEvent
// (or the ResumeFromIndex it started from), and false if there is none yet
// or the manager does not number its events. Passing it as ResumeFromIndex
// to a later subscription continues exactly after it.
func (s *EventSubscription) LastIndex() (uint64, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.mu.last, s.mu.haveIndex
}

// Run keeps one event stream open and delivers its events to OnEvent. A
// stream that breaks (codes.Unavailable, a clean end by the manager, a
// manager restart, codes.ResourceExhausted for a slow subscriber, or any
// other code but those below) is reopened after a backoff, resuming after
// the last delivered log index.
//
// Run returns ctx.Err() once ctx is done, the error of OnEvent if it fails
// (unwrapped), or a *CallError when the manager rejects the subscription
// for good (codes.InvalidArgument, Unimplemented, Unauthenticated,
// PermissionDenied). A later Run on the same subscription continues where
// the last one stopped; Run must not be called concurrently (a second call
// waits for the first).
func (s *EventSubscription) Run(ctx context.Context) error {
	s.runMu.Lock()
	defer s.runMu.Unlock()
	delay := s.initial
	for {
		progressed, err := s.follow(ctx)
		if ctxErr := ctx.Err(); ctxErr != nil {
			return ctxErr
		}
		if cb, ok := errors.AsType[*callbackError](err); ok {
			return cb.err
		}
		if !retryable(err) {
			return s.m.callErr(ctx, "EventStream", err, nil)
		}
		if progressed {
			delay = s.initial
		}
		wait := jitter(delay)
		last, have := s.LastIndex()
		s.m.logger.Warn("event stream broken; reconnecting",
			"error", err, "delay", wait, "resume_after", last, "have_index", have)
		if err := sleepCtx(ctx, wait); err != nil {
			return err
		}
		delay = min(2*delay, s.maxWait)
	}
}

// retryable reports whether a broken stream should be reopened.
func retryable(err error) bool {
	switch status.Code(err) {
	case codes.InvalidArgument, codes.Unimplemented, codes.Unauthenticated, codes.PermissionDenied:
		return false
	}
	return true
}

// jitter spreads d by ±20%.
func jitter(d time.Duration) time.Duration {
	return time.Duration(float64(d) * (0.8 + 0.4*rand.Float64()))
}

// sleepCtx waits for d or until ctx is done (returning ctx.Err()).
func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// request builds the request of the next stream. When the caller's view
// cannot be continued exactly, it first delivers a client-made stream_reset
// so the caller knows a fresh snapshot follows: after a snapshot cut short
// by a failing OnEvent, or after a stream without log indexes (a manager
// that does not number its events) delivered something.
func (s *EventSubscription) request() (*managerpb.EventStreamRequest, error) {
	s.mu.Lock()
	reason := ""
	switch {
	case s.mu.needSnapshot && s.mu.partial:
		reason = "client: the previous snapshot was cut short by a failing OnEvent; a fresh snapshot follows"
	case !s.mu.needSnapshot && !s.mu.haveIndex:
		reason = "client: the manager sent no log index, so the stream cannot resume; a fresh snapshot follows"
	}
	s.mu.Unlock()
	if reason != "" {
		reset := &managerpb.EventStreamEvent{Event: &managerpb.EventStreamEvent_StreamReset{
			StreamReset: &managerpb.StreamReset{Reason: reason},
		}}
		if err := s.deliverReset(reset); err != nil {
			return nil, err
		}
	}
	req := &managerpb.EventStreamRequest{PendingWindowS: s.window}
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.mu.needSnapshot {
		req.ResumeFromIndex = proto.Uint64(s.mu.last)
	}
	return req, nil
}

// follow opens one stream and delivers its events until it fails. It
// reports whether the stream received anything, and the error that ended it
// (a *callbackError if OnEvent failed).
//
// Snapshot events are buffered until initial_data_complete so that a stream
// broken mid-snapshot can simply ask for a new snapshot: nothing of the
// broken one was delivered.
func (s *EventSubscription) follow(ctx context.Context) (progressed bool, err error) {
	req, err := s.request()
	if err != nil {
		return false, err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := s.m.api.EventStream(ctx, req)
	if err != nil {
		return false, err
	}
	inSnapshot := req.ResumeFromIndex == nil
	var snapshot []*managerpb.EventStreamEvent
	for {
		ev, err := stream.Recv()
		if err != nil {
			if isEOF(err) {
				err = status.Error(codes.Unavailable, "event stream ended by the manager")
			}
			return progressed, err
		}
		progressed = true
		switch {
		case ev.GetStreamReset() != nil:
			snapshot, inSnapshot = nil, true
			if err := s.deliverReset(ev); err != nil {
				return progressed, err
			}
		case inSnapshot:
			snapshot = append(snapshot, ev)
			if ev.GetInitialDataComplete() == nil {
				continue
			}
			for _, sev := range snapshot {
				if err := s.deliver(sev); err != nil {
					return progressed, err
				}
				s.mu.Lock()
				s.mu.partial = true
				s.mu.Unlock()
			}
			snapshot, inSnapshot = nil, false
			s.mu.Lock()
			s.mu.needSnapshot, s.mu.partial = false, false
			s.mu.Unlock()
		default:
			if err := s.deliver(ev); err != nil {
				return progressed, err
			}
		}
	}
}

// deliverReset delivers a stream_reset from the manager and forgets the
// resume point: the next stream (if this one breaks before its snapshot
// completes) asks for a fresh snapshot, and the snapshot's indexes are
// accepted even if lower than the ones delivered before the reset.
func (s *EventSubscription) deliverReset(ev *managerpb.EventStreamEvent) error {
	s.mu.Lock()
	s.mu.last, s.mu.haveIndex, s.mu.needSnapshot = 0, false, true
	s.mu.Unlock()
	if err := s.deliver(ev); err != nil {
		return err
	}
	s.mu.Lock()
	s.mu.partial = false
	s.mu.Unlock()
	return nil
}

// deliver passes ev to OnEvent and advances the last index. An event whose
// index is lower than the last delivered one breaks the manager's contract;
// it is logged and dropped so that the caller's view stays ordered.
func (s *EventSubscription) deliver(ev *managerpb.EventStreamEvent) error {
	s.mu.Lock()
	if s.mu.haveIndex && ev.GetLogIndex() != 0 && ev.GetLogIndex() < s.mu.last {
		last := s.mu.last
		s.mu.Unlock()
		s.m.logger.Warn("dropping event older than the last delivered one",
			"log_index", ev.GetLogIndex(), "last_index", last)
		return nil
	}
	s.mu.Unlock()
	if err := s.onEvent(ev); err != nil {
		return &callbackError{err: err}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if ev.GetLogIndex() > 0 && (!s.mu.haveIndex || ev.GetLogIndex() > s.mu.last) {
		s.mu.last, s.mu.haveIndex = ev.GetLogIndex(), true
	}
	return nil
}
