package e2e

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/norsk-oss/norsk-manager/client"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
	"github.com/norsk-oss/norsk-manager/test/testproc"
)

// TestE2E_Provision_HighWaitsForNode (issue 13 §1 with §3): a pool whose
// mock tier creates nodes and whose HIGH jobs wait up to 300 s for one.
// A LOW job fills the first node the engine creates; a HIGH job arrives
// and fits nowhere: the engine creates a second node for it instead of
// preempting, the HIGH job runs there, and the LOW job's process was never
// stopped (no job_preempted at all). Before the engine answered
// Provisioning.NodeComing, the HIGH job preempted the LOW one at once.
func TestE2E_Provision_HighWaitsForNode(t *testing.T) {
	ctx := context.Background()
	w1 := startMockWorker(t, "mock-hw1", 4)
	w2 := startMockWorker(t, "mock-hw2", 4)
	m := startManager(t, filepath.Join(t.TempDir(), "data"), testproc.FreePort(t), "--mock-worker-urls", w1+","+w2)
	mc := connect(t, m.addr)
	ev := &testproc.EventLog{}
	ev.Follow(t, mc, 10*time.Second)
	require.NoError(t, mc.CreatePool(ctx, &managerpb.Pool{Name: "live", HighPriorityProvisionWaitSeconds: 300, Tiers: []*managerpb.PoolTier{{
		Name: "mock", MaxNodes: 2, LingerSeconds: 60,
		Provisioner: &managerpb.PoolTier_Mock{Mock: &managerpb.MockTierProvisioner{Offering: &managerpb.TierInstanceType{Capacity: 4}}},
	}}}))
	pidFiles := map[string]string{}
	run := func(id string, band managerpb.PriorityBand) (node string, port int) {
		t.Helper()
		port = testproc.FreePort(t)
		pidFiles[id] = filepath.Join(testproc.JobFilesDir(t), id+".pid")
		job := webJob(id, pidFiles[id], port)
		job.Tags["pool"] = "live"
		job.AutoPlacement = &managerpb.AutoPlacement{Requirements: &managerpb.JobRequirements{RequiredCapacity: 4, PriorityBand: band}}
		_, err := mc.CreateJob(ctx, job)
		require.NoError(t, err)
		testproc.Eventually(t, 30*time.Second, "job "+id+" serves", func() bool { return httpOK(port) })
		r, err := mc.JobByID(ctx, client.JobID(id))
		require.NoError(t, err)
		require.Len(t, r.GetInstances(), 1)
		return r.GetInstances()[0].GetNodeId().GetNodeId(), port
	}
	pidOf := func(id string) int {
		b, err := os.ReadFile(pidFiles[id])
		require.NoError(t, err)
		pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
		require.NoError(t, err)
		return pid
	}

	lowNode, _ := run("bulk", managerpb.PriorityBand_PRIORITY_BAND_LOW)
	require.Equal(t, "live-mock-1", lowNode)
	lowPID := pidOf("bulk")

	highNode, _ := run("news", managerpb.PriorityBand_PRIORITY_BAND_HIGH)
	require.Equal(t, "live-mock-2", highNode, "the HIGH job runs on the node created for it")
	require.True(t, testproc.PIDAlive(lowPID), "the LOW job's process was never stopped")
	r, err := mc.JobByID(ctx, client.JobID("bulk"))
	require.NoError(t, err)
	require.Len(t, r.GetInstances(), 1)
	require.Equal(t, "live-mock-1", r.GetInstances()[0].GetNodeId().GetNodeId())
	for _, e := range ev.Snapshot() {
		require.Nil(t, e.GetJobPreempted(), "no preemption while a node was coming in time")
	}
	require.Contains(t, m.Output(), "high priority job waits for a node being provisioned")
}
