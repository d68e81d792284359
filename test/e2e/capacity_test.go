package e2e

import (
	"context"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/norsk-oss/norsk-manager/proto/managerpb"
	"github.com/norsk-oss/norsk-manager/test/testproc"
)

// TestE2E_NodeCapacity: a real worker started with --capacity 4 --zone z1
// and a job requiring 1.5 units placed on it by the engine: norsk-ctl node list shows
// 1.5/4 and z1, node get the free units. The worker, SIGKILLed and started
// again on its state directory with --capacity 6, updates the node at its
// next hello; the job keeps running and keeps its units.
func TestE2E_NodeCapacity(t *testing.T) {
	ctx := context.Background()
	m := startManager(t, filepath.Join(t.TempDir(), "data"), testproc.FreePort(t))
	mc := connect(t, m.addr)
	nodeID, token, err := mc.RegisterClusterNode(ctx, "capacity", nil)
	require.NoError(t, err)
	stateDir := filepath.Join(t.TempDir(), "worker")
	t.Cleanup(func() { testproc.KillProcessesMentioning(stateDir) })
	wport := testproc.FreePort(t) // the same on restart, as a host's worker keeps its address
	workerArgs := func(extra ...string) []string {
		return append([]string{"norsk-ctl", "--mode=worker", "--manager-url", m.addr, "--listen", testproc.Addr(wport),
			"--state-dir", stateDir, "--log-level", "debug", "--dial-back-timeout", "3s", "--zone", "z1"}, extra...)
	}
	w := start(t, "worker", workerArgs("--token", token, "--capacity", "4")...)
	testproc.Eventually(t, 20*time.Second, "worker online", func() bool { return nodeConnected(t, mc, string(nodeID)) })

	job := webJob("enc", filepath.Join(testproc.JobFilesDir(t), "enc.pid"), testproc.FreePort(t))
	job.AutoPlacement = &managerpb.AutoPlacement{Requirements: &managerpb.JobRequirements{RequiredCapacity: 1.5}}
	_, err = mc.CreateJob(ctx, job)
	require.NoError(t, err)
	// No StartJob: the placement engine puts it on the only node.
	testproc.Eventually(t, 20*time.Second, "the engine placed the job", func() bool {
		j, err := mc.JobByID(ctx, "enc")
		require.NoError(t, err)
		return len(j.GetInstances()) == 1
	})

	row := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(string(nodeID)) + `\s.*\s1\.5/4\s+z1\s`)
	out, code := ctl(t, m.addr, "node", "list")
	require.Equal(t, 0, code, out)
	require.Regexp(t, row, out)
	require.Regexp(t, `(?m)^NODE ID\s.*\sJOBS\s+CAPACITY\s+ZONE\s`, out)
	out, code = ctl(t, m.addr, "node", "get", string(nodeID))
	require.Equal(t, 0, code, out)
	require.Contains(t, out, "Capacity:   4 units, 1.5 allocated, 2.5 free\n")
	require.Contains(t, out, "Zone:       z1\n")
	require.Contains(t, out, "Cloud:      cluster\n")

	// Restart with more capacity: the new hello replaces the stored value.
	w.Kill()
	start(t, "worker-again", workerArgs("--capacity", "6")...)
	testproc.Eventually(t, 20*time.Second, "node list shows the new capacity", func() bool {
		out, code := ctl(t, m.addr, "node", "list")
		require.Equal(t, 0, code, out)
		return regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(string(nodeID)) + `\s.*\s1\.5/6\s+z1\s`).MatchString(out)
	})
	j, err := mc.JobByID(ctx, "enc")
	require.NoError(t, err)
	require.Len(t, j.GetInstances(), 1, "the job kept its instance across the worker restart")
	require.Equal(t, string(nodeID), j.GetInstances()[0].GetNodeId().GetNodeId())
}
