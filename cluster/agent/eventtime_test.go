package agent

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/norsk-oss/norsk-manager/proto/commonpb"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
)

// TestEventStream_EventTime: a log event carries the time of its append,
// live and unchanged on a replay later; snapshot events and
// initial_data_complete carry the time the snapshot was read.
func TestEventStream_EventTime(t *testing.T) {
	ctx := context.Background()
	_, c := startAgent(t, t.TempDir())
	within := func(what string, ev *managerpb.EventStreamEvent, from, to time.Time) {
		t.Helper()
		require.NotNil(t, ev.GetEventTime(), "%s has no event_time", what)
		at := ev.GetEventTime().AsTime()
		require.False(t, at.Before(from) || at.After(to), "%s: event_time %s not within [%s, %s]", what, at, from, to)
	}

	before := time.Now()
	_, err := c.CreateJob(ctx, &managerpb.Job{JobId: &commonpb.JobId{JobId: "timed"}})
	require.NoError(t, err)
	created := time.Now()

	subscribed := time.Now()
	ch, _ := collect(t, c, &managerpb.EventStreamRequest{PendingWindowS: 3600})
	active := nextOf(t, ch)
	require.Equal(t, "job_active", eventKind(active))
	done := nextOf(t, ch)
	require.Equal(t, "initial_data_complete", eventKind(done))
	received := time.Now()
	within("snapshot job_active", active, subscribed, received)
	require.True(t, proto.Equal(active.GetEventTime(), done.GetEventTime()), "one snapshot, one time")

	_, err = c.DeleteJob(ctx, &commonpb.JobId{JobId: "timed"})
	require.NoError(t, err)
	deleted := time.Now()
	live := nextOf(t, ch)
	require.Equal(t, "job_deleted", eventKind(live))
	within("live job_deleted", live, received, deleted)

	// A classification derived from a log event has that event's time.
	_, err = c.CreateJob(ctx, &managerpb.Job{JobId: &commonpb.JobId{JobId: "soon"}, StartDateTime: timestamppb.New(time.Now().Add(30 * time.Minute))})
	require.NoError(t, err)
	upd, pending := nextOf(t, ch), nextOf(t, ch)
	require.Equal(t, []string{"job_updated", "job_pending"}, []string{eventKind(upd), eventKind(pending)})
	within("live job_updated", upd, deleted, time.Now())
	require.True(t, proto.Equal(upd.GetEventTime(), pending.GetEventTime()), "derived job_pending has its log event's time")

	// A replay from the start, later: the same times as when they happened.
	replay, _ := collect(t, c, &managerpb.EventStreamRequest{ResumeFromIndex: proto.Uint64(0)})
	first := nextOf(t, replay)
	require.Equal(t, "job_updated", eventKind(first))
	within("replayed job_updated", first, before, created)
	again := nextOf(t, replay)
	require.Equal(t, live.GetLogIndex(), again.GetLogIndex())
	require.True(t, proto.Equal(live.GetEventTime(), again.GetEventTime()),
		"replayed event_time %s, live %s", again.GetEventTime().AsTime(), live.GetEventTime().AsTime())
}
