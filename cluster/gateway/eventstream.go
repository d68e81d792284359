package gateway

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/norsk-oss/norsk-manager/persistence"
	"github.com/norsk-oss/norsk-manager/proto/internalpb"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
)

// EventStreamConfig configures Manager.EventStream.
type EventStreamConfig struct {
	// MaxLag cuts off a subscriber whose delivered index is more than this
	// many events behind the log head (ResourceExhausted). Default 10000.
	MaxLag uint64
	// SendTimeout cuts off a subscriber that has not accepted a message for
	// this long (its buffers are full: it is not reading). Default 30 s.
	SendTimeout time.Duration
	// Buffer is how many events may wait for a subscriber between the log
	// and the network. Default 256.
	Buffer int
	// MaxQueueBytes bounds the bytes one subscriber holds, counted as the
	// events' encoded sizes: the events read from the log and not yet
	// queued (its read page), the events queued for the sender, and the
	// message gRPC is sending (events carry whole jobs with their history,
	// so a count alone does not bound memory). One event larger than the
	// bound is still sent, alone. Default 16 MiB.
	MaxQueueBytes int64
	// MaxTotalBytes bounds the bytes all subscribers hold together, counted
	// as MaxQueueBytes is (--event-stream-memory). A subscriber needing
	// more cuts the slowest with ResourceExhausted and a resume index
	// (streamBudget). Default DefaultEventStreamMemory; at
	// least MaxQueueBytes.
	MaxTotalBytes int64
	// MaxConcurrentSnapshots bounds the snapshots being read at once
	// (decoding every active job is the costly part of a new stream);
	// more streams wait for a turn. A snapshot waiting on its client gives
	// its turn up meanwhile. Default 4.
	MaxConcurrentSnapshots int
	// MaxSubscribers bounds the event streams served at once; more get
	// ResourceExhausted. Default 1000.
	MaxSubscribers int64
	// ReadBatch is how many events one store read returns. Default 256.
	ReadBatch int
	// MaxPendingWindow bounds pending_window_s. Default 366 days.
	MaxPendingWindow time.Duration
}

func (c *EventStreamConfig) defaults() {
	if c.MaxLag == 0 {
		c.MaxLag = 10_000
	}
	if c.SendTimeout <= 0 {
		c.SendTimeout = 30 * time.Second
	}
	if c.Buffer <= 0 {
		c.Buffer = 256
	}
	if c.ReadBatch <= 0 {
		c.ReadBatch = 256
	}
	if c.MaxQueueBytes <= 0 {
		c.MaxQueueBytes = 16 << 20
	}
	if c.MaxTotalBytes <= 0 {
		c.MaxTotalBytes = DefaultEventStreamMemory
	}
	c.MaxTotalBytes = max(c.MaxTotalBytes, c.MaxQueueBytes)
	if c.MaxConcurrentSnapshots <= 0 {
		c.MaxConcurrentSnapshots = 4
	}
	if c.MaxSubscribers <= 0 {
		c.MaxSubscribers = 1000
	}
	if c.MaxPendingWindow <= 0 {
		c.MaxPendingWindow = 366 * 24 * time.Hour
	}
}

// DefaultEventStreamMemory is the default of
// EventStreamConfig.MaxTotalBytes (--event-stream-memory): 256 MiB.
const DefaultEventStreamMemory = 256 << 20

// EventStream serves the durable event log (docs/design/event-stream.md).
//
// Without resume_from_index: a snapshot — node_running for every STARTED
// node, job_active for every ACTIVE job, job_pending for every PRE job
// whose start is within pending_window_s — then initial_data_complete, all
// carrying the log index the snapshot was read at, then every later event
// in log order. With resume_from_index = N: exactly the events with index
// > N, no snapshot; if N is no longer retained (or is beyond the head) a
// stream_reset event comes first, then a full snapshot.
//
// Besides the log's events each subscriber gets, for PRE jobs, a
// job_pending or job_out_of_window whenever the job's classification under
// its window changes (on creation, on update, and when the job's start
// enters the window as time passes). These are derived per subscriber, are
// not log entries, and carry the index of the log event they follow.
//
// A subscriber that falls more than MaxLag events behind, or stops reading
// for SendTimeout, is ended with ResourceExhausted; it may resume. A caller
// (a token, or an address when ACLs are off) holding
// LimitsConfig.MaxEventStreamsPerCaller streams already, or a manager
// serving MaxSubscribers, answers a new one ResourceExhausted.
func (s *Server) EventStream(req *managerpb.EventStreamRequest, stream managerpb.Manager_EventStreamServer) error {
	window := time.Duration(req.GetPendingWindowS()) * time.Second
	if req.GetPendingWindowS() < 0 || window > s.cfg.Events.MaxPendingWindow {
		return invalid("pending_window_s", "%d is outside 0..%d", req.GetPendingWindowS(), int64(s.cfg.Events.MaxPendingWindow/time.Second))
	}
	release, err := s.streams.acquire(callerKey(stream.Context()))
	if err != nil {
		return err
	}
	defer release()
	if n := s.subscribers.Add(1); n > s.cfg.Events.MaxSubscribers {
		s.subscribers.Add(-1)
		return status.Errorf(codes.ResourceExhausted, "the manager already serves %d event streams (the limit); retry later", s.cfg.Events.MaxSubscribers)
	}
	defer s.subscribers.Add(-1)
	ctx, cancel := context.WithCancelCause(stream.Context())
	defer cancel(nil)
	sub := &subscriber{
		srv:     s,
		cfg:     s.cfg.Events,
		store:   s.cfg.Store,
		budget:  s.budget,
		cancel:  cancel,
		redact:  s.redactsEnv(stream.Context()),
		window:  window,
		out:     make(chan queued, s.cfg.Events.Buffer),
		room:    make(chan struct{}, 1),
		pending: map[string]bool{},
		waiting: map[string]time.Time{},
	}
	sub.lastSent.Store(time.Now().UnixNano())
	if req.ResumeFromIndex != nil {
		sub.sentIndex.Store(req.GetResumeFromIndex())
		sub.resumable.Store(true)
	}
	s.budget.join(sub)
	// The budget stops counting the subscriber when both the handler
	// and the sender are done with its events.
	var parties sync.WaitGroup
	parties.Add(2)
	go func() { parties.Wait(); s.budget.leave(sub) }()
	defer parties.Done()
	sendErr := make(chan error, 1)
	// The sender owns stream.Send. It ends when out is closed, when a send
	// fails, or — if the handler returned while a Send was blocked on a
	// client that does not read — when gRPC tears the stream down.
	go func() {
		defer parties.Done()
		// Encoding a message for Send makes a second copy of it, which
		// gRPC keeps until its client's flow control lets it out, and
		// it takes the next message only then: the encoding is taken
		// from the budget before Send, and given back when the next Send
		// returns; the message's own bytes when its Send returns.
		var inFlight int64
		defer func() { s.budget.give(sub, inFlight) }()
		for q := range sub.out {
			if err := s.budget.take(ctx, sub, q.size, false, s.cfg.Events.SendTimeout); err != nil {
				if status.Code(err) != codes.ResourceExhausted {
					err = nil // the handler is ending
				}
				sendErr <- err
				return
			}
			err := stream.Send(q.ev)
			s.budget.give(sub, inFlight+q.size)
			inFlight = q.size
			select {
			case sub.room <- struct{}{}:
			default:
			}
			if err != nil {
				sendErr <- err
				cancel(err)
				return
			}
			sub.sent(q.ev)
		}
		sendErr <- nil
	}()
	err = sub.run(ctx, req)
	close(sub.out)
	if cause := context.Cause(ctx); cause != nil && status.Code(cause) == codes.ResourceExhausted {
		err = cause // cut by the budget (streamBudget)
	}
	if err == nil || errors.Is(err, context.Canceled) {
		if serr := <-sendErr; serr != nil {
			return serr
		}
		return status.FromContextError(stream.Context().Err()).Err()
	}
	// Do not wait for the sender: it may be blocked on a client that does
	// not read; it ends when gRPC closes the stream after we return.
	s.log.Info("event stream subscriber ended", "error", err, "delivered_index", sub.cursor, "sent_index", sub.sentIndex.Load())
	return err
}

// subscriber is one EventStream call. Only the handler goroutine touches
// it, except: the sender sets sentIndex and resumable; the budget (under
// its lock) held, credit and cutErr.
type subscriber struct {
	srv    *Server
	cfg    EventStreamConfig
	store  *persistence.Store
	budget *streamBudget
	// cancel ends the handler's context with a cause (the budget's cut).
	cancel context.CancelCauseFunc
	// redact: the caller's role gets environment values redacted.
	redact bool
	window time.Duration
	out    chan queued
	// room is signalled each time the sender gives bytes back.
	room chan struct{}
	// held is the bytes the subscriber holds (page, queue, in flight);
	// credit the part of held taken for the next page's first event;
	// cutErr is set when the budget cut it. Guarded by budget.mu.
	held, credit int64
	cutErr       error
	// sentIndex is the log index of the last event the sender handed to
	// gRPC; resumable is set while resuming from it loses nothing (a
	// resumed stream, or once the snapshot's initial_data_complete was
	// sent).
	sentIndex atomic.Uint64
	resumable atomic.Bool
	// lastSent is when (unix ns) the client last accepted a message, or
	// the stream opened: the budget cuts the oldest first.
	lastSent atomic.Int64
	// slot is set while the subscriber holds a snapshot turn.
	slot bool
	// cursor is the index of the last log event pushed to out.
	cursor persistence.Index
	// pending: PRE jobs known to this subscriber → within its window.
	pending map[string]bool
	// waiting: PRE jobs outside the window → start time; starts is a heap
	// of the same (entries whose time no longer matches are stale).
	waiting map[string]time.Time
	starts  startHeap
	// catchingUp is set while a resumed stream replays toward the head;
	// resumeSince is the time of the client's last event.
	catchingUp  bool
	resumeSince time.Time
}

// sent records, on the sender, that ev was handed to gRPC.
func (sub *subscriber) sent(ev *managerpb.EventStreamEvent) {
	switch {
	case ev.GetStreamReset() != nil:
		sub.resumable.Store(false)
	case ev.GetInitialDataComplete() != nil:
		sub.resumable.Store(true)
	}
	sub.sentIndex.Store(ev.GetLogIndex())
	sub.lastSent.Store(time.Now().UnixNano())
}

func (sub *subscriber) run(ctx context.Context, req *managerpb.EventStreamRequest) error {
	// In a cluster, catch up with the leader first: the snapshot must show
	// every acknowledged write, and a client resuming from another
	// manager's index must not be told its index is beyond our head.
	if err := sub.srv.barrier(ctx); err != nil {
		return err
	}
	resumed := false
	if req.ResumeFromIndex != nil {
		n := persistence.Index(req.GetResumeFromIndex())
		// The bounds as a read sees them, not the FSM's cache: a client
		// resuming from an index it was just sent must not be told it is
		// beyond the head.
		var first, head persistence.Index
		if err := sub.store.View(func(r *persistence.Reader) (err error) {
			first, head, err = r.EventBounds()
			return err
		}); err != nil {
			return toStatus(err)
		}
		base, err := sub.store.EventLogBase()
		if err != nil {
			return toStatus(err)
		}
		reason := resetReason(n, first, head, base)
		if reason == "" {
			sub.cursor, resumed = n, true
		} else if err := sub.push(ctx, &managerpb.EventStreamEvent{LogIndex: uint64(head), EventTime: timestamppb.New(sub.srv.cfg.Clock()), Event: &managerpb.EventStreamEvent_StreamReset{
			StreamReset: &managerpb.StreamReset{RequestedIndex: uint64(n), FirstRetainedIndex: uint64(first), HeadIndex: uint64(head),
				Reason: reason + "; a fresh snapshot follows"}}}); err != nil {
			return err
		}
	}
	var err error
	if resumed {
		err = sub.resume(ctx)
	} else {
		err = sub.snapshot(ctx)
	}
	if err != nil {
		return err
	}
	return sub.tail(ctx)
}

// snapshot sends the current state and initial_data_complete, all at the
// index the snapshot is read at and with the time it is read, and starts
// the cursor there. It reads during one of MaxConcurrentSnapshots turns,
// and lists what it sends before sending anything: an iterator open while
// a push waits on the client would pin badger's memtables.
func (sub *subscriber) snapshot(ctx context.Context) error {
	if err := sub.takeTurn(ctx); err != nil {
		return err
	}
	defer sub.giveTurn()
	now := sub.srv.cfg.Clock()
	ts := timestamppb.New(now)
	return sub.store.View(func(r *persistence.Reader) error {
		head, err := r.EventHead()
		if err != nil {
			return err
		}
		sub.cursor = head
		at := uint64(head)
		var nodes []*internalpb.NodeRecord
		if err := r.Nodes(func(n *internalpb.NodeRecord) error {
			if n.GetState() == managerpb.NodeLifecycle_NODE_LIFECYCLE_STARTED {
				nodes = append(nodes, n)
			}
			return nil
		}); err != nil {
			return err
		}
		var active []string
		if err := r.JobIDsInState(managerpb.Job_ACTIVE, func(id string) error { active = append(active, id); return nil }); err != nil {
			return err
		}
		var pending []string
		if err := r.PreJobs(func(id string, start time.Time) error {
			if sub.classify(id, start, now) {
				pending = append(pending, id)
			}
			return nil
		}); err != nil {
			return err
		}
		health, err := r.ProviderHealth()
		if err != nil {
			return err
		}
		for _, n := range nodes {
			inst, err := nodeInstances(r, n.GetNodeId())
			if err != nil {
				return err
			}
			if err := sub.push(ctx, &managerpb.EventStreamEvent{LogIndex: at, EventTime: ts, Event: &managerpb.EventStreamEvent_NodeRunning{NodeRunning: &managerpb.NodeRunning{
				NodeMetadata: n.GetMetadata(), RunningNodeMetadata: n.GetRunningMetadata(), Instances: inst}}}); err != nil {
				return err
			}
		}
		for _, id := range active {
			rec, _, err := r.Job(id)
			if err != nil {
				return err
			}
			if err := sub.push(ctx, &managerpb.EventStreamEvent{LogIndex: at, EventTime: ts, Event: &managerpb.EventStreamEvent_JobActive{JobActive: &managerpb.JobActive{JobWithHistory: rec.GetJob()}}}); err != nil {
				return err
			}
		}
		for _, id := range pending {
			rec, _, err := r.Job(id)
			if err != nil {
				return err
			}
			if err := sub.push(ctx, &managerpb.EventStreamEvent{LogIndex: at, EventTime: ts, Event: &managerpb.EventStreamEvent_JobPending{JobPending: &managerpb.JobPending{JobWithHistory: rec.GetJob()}}}); err != nil {
				return err
			}
		}
		return sub.push(ctx, &managerpb.EventStreamEvent{LogIndex: at, EventTime: ts, Event: &managerpb.EventStreamEvent_InitialDataComplete{InitialDataComplete: &managerpb.InitialDataComplete{Health: health}}})
	})
}

// resume starts after the client's index: no snapshot. It only notes the
// time of the client's last event; classification waits until the replay
// has caught up (catchUp), so that jobs the replay creates or changes are
// classified from their events, as a live subscriber would.
func (sub *subscriber) resume(context.Context) error {
	sub.catchingUp = true
	if evs, err := sub.store.ReadEvents(sub.cursor, 1); err == nil && len(evs) == 1 {
		sub.resumeSince = evs[0].GetAt().AsTime()
	}
	return nil
}

// catchUp runs once a resumed stream has replayed up to the head: it
// classifies the PRE jobs the replay did not mention, and sends job_pending
// for those whose start entered the window after the client's last event.
func (sub *subscriber) catchUp(ctx context.Context) error {
	sub.catchingUp = false
	now := sub.srv.cfg.Clock()
	var entered []string
	err := sub.store.View(func(r *persistence.Reader) error {
		return r.PreJobs(func(id string, start time.Time) error {
			if _, known := sub.pending[id]; known {
				return nil
			}
			if sub.classify(id, start, now) && !sub.resumeSince.IsZero() && start.After(sub.resumeSince.Add(sub.window)) {
				entered = append(entered, id)
			}
			return nil
		})
	})
	if err != nil {
		return err
	}
	return sub.sendPending(ctx, entered)
}

// sendPending sends job_pending for each job still PRE, with the time it
// is sent (the job's start entered the window: no log event to take the
// time of).
func (sub *subscriber) sendPending(ctx context.Context, ids []string) error {
	for _, id := range ids {
		var rec *internalpb.JobRecord
		err := sub.store.View(func(r *persistence.Reader) error {
			var err error
			rec, _, err = r.Job(id)
			return err
		})
		if errors.Is(err, persistence.ErrNotFound) || rec.GetJob().GetJob().GetState() != managerpb.Job_PRE {
			continue
		}
		if err != nil {
			return err
		}
		if err := sub.push(ctx, &managerpb.EventStreamEvent{LogIndex: uint64(sub.cursor), EventTime: timestamppb.New(sub.srv.cfg.Clock()), Event: &managerpb.EventStreamEvent_JobPending{
			JobPending: &managerpb.JobPending{JobWithHistory: rec.GetJob()}}}); err != nil {
			return err
		}
	}
	return nil
}

// tail delivers log events after the cursor as they are appended, and
// job_pending as waiting jobs enter the window.
func (sub *subscriber) tail(ctx context.Context) error {
	for {
		page, err := sub.store.ReadEventPageAdmit(sub.cursor+1, sub.cfg.ReadBatch, func(size int64) bool {
			return sub.budget.admit(sub, max(size, 1), sub.cfg.MaxQueueBytes)
		})
		sub.budget.dropCredit(sub)
		if errors.Is(err, persistence.ErrEventsTrimmed) {
			return status.Errorf(codes.ResourceExhausted,
				"event stream subscriber fell behind the retained log (delivered up to %d): reconnect; resuming will reset and resend a snapshot", sub.cursor)
		}
		if err != nil {
			return toStatus(err)
		}
		for i, se := range page.Events {
			if err := sub.deliver(ctx, se, max(page.Sizes[i], 1)); err != nil {
				return err
			}
		}
		if len(page.Events) == 0 && page.Refused > 0 {
			// The next event does not fit: wait for the sender to make
			// room under the subscriber's own bound, then take its bytes
			// from the budget for the next read.
			if err := sub.makeRoom(ctx, max(page.Refused, 1)); err != nil {
				return err
			}
			continue
		}
		if len(page.Events) > 0 {
			// The head now: delivering may have waited on the client
			// while the log grew, which is what the limit is about.
			// The FSM's cached head can still be below the cursor for
			// a moment (it is published after the events are
			// readable): page.Head, from the view the events were read
			// in, is a floor, and lag saturates all the same.
			_, cached := sub.store.EventBounds()
			if n := lag(max(cached, page.Head), sub.cursor); n > sub.cfg.MaxLag {
				return status.Errorf(codes.ResourceExhausted,
					"event stream subscriber too slow: %d events behind the head (limit %d); reconnect with resume_from_index set to the last log_index you processed",
					n, sub.cfg.MaxLag)
			}
			continue
		}
		if sub.catchingUp {
			if err := sub.catchUp(ctx); err != nil {
				return err
			}
		}
		if err := sub.windowTick(ctx); err != nil {
			return err
		}
		if err := sub.wait(ctx); err != nil {
			return err
		}
	}
}

// lag is how many events the log's head is beyond a subscriber's cursor:
// head − cursor, or 0 when the cursor is at or past the head (a head read
// from a cache that lags the log), never a wrapped-around difference.
func lag(head, cursor persistence.Index) uint64 {
	if head <= cursor {
		return 0
	}
	return uint64(head - cursor)
}

// wait blocks until the log grows past the cursor, the next waiting job
// enters the window, or ctx ends.
func (sub *subscriber) wait(ctx context.Context) error {
	wctx := ctx
	if next, ok := sub.nextEntry(); ok {
		var cancel context.CancelFunc
		wctx, cancel = context.WithDeadline(ctx, next.Add(-sub.window))
		defer cancel()
	}
	_, err := sub.store.WaitForEvents(wctx, sub.cursor)
	if err != nil && ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded) {
		return nil // a job is entering the window
	}
	if errors.Is(err, persistence.ErrClosed) {
		return status.Error(codes.Unavailable, "the manager is shutting down; reconnect with resume_from_index")
	}
	return err
}

// deliver sends one log event (whose size bytes were taken with its page)
// with the time of its append, then the
// classification change it causes (with the same time). se is the
// subscriber's own decoded copy: setting its fields is safe.
func (sub *subscriber) deliver(ctx context.Context, se *internalpb.StoredEvent, size int64) error {
	ev := se.GetEvent()
	ev.EventTime = se.GetAt()
	if err := sub.pushTaken(ctx, ev, size); err != nil {
		return err
	}
	sub.cursor = persistence.Index(ev.GetLogIndex())
	switch x := ev.GetEvent().(type) {
	case *managerpb.EventStreamEvent_JobDeleted:
		sub.forget(x.JobDeleted.GetJobId().GetJobId())
	case *managerpb.EventStreamEvent_JobUpdated:
		jwh := x.JobUpdated.GetJobWithHistory()
		j := jwh.GetJob()
		id := j.GetJobId().GetJobId()
		if j.GetState() != managerpb.Job_PRE {
			sub.forget(id)
			return nil
		}
		was, known := sub.pending[id]
		within := sub.classify(id, j.GetStartDateTime().AsTime(), sub.srv.cfg.Clock())
		if known && was == within {
			return nil
		}
		d := &managerpb.EventStreamEvent{LogIndex: ev.GetLogIndex(), EventTime: ev.GetEventTime()}
		if within {
			d.Event = &managerpb.EventStreamEvent_JobPending{JobPending: &managerpb.JobPending{JobWithHistory: jwh}}
		} else {
			d.Event = &managerpb.EventStreamEvent_JobOutOfWindow{JobOutOfWindow: &managerpb.JobOutOfWindow{JobWithHistory: jwh}}
		}
		return sub.push(ctx, d)
	}
	return nil
}
