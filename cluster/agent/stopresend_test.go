package agent

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/norsk-oss/norsk-manager/proto/commonpb"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
)

// TestNodeGrain_ResendsStopsStillStopping: a stop_job whose answer never
// came (the worker dropped it) is sent again from the records every stop
// resend interval (3 s) while the instance is STOPPING, with the same
// instance id, until the worker answers and the instance ends. The
// resend reads the records from the store's World view (issue 22), so
// this holds it to what the decoded records said before.
func TestNodeGrain_ResendsStopsStillStopping(t *testing.T) {
	ctx := context.Background()
	_, c := startAgent(t, t.TempDir())
	id, w := registerWorker(t, c, "resend")
	_, err := c.CreateJob(ctx, placedJob("manual", -1))
	require.NoError(t, err)
	_, err = c.StartJob(ctx, &managerpb.StartJobRequest{JobId: &commonpb.JobId{JobId: "manual"}, Role: "primary", NodeId: &commonpb.NodeId{NodeId: id}})
	require.NoError(t, err)
	eventually(t, "running", func() bool { return w.isRunning("manual", "primary") && len(instanceOf(t, c, "manual")) == 1 })

	w.dropStops.Store(1)
	_, err = c.StopJob(ctx, &managerpb.StopJobRequest{JobId: &commonpb.JobId{JobId: "manual"}, Role: "primary", NodeId: &commonpb.NodeId{NodeId: id}})
	require.NoError(t, err)
	eventually(t, "the stop re-sent, answered and recorded", func() bool {
		return !w.isRunning("manual", "primary") && len(instanceOf(t, c, "manual")) == 0
	})
	w.mu.Lock()
	defer w.mu.Unlock()
	var ids []string
	for _, m := range w.received {
		if s := m.GetStopJob(); s != nil && s.GetJobId().GetJobId() == "manual" {
			ids = append(ids, s.GetInstanceId())
		}
	}
	require.GreaterOrEqual(t, len(ids), 2, "the dropped stop was sent again")
	for _, x := range ids {
		require.Equal(t, ids[0], x, "every stop names the same instance")
	}
}
