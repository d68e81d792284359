package e2e

import (
	"context"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/norsk-oss/norsk-manager/test/testproc"
)

// startWorkerEnv runs norsk-ctl --mode=worker on stateDir with
// NORSK_MANAGER_URL set to managerURL ("" leaves it unset) and extra flags.
func startWorkerEnv(t *testing.T, name, stateDir string, port int, managerURL string, extra ...string) *testproc.Proc {
	t.Helper()
	t.Cleanup(func() { testproc.KillProcessesMentioning(stateDir) })
	args := append([]string{"--mode=worker", "--listen", testproc.Addr(port), "--state-dir", stateDir,
		"--log-level", "debug", "--stop-grace", "3s", "--dial-back-timeout", "3s"}, extra...)
	return testproc.StartWith(t, name, "norsk-ctl", func(cmd *exec.Cmd) {
		env := cmd.Env[:0:0]
		for _, kv := range cmd.Env {
			if !strings.HasPrefix(kv, "NORSK_MANAGER_URL=") {
				env = append(env, kv)
			}
		}
		if managerURL != "" {
			env = append(env, "NORSK_MANAGER_URL="+managerURL)
		}
		cmd.Env = env
	}, args...)
}

// TestE2E_WorkerStateCopy_WithoutToken: a copy of a stopped worker's
// --state-dir started with neither --token nor a manager URL exits 2 naming
// the stored node, without taking back the node's running job; started
// with $NORSK_MANAGER_URL (no flags) it registers with the stored
// credential and comes back as that node, with the job (same process).
// Before, both ran as mock-pool workers that re-adopted the job's process
// outside the node.
func TestE2E_WorkerStateCopy_WithoutToken(t *testing.T) {
	ctx := context.Background()
	mport, wport, webPort := testproc.FreePort(t), testproc.FreePort(t), testproc.FreePort(t)
	m := startManager(t, filepath.Join(t.TempDir(), "data"), mport)
	mc := connect(t, m.addr)
	nodeID, token, err := mc.RegisterClusterNode(ctx, "copied", nil)
	require.NoError(t, err)
	stateDir := filepath.Join(t.TempDir(), "worker")
	w := startWorkerArgs(t, "worker", stateDir, wport, "--token", token, "--manager-url", m.addr)
	testproc.Eventually(t, 20*time.Second, "worker online", func() bool { return nodeConnected(t, mc, string(nodeID)) })
	pidFile := filepath.Join(testproc.JobFilesDir(t), "web.pid")
	_, err = mc.CreateJob(ctx, webJob("web", pidFile, webPort))
	require.NoError(t, err)
	require.NoError(t, mc.StartJob(ctx, "web", "primary", nodeID))
	testproc.Eventually(t, 20*time.Second, "service up", func() bool { return httpOK(webPort) })
	pid, ok := testproc.ReadPID(pidFile)
	require.True(t, ok)
	w.Stop()
	testproc.Eventually(t, 20*time.Second, "node seen offline", func() bool { return !nodeConnected(t, mc, string(nodeID)) })

	copyDir := filepath.Join(t.TempDir(), "copy")
	out, err := exec.Command("cp", "-a", stateDir, copyDir).CombinedOutput()
	require.NoError(t, err, string(out))

	p := startWorkerEnv(t, "copy-no-manager", copyDir, wport, "")
	code, exited := p.Exited(20 * time.Second)
	require.True(t, exited, "a state dir with an identity and no manager must not run")
	require.Equal(t, 2, code, p.Output())
	require.Contains(t, p.Output(), "node "+string(nodeID))
	require.Contains(t, p.Output(), "give --manager-url")
	require.NotContains(t, p.Output(), "re-adopted")
	require.NotContains(t, p.Output(), "worker listening")
	require.True(t, httpOK(webPort), "the job is untouched")

	p = startWorkerEnv(t, "copy-env", copyDir, wport, m.addr)
	testproc.Eventually(t, 20*time.Second, "the copy back as the node", func() bool { return nodeConnected(t, mc, string(nodeID)) })
	require.Contains(t, p.Output(), "mock_pool=false")
	r, err := mc.JobByID(ctx, "web")
	require.NoError(t, err)
	require.Len(t, r.GetInstances(), 1)
	require.Equal(t, string(nodeID), r.GetInstances()[0].GetNodeId().GetNodeId())
	cur, ok := testproc.ReadPID(pidFile)
	require.True(t, ok)
	require.Equal(t, pid, cur, "the job was re-adopted, not restarted")
	require.True(t, testproc.PIDAlive(pid))
	p.Stop()
	m.Stop()
}
