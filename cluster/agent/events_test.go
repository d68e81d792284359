package agent

import (
	"context"
	"fmt"
	"io"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/norsk-oss/norsk-manager/proto/commonpb"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
)

// eventKind names the oneof member of an event.
func eventKind(ev *managerpb.EventStreamEvent) string {
	switch ev.GetEvent().(type) {
	case *managerpb.EventStreamEvent_NodeRunning:
		return "node_running"
	case *managerpb.EventStreamEvent_JobActive:
		return "job_active"
	case *managerpb.EventStreamEvent_InitialDataComplete:
		return "initial_data_complete"
	case *managerpb.EventStreamEvent_JobUpdated:
		return "job_updated"
	case *managerpb.EventStreamEvent_JobDeleted:
		return "job_deleted"
	case *managerpb.EventStreamEvent_JobPending:
		return "job_pending"
	case *managerpb.EventStreamEvent_JobOutOfWindow:
		return "job_out_of_window"
	case *managerpb.EventStreamEvent_NodeStarting:
		return "node_starting"
	case *managerpb.EventStreamEvent_NodeStarted:
		return "node_started"
	case *managerpb.EventStreamEvent_NodeStopping:
		return "node_stopping"
	case *managerpb.EventStreamEvent_NodeStopped:
		return "node_stopped"
	case *managerpb.EventStreamEvent_PhysicalNodeConnected:
		return "physical_node_connected"
	case *managerpb.EventStreamEvent_JobInfo:
		return "job_info"
	case *managerpb.EventStreamEvent_StreamReset:
		return "stream_reset"
	case *managerpb.EventStreamEvent_BundleUpdated:
		return "bundle_updated"
	case *managerpb.EventStreamEvent_BundleDeleted:
		return "bundle_deleted"
	}
	return "?"
}

// collect reads events from a stream into a channel.
func collect(t *testing.T, c managerpb.ManagerClient, req *managerpb.EventStreamRequest) (<-chan *managerpb.EventStreamEvent, context.CancelFunc) {
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	s, err := c.EventStream(ctx, req)
	require.NoError(t, err)
	ch := make(chan *managerpb.EventStreamEvent, 1000)
	go func() {
		defer close(ch)
		for {
			ev, err := s.Recv()
			if err != nil {
				return
			}
			ch <- ev
		}
	}()
	return ch, cancel
}

// next returns the next event that is not a classification-derived one,
// or fails after a deadline.
func nextOf(t *testing.T, ch <-chan *managerpb.EventStreamEvent) *managerpb.EventStreamEvent {
	t.Helper()
	select {
	case ev, ok := <-ch:
		require.True(t, ok, "stream ended")
		return ev
	case <-time.After(10 * time.Second):
		t.Fatal("no event within 10s")
	}
	return nil
}

func TestEventStream_SnapshotThenLive(t *testing.T) {
	ctx := context.Background()
	_, c := startAgent(t, t.TempDir())
	node, _ := registerWorker(t, c, "w1")
	_, err := c.CreateJob(ctx, &managerpb.Job{JobId: &commonpb.JobId{JobId: "active"}})
	require.NoError(t, err)
	soon := timestamppb.New(time.Now().Add(30 * time.Minute))
	later := timestamppb.New(time.Now().Add(48 * time.Hour))
	_, err = c.CreateJob(ctx, &managerpb.Job{JobId: &commonpb.JobId{JobId: "soon"}, StartDateTime: soon})
	require.NoError(t, err)
	_, err = c.CreateJob(ctx, &managerpb.Job{JobId: &commonpb.JobId{JobId: "later"}, StartDateTime: later})
	require.NoError(t, err)

	ch, _ := collect(t, c, &managerpb.EventStreamRequest{PendingWindowS: 3600})
	var kinds []string
	var snapIndex uint64
	for {
		ev := nextOf(t, ch)
		kinds = append(kinds, eventKind(ev))
		if snapIndex == 0 {
			snapIndex = ev.GetLogIndex()
		}
		require.Equal(t, snapIndex, ev.GetLogIndex(), "snapshot events carry the snapshot's index")
		if eventKind(ev) == "initial_data_complete" {
			break
		}
	}
	require.Equal(t, []string{"node_running", "job_active", "job_pending", "initial_data_complete"}, kinds)

	// Live: a new PRE job within the window → job_updated then job_pending;
	// beyond it → job_updated then job_out_of_window.
	_, err = c.CreateJob(ctx, &managerpb.Job{JobId: &commonpb.JobId{JobId: "soon2"}, StartDateTime: soon})
	require.NoError(t, err)
	ev := nextOf(t, ch)
	require.Equal(t, "job_updated", eventKind(ev))
	require.Equal(t, snapIndex+1, ev.GetLogIndex())
	d := nextOf(t, ch)
	require.Equal(t, "job_pending", eventKind(d))
	require.Equal(t, ev.GetLogIndex(), d.GetLogIndex())
	_, err = c.CreateJob(ctx, &managerpb.Job{JobId: &commonpb.JobId{JobId: "later2"}, StartDateTime: later})
	require.NoError(t, err)
	require.Equal(t, "job_updated", eventKind(nextOf(t, ch)))
	require.Equal(t, "job_out_of_window", eventKind(nextOf(t, ch)))
	_ = node
}

func TestEventStream_ResumeExactlyOnce(t *testing.T) {
	ctx := context.Background()
	_, c := startAgent(t, t.TempDir())
	for i := range 5 {
		_, err := c.CreateJob(ctx, &managerpb.Job{JobId: &commonpb.JobId{JobId: string(rune('a' + i))}})
		require.NoError(t, err)
	}
	ch, cancel := collect(t, c, &managerpb.EventStreamRequest{})
	for eventKind(nextOf(t, ch)) != "initial_data_complete" {
	}
	_, err := c.CreateJob(ctx, &managerpb.Job{JobId: &commonpb.JobId{JobId: "x1"}})
	require.NoError(t, err)
	last := nextOf(t, ch)
	require.Equal(t, "job_updated", eventKind(last))
	cancel()
	// Changes while disconnected.
	for _, id := range []string{"x2", "x3"} {
		_, err = c.CreateJob(ctx, &managerpb.Job{JobId: &commonpb.JobId{JobId: id}})
		require.NoError(t, err)
	}
	_, err = c.DeleteJob(ctx, &commonpb.JobId{JobId: "a"})
	require.NoError(t, err)
	resume := last.GetLogIndex()
	ch2, _ := collect(t, c, &managerpb.EventStreamRequest{ResumeFromIndex: proto.Uint64(resume)})
	want := []string{"x2", "x3", "a"}
	for i, id := range want {
		ev := nextOf(t, ch2)
		require.Equal(t, resume+uint64(i)+1, ev.GetLogIndex(), "no gap, no duplicate")
		switch x := ev.GetEvent().(type) {
		case *managerpb.EventStreamEvent_JobUpdated:
			require.Equal(t, id, x.JobUpdated.GetJobWithHistory().GetJob().GetJobId().GetJobId())
		case *managerpb.EventStreamEvent_JobDeleted:
			require.Equal(t, id, x.JobDeleted.GetJobId().GetJobId())
		default:
			t.Fatalf("unexpected %s", eventKind(ev))
		}
	}
	select {
	case ev := <-ch2:
		t.Fatalf("unexpected extra event %s", eventKind(ev))
	case <-time.After(200 * time.Millisecond):
	}
}

func TestEventStream_ResetWhenIndexNotRetained(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	cfg := DevConfig(dir)
	cfg.Store.SyncWrites, cfg.Store.GCInterval, cfg.Store.EventRetention = false, 0, 3
	a, err := New(cfg)
	require.NoError(t, err)
	require.NoError(t, a.Start())
	t.Cleanup(a.Shutdown)
	c := dial(t, a.APIAddr())
	for i := range 6 {
		_, err := c.CreateJob(ctx, &managerpb.Job{JobId: &commonpb.JobId{JobId: string(rune('a' + i))}})
		require.NoError(t, err)
	}
	for _, n := range []uint64{1, 99} {
		ch, _ := collect(t, c, &managerpb.EventStreamRequest{ResumeFromIndex: proto.Uint64(n)})
		ev := nextOf(t, ch)
		require.Equal(t, "stream_reset", eventKind(ev))
		require.Equal(t, n, ev.GetStreamReset().GetRequestedIndex())
		require.Equal(t, uint64(4), ev.GetStreamReset().GetFirstRetainedIndex())
		require.Equal(t, uint64(6), ev.GetStreamReset().GetHeadIndex())
		var kinds []string
		for k := ""; k != "initial_data_complete"; {
			k = eventKind(nextOf(t, ch))
			kinds = append(kinds, k)
		}
		require.Len(t, kinds, 7, "a full snapshot follows the reset: 6 active jobs + initial_data_complete")
	}
}

func TestEventStream_SlowSubscriberIsCutOff(t *testing.T) {
	ctx := context.Background()
	cfg := DevConfig(t.TempDir())
	cfg.Store.SyncWrites, cfg.Store.GCInterval = false, 0
	cfg.Events.MaxLag = 20
	cfg.Events.Buffer = 4
	cfg.Events.SendTimeout = 500 * time.Millisecond
	a, err := New(cfg)
	require.NoError(t, err)
	require.NoError(t, a.Start())
	t.Cleanup(a.Shutdown)
	c := dial(t, a.APIAddr())
	// The deadline turns a subscriber that is never cut off into a
	// failure (DeadlineExceeded below) instead of a Recv that hangs.
	sctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	s, err := c.EventStream(sctx, &managerpb.EventStreamRequest{})
	require.NoError(t, err)
	_, err = s.Recv() // initial_data_complete; then stop reading
	require.NoError(t, err)
	big := make([]byte, 64<<10)
	for i := range 60 {
		_, err := c.CreateJob(ctx, &managerpb.Job{JobId: &commonpb.JobId{JobId: fmt.Sprintf("j%02d", i)}, ManagerConfiguration: string(big)})
		require.NoError(t, err)
	}
	// The subscriber is ended with a clear status; it gets what was queued
	// before the end.
	deadline := time.Now().Add(20 * time.Second)
	for {
		_, err := s.Recv()
		if err != nil {
			require.NotEqual(t, io.EOF, err)
			requireCode(t, err, codes.ResourceExhausted, "too slow")
			return
		}
		require.True(t, time.Now().Before(deadline), "slow subscriber was never cut off")
	}
}

func TestEventStream_SubscriberLimit(t *testing.T) {
	cfg := DevConfig(t.TempDir())
	cfg.Store.SyncWrites, cfg.Store.GCInterval = false, 0
	cfg.Events.MaxSubscribers = 2
	a, err := New(cfg)
	require.NoError(t, err)
	require.NoError(t, a.Start())
	t.Cleanup(a.Shutdown)
	c := dial(t, a.APIAddr())
	for range 2 {
		ch, _ := collect(t, c, &managerpb.EventStreamRequest{})
		require.NotNil(t, nextOf(t, ch).GetInitialDataComplete())
	}
	s, err := c.EventStream(context.Background(), &managerpb.EventStreamRequest{})
	require.NoError(t, err)
	_, err = s.Recv()
	requireCode(t, err, codes.ResourceExhausted, "limit")
}

// TestEventStream_ResumedStreamDerivesLikeALiveOne: the classification
// events a resumed stream sends for replayed jobs are those a live
// subscriber got.
func TestEventStream_ResumedStreamDerivesLikeALiveOne(t *testing.T) {
	ctx := context.Background()
	_, c := startAgent(t, t.TempDir())
	_, err := c.CreateJob(ctx, &managerpb.Job{JobId: &commonpb.JobId{JobId: "first"}})
	require.NoError(t, err)
	live, _ := collect(t, c, &managerpb.EventStreamRequest{PendingWindowS: 10, ResumeFromIndex: proto.Uint64(1)})
	_, err = c.CreateJob(ctx, &managerpb.Job{JobId: &commonpb.JobId{JobId: "entering"}, StartDateTime: timestamppb.New(time.Now().Add(8 * time.Second))})
	require.NoError(t, err)
	_, err = c.CreateJob(ctx, &managerpb.Job{JobId: &commonpb.JobId{JobId: "far"}, StartDateTime: timestamppb.New(time.Now().Add(2 * time.Hour))})
	require.NoError(t, err)
	describe := func(ch <-chan *managerpb.EventStreamEvent) []string {
		var out []string
		for range 4 {
			ev := nextOf(t, ch)
			var id string
			switch {
			case ev.GetJobUpdated() != nil:
				id = ev.GetJobUpdated().GetJobWithHistory().GetJob().GetJobId().GetJobId()
			case ev.GetJobPending() != nil:
				id = ev.GetJobPending().GetJobWithHistory().GetJob().GetJobId().GetJobId()
			case ev.GetJobOutOfWindow() != nil:
				id = ev.GetJobOutOfWindow().GetJobWithHistory().GetJob().GetJobId().GetJobId()
			}
			out = append(out, fmt.Sprintf("%d %s %s", ev.GetLogIndex(), eventKind(ev), id))
		}
		return out
	}
	want := []string{"2 job_updated entering", "2 job_pending entering", "3 job_updated far", "3 job_out_of_window far"}
	require.Equal(t, want, describe(live))
	resumed, _ := collect(t, c, &managerpb.EventStreamRequest{PendingWindowS: 10, ResumeFromIndex: proto.Uint64(1)})
	require.Equal(t, want, describe(resumed))
}
