package agent

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/norsk-oss/norsk-manager/proto/commonpb"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
)

// TestNode_HealthTimeoutStopsNodeAndItComesBack: a worker that stops
// pinging loses its session; after LostTimeout the node is declared stopped
// (with the health reason) and its instances end; when the worker pings
// again the re-dial brings the node back.
func TestNode_HealthTimeoutStopsNodeAndItComesBack(t *testing.T) {
	ctx := context.Background()
	cfg := DevConfig(t.TempDir())
	cfg.Store.SyncWrites = false
	cfg.Node.HealthTimeout, cfg.Node.InitialHealthTimeout = time.Second, time.Second
	cfg.Node.LostTimeout, cfg.Node.RedialMax = 2*time.Second, 300*time.Millisecond
	a, err := New(cfg)
	require.NoError(t, err)
	require.NoError(t, a.Start())
	t.Cleanup(a.Shutdown)
	c := dial(t, a.APIAddr())
	node, w := registerWorker(t, c, "w")
	ch, _ := collect(t, c, &managerpb.EventStreamRequest{})
	_, err = c.CreateJob(ctx, &managerpb.Job{JobId: &commonpb.JobId{JobId: "j"}, Services: oneService()})
	require.NoError(t, err)
	_, err = c.StartJob(ctx, &managerpb.StartJobRequest{JobId: &commonpb.JobId{JobId: "j"}, Role: "primary", NodeId: &commonpb.NodeId{NodeId: node}})
	require.NoError(t, err)
	eventually(t, "running", func() bool { return w.isRunning("j", "primary") && len(instanceOf(t, c, "j")) == 1 })

	w.silent.Store(true)
	var stopping *managerpb.NodeStopping
	for stopping == nil {
		ev := nextOf(t, ch)
		stopping = ev.GetNodeStopping()
	}
	require.Equal(t, node, stopping.GetNodeId().GetNodeId())
	require.Contains(t, []managerpb.NodeStopping_Reason{
		managerpb.NodeStopping_HEALTH_PING_TIME_EXCEEDED, managerpb.NodeStopping_INITIALISATION_HEALTH_PING_TIME_EXCEEDED,
	}, stopping.GetReason())
	require.NotNil(t, nextOf(t, ch).GetNodeStopped())
	eventually(t, "instance ended with the node", func() bool { return len(instanceOf(t, c, "j")) == 0 })

	w.silent.Store(false)
	eventually(t, "node back after re-dial", func() bool { return nodeState(t, c, node) == managerpb.NodeLifecycle_NODE_LIFECYCLE_STARTED })
	// The worker still ran the job: the new session's hello adopts it.
	defer func() {
		if t.Failed() {
			r, _ := c.JobById(ctx, &commonpb.JobId{JobId: "j"})
			t.Logf("history: %v running=%v", jobHistoryKinds(r), w.isRunning("j", "primary"))
		}
	}()
	eventually(t, "instance adopted again", func() bool { return len(instanceOf(t, c, "j")) == 1 })
}

// TestEventStream_JobEntersWindowThenActivates: a PRE job outside the
// window is reported out of window, then pending when its start comes
// within the window, then active once its start passes.
func TestEventStream_JobEntersWindowThenActivates(t *testing.T) {
	ctx := context.Background()
	_, c := startAgent(t, t.TempDir())
	ch, _ := collect(t, c, &managerpb.EventStreamRequest{PendingWindowS: 1})
	for nextOf(t, ch).GetInitialDataComplete() == nil {
	}
	start := time.Now().Add(2500 * time.Millisecond)
	_, err := c.CreateJob(ctx, &managerpb.Job{JobId: &commonpb.JobId{JobId: "later"}, StartDateTime: timestamppb.New(start)})
	require.NoError(t, err)
	require.NotNil(t, nextOf(t, ch).GetJobUpdated())
	require.NotNil(t, nextOf(t, ch).GetJobOutOfWindow(), "2.5 s ahead is outside a 1 s window")
	p := nextOf(t, ch)
	require.NotNil(t, p.GetJobPending(), "got %v", p)
	require.WithinDuration(t, start.Add(-time.Second), time.Now(), 700*time.Millisecond, "pending when the start enters the window")
	u := nextOf(t, ch)
	require.Equal(t, managerpb.Job_ACTIVE, u.GetJobUpdated().GetJobWithHistory().GetJob().GetState())
	require.False(t, time.Now().Before(start), "active only once the start has passed")
}
