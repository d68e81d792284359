package clienttest

import (
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/norsk-oss/norsk-manager/proto/commonpb"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
)

// SubscriberBuffer is how many live events a fake event stream may have
// queued before the fake ends it with codes.ResourceExhausted, as the real
// manager does with a slow subscriber.
const SubscriberBuffer = 256

// eventLog is the fake's numbered event log and its subscribers; guarded by
// Manager.mu.
type eventLog struct {
	retained []*managerpb.EventStreamEvent // log indexes first .. head
	first    uint64                        // index of retained[0]; head+1 if empty
	head     uint64                        // index of the newest event, 0 if none
	subs     map[*subscriber]struct{}
	requests []*managerpb.EventStreamRequest
	sendHook func(*managerpb.EventStreamEvent) error
	now      func() time.Time // the fake's clock, for event_time
}

// subscriber is one open EventStream call.
type subscriber struct {
	eventCh chan *managerpb.EventStreamEvent // live events, buffered
	endCh   chan error                       // the stream's end, buffer 1
}

func (l *eventLog) init(now func() time.Time) {
	l.first, l.now = 1, now
	l.subs = make(map[*subscriber]struct{})
}

// appendLocked numbers ev with the next log index, stamps its event_time
// with the fake's clock unless it has one, retains it and fans it out. A
// subscriber whose buffer is full is ended with ResourceExhausted.
func (l *eventLog) appendLocked(ev *managerpb.EventStreamEvent) uint64 {
	l.head++
	ev.LogIndex = l.head
	if ev.EventTime == nil {
		ev.EventTime = timestamppb.New(l.now())
	}
	l.retained = append(l.retained, ev)
	for sub := range l.subs {
		select {
		case sub.eventCh <- ev:
		default:
			l.endLocked(sub, status.Error(codes.ResourceExhausted, "slow subscriber"))
		}
	}
	return l.head
}

// endLocked ends sub's stream with err and forgets it.
func (l *eventLog) endLocked(sub *subscriber, err error) {
	delete(l.subs, sub)
	select {
	case sub.endCh <- err:
	default:
	}
}

// Publish appends ev (a copy, numbered with the next log index, with
// event_time set to the fake's clock if ev has none) to the event log as
// the manager would after a write, delivers it to open streams, and
// returns its index.
func (m *Manager) Publish(ev *managerpb.EventStreamEvent) uint64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.mu.events.appendLocked(proto.Clone(ev).(*managerpb.EventStreamEvent))
}

// HeadIndex returns the index of the newest logged event (0 if none).
func (m *Manager) HeadIndex() uint64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.mu.events.head
}

// DropBefore forgets logged events with an index lower than index, as log
// retention does: a stream resuming from before index-1 gets a
// stream_reset and a fresh snapshot.
func (m *Manager) DropBefore(index uint64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	l := &m.mu.events
	for len(l.retained) > 0 && l.first < index {
		l.retained = l.retained[1:]
		l.first++
	}
	if len(l.retained) == 0 {
		l.first = l.head + 1
	}
}

// BreakStreams ends every open event stream with err (a gRPC status
// error), as a manager failing over or shedding subscribers would. Events
// queued for a stream but not yet sent are not sent on it.
func (m *Manager) BreakStreams(err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for sub := range m.mu.events.subs {
		m.mu.events.endLocked(sub, err)
	}
}

// SetSendHook makes every event stream call hook before sending each event
// (snapshot, replayed or live); an error from hook ends that stream with
// the error instead of sending. Nil removes the hook. hook runs on the
// stream's goroutine, without the fake's lock.
func (m *Manager) SetSendHook(hook func(*managerpb.EventStreamEvent) error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.mu.events.sendHook = hook
}

// StreamRequests returns copies of the EventStream requests received so
// far, in order.
func (m *Manager) StreamRequests() []*managerpb.EventStreamRequest {
	m.mu.Lock()
	defer m.mu.Unlock()
	return cloneAll(m.mu.events.requests)
}

// EventStream serves the numbered event log: without resume_from_index a
// snapshot (node_running for started nodes, job_active for active jobs, all
// at the head index) and initial_data_complete, then live events; with it,
// the retained events after it and then live events, or a stream_reset and
// a snapshot if the index is not retained.
func (m *Manager) EventStream(req *managerpb.EventStreamRequest, stream managerpb.Manager_EventStreamServer) error {
	m.mu.Lock()
	if err := m.injectedLocked("EventStream"); err != nil {
		m.mu.Unlock()
		return err
	}
	l := &m.mu.events
	l.requests = append(l.requests, proto.Clone(req).(*managerpb.EventStreamRequest))
	backlog := m.backlogLocked(req)
	sub := &subscriber{eventCh: make(chan *managerpb.EventStreamEvent, SubscriberBuffer), endCh: make(chan error, 1)}
	l.subs[sub] = struct{}{}
	m.mu.Unlock()
	defer func() {
		m.mu.Lock()
		delete(m.mu.events.subs, sub)
		m.mu.Unlock()
	}()
	for _, ev := range backlog {
		if err := m.send(stream, ev); err != nil {
			return err
		}
	}
	for {
		select {
		case <-stream.Context().Done():
			return stream.Context().Err()
		case err := <-sub.endCh:
			return err
		case ev := <-sub.eventCh:
			if err := m.send(stream, ev); err != nil {
				return err
			}
		}
	}
}

// send runs the send hook, then sends ev.
func (m *Manager) send(stream managerpb.Manager_EventStreamServer, ev *managerpb.EventStreamEvent) error {
	m.mu.Lock()
	hook := m.mu.events.sendHook
	m.mu.Unlock()
	if hook != nil {
		if err := hook(ev); err != nil {
			return err
		}
	}
	return stream.Send(ev)
}

// backlogLocked is what a new stream sends before live events.
func (m *Manager) backlogLocked(req *managerpb.EventStreamRequest) []*managerpb.EventStreamEvent {
	l := &m.mu.events
	if req.ResumeFromIndex == nil {
		return m.snapshotLocked()
	}
	from := req.GetResumeFromIndex()
	if from+1 < l.first || from > l.head {
		reset := &managerpb.EventStreamEvent{LogIndex: l.head, EventTime: timestamppb.New(l.now()), Event: &managerpb.EventStreamEvent_StreamReset{
			StreamReset: &managerpb.StreamReset{
				RequestedIndex: from, FirstRetainedIndex: l.first, HeadIndex: l.head,
				Reason: "resume index not retained",
			},
		}}
		if len(l.retained) == 0 {
			reset.GetStreamReset().FirstRetainedIndex = 0
		}
		return append([]*managerpb.EventStreamEvent{reset}, m.snapshotLocked()...)
	}
	return append([]*managerpb.EventStreamEvent(nil), l.retained[from+1-l.first:]...)
}

// snapshotLocked lists the current state as snapshot events at the head
// index and the fake's current time, ending with initial_data_complete.
func (m *Manager) snapshotLocked() []*managerpb.EventStreamEvent {
	head := m.mu.events.head
	ts := timestamppb.New(m.now())
	var out []*managerpb.EventStreamEvent
	for _, id := range sortedKeys(m.mu.nodes) {
		n := m.mu.nodes[id]
		if n.GetState() != managerpb.NodeLifecycle_NODE_LIFECYCLE_STARTED {
			continue
		}
		out = append(out, &managerpb.EventStreamEvent{LogIndex: head, EventTime: ts, Event: &managerpb.EventStreamEvent_NodeRunning{
			NodeRunning: &managerpb.NodeRunning{
				NodeMetadata:        proto.Clone(n.GetMetadata()).(*commonpb.NodeMetadata),
				RunningNodeMetadata: proto.Clone(n.GetRunningMetadata()).(*commonpb.RunningNodeMetadata),
				Instances:           cloneAll(n.GetInstances()),
			},
		}})
	}
	for _, id := range sortedKeys(m.mu.jobs) {
		j := m.mu.jobs[id]
		if j.job.GetState() != managerpb.Job_ACTIVE {
			continue
		}
		out = append(out, &managerpb.EventStreamEvent{LogIndex: head, EventTime: ts, Event: &managerpb.EventStreamEvent_JobActive{
			JobActive: &managerpb.JobActive{JobWithHistory: j.withHistory()},
		}})
	}
	return append(out, &managerpb.EventStreamEvent{LogIndex: head, EventTime: ts, Event: &managerpb.EventStreamEvent_InitialDataComplete{
		InitialDataComplete: &managerpb.InitialDataComplete{},
	}})
}
