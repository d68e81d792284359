package client_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/norsk-oss/norsk-manager/client"
	"github.com/norsk-oss/norsk-manager/client/clienttest"
	"github.com/norsk-oss/norsk-manager/proto/commonpb"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
)

// waitTimeout bounds every wait for an event in these tests.
const waitTimeout = 10 * time.Second

// follower runs an EventSubscription in the background and collects what
// it delivers.
type follower struct {
	sub    *client.EventSubscription
	evCh   chan *managerpb.EventStreamEvent
	cancel context.CancelFunc
	doneCh chan error
}

// follow subscribes with s (OnEvent is set here) and runs it until the test
// ends or stop is called.
func follow(t *testing.T, m *client.NorskManager, s client.EventStreamSettings) *follower {
	t.Helper()
	f := &follower{evCh: make(chan *managerpb.EventStreamEvent, 1000), doneCh: make(chan error, 1)}
	s.OnEvent = func(ev *managerpb.EventStreamEvent) error {
		f.evCh <- ev
		return nil
	}
	s.InitialBackoff, s.MaxBackoff = time.Millisecond, 20*time.Millisecond
	sub, err := m.Subscribe(s)
	if err != nil {
		t.Fatalf("Subscribe: %v", err)
	}
	f.sub = sub
	ctx, cancel := context.WithCancel(context.Background())
	f.cancel = cancel
	go func() { f.doneCh <- sub.Run(ctx) }()
	t.Cleanup(func() { f.stop(t) })
	return f
}

// stop cancels Run and checks that it returned context.Canceled.
func (f *follower) stop(t *testing.T) {
	t.Helper()
	if f.cancel == nil {
		return
	}
	f.cancel()
	f.cancel = nil
	if err := <-f.doneCh; !errors.Is(err, context.Canceled) {
		t.Errorf("Run returned %v, want context.Canceled", err)
	}
}

// next returns the next n delivered events.
func (f *follower) next(t *testing.T, n int) []*managerpb.EventStreamEvent {
	t.Helper()
	var out []*managerpb.EventStreamEvent
	timeout := time.NewTimer(waitTimeout)
	defer timeout.Stop()
	for len(out) < n {
		select {
		case ev := <-f.evCh:
			out = append(out, ev)
		case err := <-f.doneCh:
			t.Fatalf("Run returned %v after %d of %d events", err, len(out), n)
		case <-timeout.C:
			t.Fatalf("timed out after %d of %d events: %v", len(out), n, out)
		}
	}
	return out
}

// nothingMore checks that nothing else was delivered once a marker event
// published after everything else arrives.
func (f *follower) nothingMore(t *testing.T, fake *clienttest.Manager) {
	t.Helper()
	idx := fake.Publish(jobDeleted("marker"))
	got := f.next(t, 1)[0]
	if got.GetJobDeleted().GetJobId().GetJobId() != "marker" || got.GetLogIndex() != idx {
		t.Fatalf("after the expected events got %v, want the marker at %d", got, idx)
	}
}

func jobDeleted(id string) *managerpb.EventStreamEvent {
	return &managerpb.EventStreamEvent{Event: &managerpb.EventStreamEvent_JobDeleted{
		JobDeleted: &managerpb.JobDeleted{JobId: &commonpb.JobId{JobId: id}},
	}}
}

// publishN publishes n job_deleted events named prefix-i and returns their
// indexes.
func publishN(fake *clienttest.Manager, prefix string, n int) []uint64 {
	var idx []uint64
	for i := range n {
		idx = append(idx, fake.Publish(jobDeleted(fmt.Sprintf("%s-%d", prefix, i))))
	}
	return idx
}

// wantIndexes checks that evs carry exactly the indexes want, in order.
func wantIndexes(t *testing.T, evs []*managerpb.EventStreamEvent, want []uint64) {
	t.Helper()
	if len(evs) != len(want) {
		t.Fatalf("got %d events, want %d", len(evs), len(want))
	}
	for i, ev := range evs {
		if ev.GetLogIndex() != want[i] {
			t.Fatalf("event %d has index %d, want %d (%v)", i, ev.GetLogIndex(), want[i], ev)
		}
	}
}

// snapshotFixture gives the fake one node and one active job.
func snapshotFixture(t *testing.T, m *client.NorskManager) {
	t.Helper()
	ctx := context.Background()
	if err := m.CreateMockNode(ctx, "n1", nil); err != nil {
		t.Fatal(err)
	}
	if _, err := m.CreateJob(ctx, testJob("j1")); err != nil {
		t.Fatal(err)
	}
}

// wantSnapshot checks a delivered snapshot: node_running, job_active,
// initial_data_complete, all at index head.
func wantSnapshot(t *testing.T, evs []*managerpb.EventStreamEvent, head uint64) {
	t.Helper()
	if evs[0].GetNodeRunning() == nil || evs[1].GetJobActive() == nil || evs[2].GetInitialDataComplete() == nil {
		t.Fatalf("snapshot = %v, want node_running, job_active, initial_data_complete", evs)
	}
	for _, ev := range evs {
		if ev.GetLogIndex() != head {
			t.Fatalf("snapshot event %v has index %d, want %d", ev, ev.GetLogIndex(), head)
		}
	}
}

// wantResumes checks the resume_from_index of every request after the first.
func wantResumes(t *testing.T, fake *clienttest.Manager, want ...uint64) {
	t.Helper()
	reqs := fake.StreamRequests()
	if len(reqs) != len(want)+1 {
		t.Fatalf("%d stream requests (%v), want %d", len(reqs), reqs, len(want)+1)
	}
	if reqs[0].ResumeFromIndex != nil {
		t.Errorf("first request resumes from %d, want a snapshot", reqs[0].GetResumeFromIndex())
	}
	for i, w := range want {
		if r := reqs[i+1]; r.ResumeFromIndex == nil || r.GetResumeFromIndex() != w {
			t.Errorf("request %d = %v, want resume_from_index %d", i+1, r, w)
		}
	}
}

func TestEventSubscription_SnapshotThenLive(t *testing.T) {
	fake, _, m := serveFake(t)
	snapshotFixture(t, m)
	head := fake.HeadIndex()
	f := follow(t, m, client.EventStreamSettings{PendingWindow: 90 * time.Minute})
	wantSnapshot(t, f.next(t, 3), head)
	want := publishN(fake, "live", 3)
	wantIndexes(t, f.next(t, 3), want)
	// LastIndex counts an event once OnEvent has returned, which is after
	// the test received it: wait for it, with a deadline.
	deadline := time.Now().Add(10 * time.Second)
	for {
		last, ok := f.sub.LastIndex()
		if ok && last == want[2] {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("LastIndex = %d, %v; want %d", last, ok, want[2])
		}
		time.Sleep(time.Millisecond) // polling interval
	}
	if w := fake.StreamRequests()[0].GetPendingWindowS(); w != 5400 {
		t.Errorf("pending_window_s = %d, want 5400", w)
	}
}

// TestEventSubscription_ResumeAfterBreak breaks the stream in several ways
// and checks that every event arrives exactly once, in order, and that each
// new stream resumes from the last delivered index.
func TestEventSubscription_ResumeAfterBreak(t *testing.T) {
	cases := []struct {
		name string
		err  error
	}{
		{"unavailable", status.Error(codes.Unavailable, "leader changed")},
		{"slow subscriber", status.Error(codes.ResourceExhausted, "slow subscriber")},
		{"clean end", nil},
		{"internal", status.Error(codes.Internal, "stream reset")},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			fake, _, m := serveFake(t)
			snapshotFixture(t, m)
			f := follow(t, m, client.EventStreamSettings{})
			wantSnapshot(t, f.next(t, 3), fake.HeadIndex())
			first := publishN(fake, "a", 4)
			wantIndexes(t, f.next(t, 4), first)

			fake.BreakStreams(tc.err)
			second := publishN(fake, "b", 4)
			wantIndexes(t, f.next(t, 4), second)
			f.nothingMore(t, fake)
			wantResumes(t, fake, first[3])
		})
	}
}

// TestEventSubscription_BreakMidBatch fails the stream just before one event
// of a batch already queued: the new stream must start right after the last
// event that was delivered.
func TestEventSubscription_BreakMidBatch(t *testing.T) {
	fake, _, m := serveFake(t)
	f := follow(t, m, client.EventStreamSettings{ResumeFromIndex: proto.Uint64(0)})
	var once sync.Once
	var failAt uint64 = 6
	fake.SetSendHook(func(ev *managerpb.EventStreamEvent) error {
		var err error
		if ev.GetLogIndex() == failAt {
			once.Do(func() { err = status.Error(codes.Unavailable, "manager going away") })
		}
		return err
	})
	all := publishN(fake, "x", 10)
	wantIndexes(t, f.next(t, 10), all)
	f.nothingMore(t, fake)
	reqs := fake.StreamRequests()
	if len(reqs) != 2 || reqs[0].GetResumeFromIndex() != 0 || reqs[1].GetResumeFromIndex() != failAt-1 {
		t.Fatalf("requests = %v, want resume from 0 then from %d", reqs, failAt-1)
	}
}

// TestEventSubscription_BreakMidSnapshot fails the first stream after one
// snapshot event: nothing of the broken snapshot may be delivered, and the
// next stream asks for a new snapshot.
func TestEventSubscription_BreakMidSnapshot(t *testing.T) {
	fake, _, m := serveFake(t)
	snapshotFixture(t, m)
	var mu sync.Mutex
	sent := 0
	fake.SetSendHook(func(*managerpb.EventStreamEvent) error {
		mu.Lock()
		defer mu.Unlock()
		sent++
		if sent == 2 {
			return status.Error(codes.Unavailable, "broken mid-snapshot")
		}
		return nil
	})
	f := follow(t, m, client.EventStreamSettings{})
	wantSnapshot(t, f.next(t, 3), fake.HeadIndex())
	f.nothingMore(t, fake)
	reqs := fake.StreamRequests()
	if len(reqs) != 2 || reqs[0].ResumeFromIndex != nil || reqs[1].ResumeFromIndex != nil {
		t.Fatalf("requests = %v, want two snapshot requests", reqs)
	}
}

// TestEventSubscription_ManagerRestart stops the manager and starts it again
// on the same address with the same log.
func TestEventSubscription_ManagerRestart(t *testing.T) {
	fake := clienttest.NewManager(nil)
	srv := clienttest.Serve(t, fake, "127.0.0.1:0")
	m := connect(t, srv.Addr)
	f := follow(t, m, client.EventStreamSettings{})
	f.next(t, 1) // initial_data_complete of an empty manager
	first := publishN(fake, "a", 3)
	wantIndexes(t, f.next(t, 3), first)

	srv.Stop()
	second := publishN(fake, "b", 3) // written while no manager serves
	clienttest.Serve(t, fake, srv.Addr)
	wantIndexes(t, f.next(t, 3), second)
	f.nothingMore(t, fake)
	reqs := fake.StreamRequests()
	if last := reqs[len(reqs)-1]; last.GetResumeFromIndex() != first[2] {
		t.Errorf("last request %v, want resume_from_index %d", last, first[2])
	}
}

// TestEventSubscription_Failover serves one log from two managers and stops
// them in turn: the stream moves to the survivor without a gap.
func TestEventSubscription_Failover(t *testing.T) {
	fake := clienttest.NewManager(nil)
	a := clienttest.Serve(t, fake, "127.0.0.1:0")
	b := clienttest.Serve(t, fake, "127.0.0.1:0")
	m := connect(t, a.Addr, b.Addr)
	f := follow(t, m, client.EventStreamSettings{})
	f.next(t, 1)
	want := publishN(fake, "a", 2)
	wantIndexes(t, f.next(t, 2), want)
	a.Stop()
	want = publishN(fake, "b", 2)
	wantIndexes(t, f.next(t, 2), want)
	clienttest.Serve(t, fake, a.Addr)
	b.Stop()
	want = publishN(fake, "c", 2)
	wantIndexes(t, f.next(t, 2), want)
	f.nothingMore(t, fake)
	if n := len(fake.StreamRequests()); n < 2 {
		t.Errorf("%d stream requests, want at least 2 (the stream must have moved)", n)
	}
}

// TestEventSubscription_StreamReset resumes from an index the manager no
// longer retains: the reset is delivered, then a fresh snapshot.
func TestEventSubscription_StreamReset(t *testing.T) {
	fake, _, m := serveFake(t)
	snapshotFixture(t, m)
	publishN(fake, "old", 3)
	fake.DropBefore(fake.HeadIndex())
	head := fake.HeadIndex()
	f := follow(t, m, client.EventStreamSettings{ResumeFromIndex: proto.Uint64(1)})
	evs := f.next(t, 4)
	if r := evs[0].GetStreamReset(); r == nil || r.GetRequestedIndex() != 1 {
		t.Fatalf("first event %v, want stream_reset for index 1", evs[0])
	}
	wantSnapshot(t, evs[1:], head)
	f.nothingMore(t, fake)
}

func TestEventSubscription_OnEventError(t *testing.T) {
	_, _, m := serveFake(t)
	boom := errors.New("boom")
	err := m.EventStream(context.Background(), client.EventStreamSettings{
		OnEvent: func(*managerpb.EventStreamEvent) error { return boom },
	})
	if !errors.Is(err, boom) {
		t.Fatalf("EventStream = %v, want boom", err)
	}
}

// TestEventSubscription_OnEventErrorLive checks that a failing callback on a
// live event stops Run with that error and leaves LastIndex at the event
// before it.
func TestEventSubscription_OnEventErrorLive(t *testing.T) {
	fake, _, m := serveFake(t)
	boom := errors.New("boom")
	idx := publishN(fake, "x", 2)
	sub, err := m.Subscribe(client.EventStreamSettings{
		ResumeFromIndex: proto.Uint64(0),
		OnEvent: func(ev *managerpb.EventStreamEvent) error {
			if ev.GetLogIndex() == idx[1] {
				return boom
			}
			return nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := sub.Run(context.Background()); !errors.Is(err, boom) {
		t.Fatalf("Run = %v, want boom", err)
	}
	if last, ok := sub.LastIndex(); !ok || last != idx[0] {
		t.Errorf("LastIndex = %d, %v; want %d", last, ok, idx[0])
	}
}

func TestEventSubscription_FatalCode(t *testing.T) {
	fake, _, m := serveFake(t)
	fake.Fail("EventStream", status.Error(codes.InvalidArgument, "pending_window_s too large"))
	err := m.EventStream(context.Background(), client.EventStreamSettings{
		OnEvent: func(*managerpb.EventStreamEvent) error { return nil },
	})
	wantCode(t, "EventStream", err, codes.InvalidArgument)
}

func TestEventSubscription_InvalidSettings(t *testing.T) {
	_, _, m := serveFake(t)
	ok := func(*managerpb.EventStreamEvent) error { return nil }
	cases := []struct {
		name string
		s    client.EventStreamSettings
	}{
		{"no callback", client.EventStreamSettings{}},
		{"negative window", client.EventStreamSettings{OnEvent: ok, PendingWindow: -time.Second}},
		{"window too big", client.EventStreamSettings{OnEvent: ok, PendingWindow: 1 << 62}},
		{"negative backoff", client.EventStreamSettings{OnEvent: ok, MaxBackoff: -1}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := m.Subscribe(tc.s); err == nil {
				t.Fatal("Subscribe succeeded, want an error")
			}
		})
	}
}

// legacyManager numbers no event (log_index 0), like a manager that
// predates resume, and breaks its first stream after the snapshot.
type legacyManager struct {
	managerpb.UnimplementedManagerServer
	mu      sync.Mutex
	streams int
}

func (l *legacyManager) EventStream(req *managerpb.EventStreamRequest, stream managerpb.Manager_EventStreamServer) error {
	l.mu.Lock()
	l.streams++
	n := l.streams
	l.mu.Unlock()
	evs := []*managerpb.EventStreamEvent{
		{Event: &managerpb.EventStreamEvent_JobActive{JobActive: &managerpb.JobActive{}}},
		{Event: &managerpb.EventStreamEvent_InitialDataComplete{InitialDataComplete: &managerpb.InitialDataComplete{}}},
	}
	if n == 1 {
		evs = append(evs, jobDeleted("live"))
	}
	for _, ev := range evs {
		if err := stream.Send(ev); err != nil {
			return err
		}
	}
	if n == 1 {
		return status.Error(codes.Unavailable, "restarting")
	}
	<-stream.Context().Done()
	return nil
}

// TestEventSubscription_LegacyManager: without log indexes the stream
// cannot resume, so the client delivers its own stream_reset before the
// fresh snapshot instead of silently repeating the snapshot.
func TestEventSubscription_LegacyManager(t *testing.T) {
	srv := clienttest.Serve(t, &legacyManager{}, "127.0.0.1:0")
	m := connect(t, srv.Addr)
	f := follow(t, m, client.EventStreamSettings{})
	evs := f.next(t, 6)
	kinds := make([]string, len(evs))
	for i, ev := range evs {
		kinds[i] = fmt.Sprintf("%T", ev.GetEvent())
	}
	want := []string{
		"*managerpb.EventStreamEvent_JobActive", "*managerpb.EventStreamEvent_InitialDataComplete",
		"*managerpb.EventStreamEvent_JobDeleted", "*managerpb.EventStreamEvent_StreamReset",
		"*managerpb.EventStreamEvent_JobActive", "*managerpb.EventStreamEvent_InitialDataComplete",
	}
	for i := range want {
		if kinds[i] != want[i] {
			t.Fatalf("events = %v, want %v", kinds, want)
		}
	}
	if _, ok := f.sub.LastIndex(); ok {
		t.Error("LastIndex reports an index for a manager that sends none")
	}
}

// TestEventSubscription_RunAgainAfterOnEventError: a snapshot cut short by
// a failing callback is announced by a client-made stream_reset before the
// fresh snapshot of the next Run; a failed live event is delivered again.
func TestEventSubscription_RunAgainAfterOnEventError(t *testing.T) {
	fake, _, m := serveFake(t)
	snapshotFixture(t, m)
	boom := errors.New("boom")
	var got []*managerpb.EventStreamEvent
	failOn := func(ev *managerpb.EventStreamEvent) bool { return ev.GetJobActive() != nil }
	sub, err := m.Subscribe(client.EventStreamSettings{
		InitialBackoff: time.Millisecond,
		OnEvent: func(ev *managerpb.EventStreamEvent) error {
			if failOn(ev) {
				return boom
			}
			got = append(got, ev)
			return nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := sub.Run(context.Background()); !errors.Is(err, boom) {
		t.Fatalf("first Run = %v, want boom", err)
	}
	if len(got) != 1 || got[0].GetNodeRunning() == nil {
		t.Fatalf("first Run delivered %v, want node_running only", got)
	}

	// Second run: reset, full snapshot, then fail on a live event
	// published once the snapshot is in.
	var live uint64
	got = nil
	failOn = func(ev *managerpb.EventStreamEvent) bool {
		if ev.GetInitialDataComplete() != nil {
			live = fake.Publish(jobDeleted("live"))
		}
		return ev.GetJobDeleted().GetJobId().GetJobId() == "live"
	}
	if err := sub.Run(context.Background()); !errors.Is(err, boom) {
		t.Fatalf("second Run = %v, want boom", err)
	}
	if len(got) != 4 || got[0].GetStreamReset() == nil || got[1].GetNodeRunning() == nil ||
		got[2].GetJobActive() == nil || got[3].GetInitialDataComplete() == nil {
		t.Fatalf("second Run delivered %v, want stream_reset then the snapshot", got)
	}

	// Third run: the failed live event comes again, exactly once.
	got = nil
	failOn = func(ev *managerpb.EventStreamEvent) bool { return ev.GetJobDeleted().GetJobId().GetJobId() == "stop" }
	fake.Publish(jobDeleted("stop"))
	if err := sub.Run(context.Background()); !errors.Is(err, boom) {
		t.Fatalf("third Run = %v, want boom", err)
	}
	if len(got) != 1 || got[0].GetLogIndex() != live {
		t.Fatalf("third Run delivered %v, want the live event at %d", got, live)
	}
}
