package e2e

import (
	"context"
	"fmt"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/norsk-oss/norsk-manager/client"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
	"github.com/norsk-oss/norsk-manager/test/testproc"
)

// nodeState returns the state of node id and whether it is listed.
func nodeState(t *testing.T, mc *client.NorskManager, id string) (*managerpb.NodeInfo, bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	nodes, err := mc.ListNodes(ctx)
	if err != nil {
		return nil, false
	}
	for _, n := range nodes {
		if n.GetMetadata().GetNodeId().GetNodeId() == id {
			return n, true
		}
	}
	return nil, false
}

// startMockWorker starts a worker without a token (for the mock pool) with
// capacity units and returns its address once it listens.
func startMockWorker(t *testing.T, name string, capacity int) string {
	t.Helper()
	addr := testproc.Addr(testproc.FreePort(t))
	stateDir := filepath.Join(t.TempDir(), name)
	t.Cleanup(func() { testproc.KillProcessesMentioning(stateDir) })
	start(t, name, "norsk-ctl", "--mode=worker", "--listen", addr, "--state-dir", stateDir, "--log-level", "debug",
		"--stop-grace", "3s", "--dial-back-timeout", "3s", "--capacity", fmt.Sprint(capacity))
	testproc.Eventually(t, 20*time.Second, name+" listening", func() bool {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
		}
		return err == nil
	})
	return addr
}

// TestE2E_Provision_Mock: a pool whose only tier has the mock provisioner
// and no node at all. Two auto-placed jobs waiting → the engine
// creates one node (the first worker of the mock pool) for both → both
// run on it → pool get counts it → the jobs are completed → after the tier's
// linger the node is terminated by the engine, and no second node was
// ever created (the second mock URL is never handed out).
func TestE2E_Provision_Mock(t *testing.T) {
	ctx := context.Background()
	w1 := startMockWorker(t, "mock-w1", 4)
	w2 := startMockWorker(t, "mock-w2", 4)
	m := startManager(t, filepath.Join(t.TempDir(), "data"), testproc.FreePort(t), "--mock-worker-urls", w1+","+w2)
	mc := connect(t, m.addr)
	ev := &testproc.EventLog{}
	ev.Follow(t, mc, 10*time.Second)
	ports := map[string]int{}
	for _, id := range []string{"pa", "pb"} {
		ports[id] = testproc.FreePort(t)
		job := webJob(id, filepath.Join(testproc.JobFilesDir(t), id+".pid"), ports[id])
		job.Tags["pool"] = "elastic"
		job.AutoPlacement = &managerpb.AutoPlacement{Requirements: &managerpb.JobRequirements{RequiredCapacity: 1}}
		_, err := mc.CreateJob(ctx, job)
		require.NoError(t, err)
	}
	// The pool comes after the jobs, so that one pass finds both waiting
	// (created one by one, the first could get its node before the second
	// exists, and the second would then fit in it as room coming).
	require.NoError(t, mc.CreatePool(ctx, &managerpb.Pool{Name: "elastic", Tiers: []*managerpb.PoolTier{{
		Name: "mock", MaxNodes: 2, LingerSeconds: 3,
		Provisioner: &managerpb.PoolTier_Mock{Mock: &managerpb.MockTierProvisioner{
			Tags: map[string]string{"site": "lab"}, Offering: &managerpb.TierInstanceType{Capacity: 4}}},
	}}}))

	const node = "elastic-mock-1"
	for id, port := range ports {
		testproc.Eventually(t, 30*time.Second, "job "+id+" serves", func() bool { return httpOK(port) })
		r, err := mc.JobByID(ctx, client.JobID(id))
		require.NoError(t, err)
		require.Len(t, r.GetInstances(), 1)
		require.Equal(t, node, r.GetInstances()[0].GetNodeId().GetNodeId(), "job %s", id)
	}
	info, ok := nodeState(t, mc, node)
	require.True(t, ok)
	require.Equal(t, "lab", info.GetMetadata().GetTags()["site"])
	_, second := nodeState(t, mc, "elastic-mock-2")
	require.False(t, second, "a second node was created for jobs that share one")
	p, err := mc.GetPool(ctx, "elastic")
	require.NoError(t, err)
	require.Len(t, p.GetTierStatus(), 1)
	require.Equal(t, uint32(1), p.GetTierStatus()[0].GetNodesRunning())
	testproc.Eventually(t, 10*time.Second, "node_provisioning for both jobs", func() bool {
		return ev.Has(func(e *managerpb.EventStreamEvent) bool {
			p := e.GetNodeProvisioning()
			return p.GetNodeId().GetNodeId() == node && p.GetPool() == "elastic" && p.GetTier() == "mock" && len(p.GetForJobs()) == 2
		})
	})
	out, code := ctl(t, m.addr, "pool", "get", "elastic")
	require.Equal(t, 0, code, out)
	require.Contains(t, out, "1 running, 0 creating")

	for id := range ports {
		require.NoError(t, mc.CompleteJob(ctx, client.JobID(id)))
	}
	testproc.Eventually(t, 30*time.Second, "the idle node released after its linger", func() bool {
		info, ok := nodeState(t, mc, node)
		return ok && info.GetState() == managerpb.NodeLifecycle_NODE_LIFECYCLE_STOPPED
	})
	testproc.Eventually(t, 10*time.Second, "node_released", func() bool {
		return ev.Has(func(e *managerpb.EventStreamEvent) bool {
			r := e.GetNodeReleased()
			return r.GetNodeId().GetNodeId() == node && r.GetIdleSeconds() >= 3
		})
	})
	_, second = nodeState(t, mc, "elastic-mock-2")
	require.False(t, second)
	require.True(t, strings.Contains(m.Output(), "node released"), "the manager logs the release")
}
