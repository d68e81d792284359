package agent

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/norsk-oss/norsk-manager/proto/commonpb"
	"github.com/norsk-oss/norsk-manager/proto/internalpb"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
)

func startAgent(t *testing.T, dir string) (*Agent, managerpb.ManagerClient) {
	t.Helper()
	cfg := DevConfig(dir)
	cfg.Store.SyncWrites = false
	cfg.Store.GCInterval = 0
	return startAgentWith(t, cfg)
}

// startAgentWith starts a manager with cfg and returns it with a client.
func startAgentWith(t *testing.T, cfg Config) (*Agent, managerpb.ManagerClient) {
	t.Helper()
	a, err := New(cfg)
	require.NoError(t, err)
	require.NoError(t, a.Start())
	t.Cleanup(a.Shutdown)
	conn, err := grpc.NewClient(a.APIAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close() })
	return a, managerpb.NewManagerClient(conn)
}

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func requireCode(t *testing.T, err error, code codes.Code, contains ...string) {
	t.Helper()
	require.Error(t, err)
	require.Equal(t, code, status.Code(err), "error: %v", err)
	for _, c := range contains {
		require.Contains(t, status.Convert(err).Message(), c)
	}
}

// registerWorker registers a slot and a fake worker on it and waits until
// the node is online.
func registerWorker(t *testing.T, c managerpb.ManagerClient, name string) (string, *fakeWorker) {
	ctx := context.Background()
	reg, err := c.RegisterClusterNode(ctx, &managerpb.RegisterClusterNodeRequest{NodeName: name})
	require.NoError(t, err)
	w := newFakeWorker(t)
	resp, err := c.ClusterMemberRegister(ctx, &managerpb.ClusterMemberRegisterRequest{Token: reg.GetToken(), Address: "127.0.0.1", Port: w.port})
	require.NoError(t, err)
	require.Equal(t, reg.GetNodeId().GetNodeId(), resp.GetNodeId().GetNodeId())
	w.setCredential(resp.GetNodeId().GetNodeId(), resp.GetNodeCredential())
	id := resp.GetNodeId().GetNodeId()
	eventually(t, "node online", func() bool { return nodeState(t, c, id) == managerpb.NodeLifecycle_NODE_LIFECYCLE_STARTED })
	return id, w
}

func nodeState(t *testing.T, c managerpb.ManagerClient, id string) managerpb.NodeLifecycle {
	resp, err := c.ListNodes(context.Background(), &managerpb.ListNodesRequest{})
	require.NoError(t, err)
	for _, n := range resp.GetNodes() {
		if n.GetMetadata().GetNodeId().GetNodeId() == id && n.GetConnected() {
			return n.GetState()
		}
	}
	return -1
}

func instanceOf(t *testing.T, c managerpb.ManagerClient, job string) []*managerpb.RunningJob {
	r, err := c.JobById(context.Background(), &commonpb.JobId{JobId: job})
	require.NoError(t, err)
	return r.GetInstances()
}

func jobHistoryKinds(r *managerpb.JobByIdResponse) []string {
	var out []string
	for _, h := range r.GetJob().GetHistoryEntry() {
		k := strings.TrimPrefix(strings.TrimPrefix(fmtType(h.GetHistoryEntry()), "*managerpb.JobHistoryEntry_"), "Job")
		out = append(out, k)
	}
	return out
}

func TestAgent_JobLifecycle(t *testing.T) {
	ctx := context.Background()
	a, c := startAgent(t, t.TempDir())
	node, w := registerWorker(t, c, "w1")

	job := &managerpb.Job{JobId: &commonpb.JobId{JobId: "j1"}, Description: "first", Tags: map[string]string{"env": "test"}, Services: oneService()}
	h1, err := c.CreateJob(ctx, job)
	require.NoError(t, err)
	require.NotZero(t, h1.GetHash())
	_, err = c.CreateJob(ctx, job)
	requireCode(t, err, codes.AlreadyExists, "j1")

	job.Description = "second"
	job.CurrentHash = 12345
	_, err = c.UpdateJob(ctx, job)
	requireCode(t, err, codes.FailedPrecondition, "stale current_hash", "current hash is")
	job.CurrentHash = h1.GetHash()
	h2, err := c.UpdateJob(ctx, job)
	require.NoError(t, err)
	require.NotEqual(t, h1.GetHash(), h2.GetHash())

	_, err = c.StartJob(ctx, &managerpb.StartJobRequest{JobId: job.JobId, Role: "primary", NodeId: &commonpb.NodeId{NodeId: node}})
	require.NoError(t, err)
	eventually(t, "worker runs j1", func() bool { return w.isRunning("j1", "primary") })
	eventually(t, "j1 running", func() bool {
		r, err := c.JobById(ctx, job.JobId)
		require.NoError(t, err)
		k := jobHistoryKinds(r)
		return len(k) > 0 && k[len(k)-1] == "Running"
	})
	r, err := c.JobById(ctx, job.JobId)
	require.NoError(t, err)
	require.Equal(t, managerpb.Job_ACTIVE, r.GetJob().GetJob().GetState())
	require.Equal(t, []string{"Created", "Updated", "Provisioned", "Running"}, jobHistoryKinds(r))

	_, err = c.StartJob(ctx, &managerpb.StartJobRequest{JobId: job.JobId, Role: "primary", NodeId: &commonpb.NodeId{NodeId: node}})
	requireCode(t, err, codes.AlreadyExists, "primary")
	_, err = c.DeleteJob(ctx, job.JobId)
	requireCode(t, err, codes.FailedPrecondition, "primary", node)

	_, err = c.StopJob(ctx, &managerpb.StopJobRequest{JobId: job.JobId, Role: "primary", NodeId: &commonpb.NodeId{NodeId: node}})
	require.NoError(t, err)
	eventually(t, "instance gone", func() bool { return len(instanceOf(t, c, "j1")) == 0 })
	require.False(t, w.isRunning("j1", "primary"))

	_, err = c.CompleteJob(ctx, job.JobId)
	require.NoError(t, err)
	r, err = c.JobById(ctx, job.JobId)
	require.NoError(t, err)
	require.Equal(t, managerpb.Job_POST, r.GetJob().GetJob().GetState())
	require.Equal(t, []string{"Created", "Updated", "Provisioned", "Running", "Stopping", "Stopped", "Completed"}, jobHistoryKinds(r))
	_, err = c.DeleteJob(ctx, job.JobId)
	require.NoError(t, err)
	_, err = c.JobById(ctx, job.JobId)
	requireCode(t, err, codes.NotFound)
	_ = a
}

func TestAgent_RestartAdoptsRunningJobs(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	a, c := startAgent(t, dir)
	node, w := registerWorker(t, c, "w1")
	_, err := c.CreateJob(ctx, &managerpb.Job{JobId: &commonpb.JobId{JobId: "live"}, Services: oneService()})
	require.NoError(t, err)
	_, err = c.StartJob(ctx, &managerpb.StartJobRequest{JobId: &commonpb.JobId{JobId: "live"}, Role: "primary", NodeId: &commonpb.NodeId{NodeId: node}})
	require.NoError(t, err)
	var before *managerpb.JobByIdResponse
	eventually(t, "running", func() bool {
		var err error
		before, err = c.JobById(ctx, &commonpb.JobId{JobId: "live"})
		require.NoError(t, err)
		k := jobHistoryKinds(before)
		return w.isRunning("live", "primary") && k[len(k)-1] == "Running"
	})
	a.Shutdown()

	_, c2 := startAgent(t, dir)
	eventually(t, "re-dialled", func() bool { return nodeState(t, c2, node) == managerpb.NodeLifecycle_NODE_LIFECYCLE_STARTED })
	after, err := c2.JobById(ctx, &commonpb.JobId{JobId: "live"})
	require.NoError(t, err)
	require.Equal(t, jobHistoryKinds(before), jobHistoryKinds(after), "adoption must not add history")
	require.Len(t, after.GetInstances(), 1)
	require.True(t, w.isRunning("live", "primary"))
	// The node shows connected once the manager sent its hello_response;
	// the worker records the epoch when it reads it, a moment later.
	eventually(t, "the worker read the new session's epoch", func() bool {
		w.mu.Lock()
		defer w.mu.Unlock()
		return len(w.epochs) >= 2
	})
	w.mu.Lock()
	defer w.mu.Unlock()
	require.Len(t, w.epochs, 2, "one accepted session per manager run")
	require.Greater(t, w.epochs[1], w.epochs[0], "session epochs must grow across manager restarts")
	for _, m := range w.received {
		require.Nil(t, m.GetStopJob(), "a manager restart must not stop a job")
	}
}

// TestAgent_DeleteJob_TellsWorkers: a committed DeleteJob sends delete_job
// with the job's id to every worker whose session is up (the one that ran
// the job and one where it never ran), on the current session; a refused
// DeleteJob (instances running, unknown job) sends nothing.
func TestAgent_DeleteJob_TellsWorkers(t *testing.T) {
	ctx := context.Background()
	_, c := startAgent(t, t.TempDir())
	node, w1 := registerWorker(t, c, "w1")
	_, w2 := registerWorker(t, c, "w2")
	id := &commonpb.JobId{JobId: "j-del"}
	_, err := c.CreateJob(ctx, &managerpb.Job{JobId: id, Services: oneService()})
	require.NoError(t, err)
	_, err = c.StartJob(ctx, &managerpb.StartJobRequest{JobId: id, Role: "primary", NodeId: &commonpb.NodeId{NodeId: node}})
	require.NoError(t, err)
	eventually(t, "worker runs j-del", func() bool { return w1.isRunning("j-del", "primary") })

	// Refused: the job has an instance; an unknown job.
	_, err = c.DeleteJob(ctx, id)
	requireCode(t, err, codes.FailedPrecondition, "primary", node)
	_, err = c.DeleteJob(ctx, &commonpb.JobId{JobId: "no-such-job"})
	requireCode(t, err, codes.NotFound)
	// A committed delete of another job: the node grains handle commands
	// in order, so once its delete_job arrived, one sent by the refused
	// deletes would have arrived before it.
	_, err = c.CreateJob(ctx, &managerpb.Job{JobId: &commonpb.JobId{JobId: "marker"}})
	require.NoError(t, err)
	_, err = c.DeleteJob(ctx, &commonpb.JobId{JobId: "marker"})
	require.NoError(t, err)
	for _, w := range []*fakeWorker{w1, w2} {
		eventually(t, "delete_job of marker", func() bool { return slices.Contains(w.deletedJobs(), "marker") })
		require.Equal(t, []string{"marker"}, w.deletedJobs(), "a refused DeleteJob must not send delete_job")
	}

	_, err = c.StopJob(ctx, &managerpb.StopJobRequest{JobId: id, Role: "primary", NodeId: &commonpb.NodeId{NodeId: node}})
	require.NoError(t, err)
	eventually(t, "instance gone", func() bool { return len(instanceOf(t, c, "j-del")) == 0 })
	_, err = c.DeleteJob(ctx, id)
	require.NoError(t, err)
	for _, w := range []*fakeWorker{w1, w2} {
		eventually(t, "delete_job of j-del", func() bool { return slices.Contains(w.deletedJobs(), "j-del") })
		require.Equal(t, []string{"marker", "j-del"}, w.deletedJobs())
		w.mu.Lock()
		epoch := w.epochs[len(w.epochs)-1]
		for _, m := range w.received {
			if m.GetDeleteJob() != nil {
				require.Equal(t, epoch, m.GetSessionEpoch(), "delete_job carries the session's epoch")
			}
		}
		w.mu.Unlock()
	}
	_, err = c.JobById(ctx, id)
	requireCode(t, err, codes.NotFound)
}

var _ = internalpb.InstanceStatus_INSTANCE_RUNNING
