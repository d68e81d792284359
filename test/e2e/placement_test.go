package e2e

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/norsk-oss/norsk-manager/client"
	"github.com/norsk-oss/norsk-manager/proto/commonpb"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
	"github.com/norsk-oss/norsk-manager/test/testproc"
)

// TestE2E_Placement: one manager, two real workers with --capacity 2 in
// zones z1 and z2, and no StartJob anywhere: an auto-placed job runs; a
// bundle with a resilience policy forbidding the same zone runs its
// primary and backup in different zones; deregistering the node of the job
// gets it running on the other node; a job whose service exits 1 at once
// ends with terminal_state after its pool's ceiling (2 in 60 s) and is
// never started again.
func TestE2E_Placement(t *testing.T) {
	ctx := context.Background()
	mport := testproc.FreePort(t)
	m := startManager(t, filepath.Join(t.TempDir(), "data"), testproc.FreePort(t), "--metrics-addr", testproc.Addr(mport))
	mc := connect(t, m.addr)
	zoneOf := map[string]string{}
	for _, zone := range []string{"z1", "z2"} {
		id, token, err := mc.RegisterClusterNode(ctx, "w-"+zone, nil)
		require.NoError(t, err)
		stateDir := filepath.Join(t.TempDir(), "worker-"+zone)
		t.Cleanup(func() { testproc.KillProcessesMentioning(stateDir) })
		start(t, "worker-"+zone, "norsk-ctl", "--mode=worker", "--manager-url", m.addr, "--listen", testproc.Addr(testproc.FreePort(t)),
			"--state-dir", stateDir, "--log-level", "debug", "--stop-grace", "3s", "--dial-back-timeout", "3s",
			"--token", token, "--capacity", "2", "--zone", zone)
		testproc.Eventually(t, 20*time.Second, "worker "+zone+" online", func() bool { return nodeConnected(t, mc, string(id)) })
		zoneOf[string(id)] = zone
	}
	running := func(job, role string) string {
		t.Helper()
		r, err := mc.JobByID(ctx, client.JobID(job))
		require.NoError(t, err)
		for _, in := range r.GetInstances() {
			if in.GetJobKey().GetRole() == role {
				return in.GetNodeId().GetNodeId()
			}
		}
		return ""
	}

	// An auto-placed job runs without StartJob.
	webPort := testproc.FreePort(t)
	job := webJob("auto", filepath.Join(testproc.JobFilesDir(t), "auto.pid"), webPort)
	job.AutoPlacement = &managerpb.AutoPlacement{Requirements: &managerpb.JobRequirements{RequiredCapacity: 1}}
	_, err := mc.CreateJob(ctx, job)
	require.NoError(t, err)
	testproc.Eventually(t, 20*time.Second, "the auto-placed job serves", func() bool { return httpOK(webPort) })
	autoNode := running("auto", "primary")
	require.Contains(t, zoneOf, autoNode)

	// A bundle with a backup in another zone.
	sleeper := &managerpb.Job{Services: []*commonpb.Service{{Name: "idle", Command: "exec sleep 600", Restart: commonpb.Service_NEVER}}}
	bid, err := mc.CreateBundle(ctx, &managerpb.Bundle{
		Jobs: []*managerpb.BundleJobSpec{{JobName: "enc", Requirements: &managerpb.JobRequirements{RequiredCapacity: 0.5}, Job: sleeper}},
		ResiliencePolicy: &managerpb.ResiliencePolicy{
			SameNode: managerpb.AntiAffinity_ANTI_AFFINITY_FORBID, SameAz: managerpb.AntiAffinity_ANTI_AFFINITY_FORBID}})
	require.NoError(t, err)
	primaryJob, backupJob := fmt.Sprintf("%s.0.enc", bid), fmt.Sprintf("%s.1.enc", bid)
	var primary, backup string
	testproc.Eventually(t, 20*time.Second, "primary and backup placed", func() bool {
		primary, backup = running(primaryJob, "primary"), running(backupJob, "backup")
		return primary != "" && backup != ""
	})
	require.NotEqual(t, zoneOf[primary], zoneOf[backup], "primary on %s, backup on %s", primary, backup)

	// The node of the auto job leaves: the job runs on the other node.
	require.NoError(t, mc.DeregisterClusterNode(ctx, client.NodeID(autoNode)))
	testproc.Eventually(t, 30*time.Second, "the auto job re-placed on the other node", func() bool {
		n := running("auto", "primary")
		return n != "" && n != autoNode && httpOK(webPort)
	})

	// A crash-looping job ends with terminal_state after its pool's ceiling.
	require.NoError(t, mc.CreatePool(ctx, &managerpb.Pool{Name: "tight", Tiers: []*managerpb.PoolTier{{Name: "all"}},
		RestartCeiling: &managerpb.RestartCeiling{MaxFailures: 2, WindowSeconds: 60}}))
	crash := &managerpb.Job{JobId: &commonpb.JobId{JobId: "crash"}, Tags: map[string]string{"pool": "tight"},
		Services: []*commonpb.Service{{Name: "bad", Command: "exit 1", Restart: commonpb.Service_NEVER}},
		// No units: the remaining node is full (0.5 + 0.5 + 1 of 2).
		AutoPlacement: &managerpb.AutoPlacement{Requirements: &managerpb.JobRequirements{}}}
	_, err = mc.CreateJob(ctx, crash)
	require.NoError(t, err)
	var reason string
	testproc.Eventually(t, 30*time.Second, "terminal_state written", func() bool {
		r, err := mc.JobByID(ctx, "crash")
		require.NoError(t, err)
		reason = r.GetJob().GetJob().GetTerminalState().GetFailureReason()
		return reason != ""
	})
	require.Regexp(t, `^restart ceiling exceeded: 2 failures in 1m0s, last: `, reason)
	r, err := mc.JobByID(ctx, "crash")
	require.NoError(t, err)
	provisioned := 0
	for _, h := range r.GetJob().GetHistoryEntry() {
		if h.GetJobProvisioned() != nil {
			provisioned++
		}
	}
	require.Equal(t, 2, provisioned, "started twice, then given up")
	require.Empty(t, r.GetInstances())

	// auto (twice, more if its port was still taken on the new node),
	// primary (twice), backup, crash (twice); one terminal.
	placed := metric(t, testproc.Addr(mport), `norsk_manager_placements_total{result="placed"}`)
	var n int
	_, err = fmt.Sscanf(placed, `norsk_manager_placements_total{result="placed"} %d`, &n)
	require.NoError(t, err, placed)
	require.GreaterOrEqual(t, n, 7, placed)
	require.Equal(t, `norsk_manager_placements_total{result="terminal"} 1`, metric(t, testproc.Addr(mport), `norsk_manager_placements_total{result="terminal"}`))
	// The gauge is set by the pass after the terminal write.
	testproc.Eventually(t, 10*time.Second, "no unplaced job", func() bool {
		return metric(t, testproc.Addr(mport), "norsk_manager_unplaced_jobs") == "norsk_manager_unplaced_jobs 0"
	})
}
