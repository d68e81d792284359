package agent

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"

	"github.com/norsk-oss/norsk-manager/proto/commonpb"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
	"github.com/norsk-oss/norsk-manager/proto/workerpb"
)

// alerts follows the event stream and collects its node_alert events.
type alerts struct {
	mu  sync.Mutex
	got []*managerpb.NodeAlert
}

func followAlerts(t *testing.T, c managerpb.ManagerClient) *alerts {
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	s, err := c.EventStream(ctx, &managerpb.EventStreamRequest{})
	require.NoError(t, err)
	a := &alerts{}
	go func() {
		for {
			ev, err := s.Recv()
			if err != nil {
				return
			}
			if na := ev.GetNodeAlert(); na != nil {
				a.mu.Lock()
				a.got = append(a.got, na)
				a.mu.Unlock()
			}
		}
	}()
	return a
}

func (a *alerts) has(kind managerpb.NodeAlert_Kind, job string) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.ContainsFunc(a.got, func(na *managerpb.NodeAlert) bool {
		return na.GetKind() == kind && na.GetJobKey().GetJobId().GetJobId() == job
	})
}

func orphansOf(t *testing.T, c managerpb.ManagerClient, node string) []string {
	resp, err := c.ListNodes(context.Background(), &managerpb.ListNodesRequest{})
	require.NoError(t, err)
	var out []string
	for _, n := range resp.GetNodes() {
		if n.GetMetadata().GetNodeId().GetNodeId() == node {
			for _, o := range n.GetOrphans() {
				out = append(out, o.GetJobKey().GetJobId().GetJobId())
			}
		}
	}
	return out
}

// registerRunning registers a slot whose fake worker already runs the
// given jobs (as primary) when its first session starts.
func registerRunning(t *testing.T, c managerpb.ManagerClient, jobs ...string) (string, *fakeWorker) {
	ctx := context.Background()
	reg, err := c.RegisterClusterNode(ctx, &managerpb.RegisterClusterNodeRequest{NodeName: "w"})
	require.NoError(t, err)
	w := newFakeWorker(t)
	for _, j := range jobs {
		w.running[[2]string{j, "primary"}] = &workerpb.WorkerJob{JobId: &commonpb.JobId{JobId: j}, Role: "primary"}
	}
	w.setCredential(reg.GetNodeId().GetNodeId(), "")
	resp, err := c.ClusterMemberRegister(ctx, &managerpb.ClusterMemberRegisterRequest{Token: reg.GetToken(), Address: "127.0.0.1", Port: w.port})
	require.NoError(t, err)
	w.setCredential(resp.GetNodeId().GetNodeId(), resp.GetNodeCredential())
	return resp.GetNodeId().GetNodeId(), w
}

// TestOrphans_KeptForTheGraceThenStopped: jobs a worker runs that the
// store never knew are kept running, listed on the node and announced;
// one whose job is created meanwhile is adopted, one an operator stops is
// stopped at once, the others are stopped when the grace ends. A job the
// store knows was deleted is stopped at once.
func TestOrphans_KeptForTheGraceThenStopped(t *testing.T) {
	ctx := context.Background()
	cfg := DevConfig(t.TempDir())
	cfg.Store.SyncWrites = false
	cfg.Node.OrphanGrace = 3 * time.Second
	_, c := startAgentWith(t, cfg)
	al := followAlerts(t, c)

	_, err := c.CreateJob(ctx, &managerpb.Job{JobId: &commonpb.JobId{JobId: "deleted"}})
	require.NoError(t, err)
	_, err = c.DeleteJob(ctx, &commonpb.JobId{JobId: "deleted"})
	require.NoError(t, err)

	node, w := registerRunning(t, c, "ghost", "restored", "operator", "deleted")
	eventually(t, "orphans listed", func() bool {
		return slices.Equal(orphansOf(t, c, node), []string{"ghost", "operator", "restored"})
	})
	eventually(t, "the deleted job stopped at once", func() bool { return !w.isRunning("deleted", "primary") })
	require.True(t, w.isRunning("ghost", "primary") && w.isRunning("restored", "primary") && w.isRunning("operator", "primary"),
		"orphans keep running")
	eventually(t, "orphan alerts", func() bool { return al.has(managerpb.NodeAlert_ORPHAN_FOUND, "ghost") })

	// An operator stops one now.
	_, err = c.StopOrphan(ctx, &managerpb.StopOrphanRequest{NodeId: &commonpb.NodeId{NodeId: node},
		JobKey: &commonpb.ActiveJobKey{JobId: &commonpb.JobId{JobId: "operator"}, Role: "primary"}})
	require.NoError(t, err)
	eventually(t, "the operator's orphan stopped", func() bool { return !w.isRunning("operator", "primary") })
	_, err = c.StopOrphan(ctx, &managerpb.StopOrphanRequest{NodeId: &commonpb.NodeId{NodeId: node},
		JobKey: &commonpb.ActiveJobKey{JobId: &commonpb.JobId{JobId: "operator"}, Role: "primary"}})
	requireCode(t, err, codes.NotFound, "no orphan")

	// Its job is created (restored) during the grace: adopted, not stopped.
	_, err = c.CreateJob(ctx, &managerpb.Job{JobId: &commonpb.JobId{JobId: "restored"}})
	require.NoError(t, err)
	eventually(t, "the unknown orphan stopped after the grace", func() bool { return !w.isRunning("ghost", "primary") })
	eventually(t, "the restored orphan adopted", func() bool {
		in := instanceOf(t, c, "restored")
		return len(in) == 1 && in[0].GetNodeId().GetNodeId() == node
	})
	require.True(t, w.isRunning("restored", "primary"), "an adopted orphan keeps running")
	eventually(t, "no orphans left", func() bool { return len(orphansOf(t, c, node)) == 0 })
	// The alerts come on the event stream, after the commits the reads above saw.
	eventually(t, "orphan stopped and adopted alerts", func() bool {
		return al.has(managerpb.NodeAlert_ORPHAN_STOPPED, "ghost") && al.has(managerpb.NodeAlert_ORPHAN_ADOPTED, "restored")
	})
}

// TestOrphans_GraceOff: with the grace off (--orphan-grace 0) an unknown
// job is stopped at once, as before orphans existed.
func TestOrphans_GraceOff(t *testing.T) {
	cfg := DevConfig(t.TempDir())
	cfg.Store.SyncWrites = false
	cfg.Node.OrphanGrace = -1
	_, c := startAgentWith(t, cfg)
	node, w := registerRunning(t, c, "ghost")
	eventually(t, "stopped at once", func() bool { return !w.isRunning("ghost", "primary") })
	require.Empty(t, orphansOf(t, c, node))
}
