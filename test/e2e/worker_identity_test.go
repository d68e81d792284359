package e2e

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/norsk-oss/norsk-manager/test/testproc"
)

// startWorkerArgs runs norsk-ctl --mode=worker on stateDir with extra
// flags (--token, --manager-url…).
func startWorkerArgs(t *testing.T, name, stateDir string, port int, extra ...string) *testproc.Proc {
	t.Helper()
	t.Cleanup(func() { testproc.KillProcessesMentioning(stateDir) })
	args := append([]string{"norsk-ctl", "--mode=worker", "--listen", testproc.Addr(port), "--state-dir", stateDir,
		"--log-level", "debug", "--stop-grace", "3s", "--dial-back-timeout", "3s"}, extra...)
	return start(t, name, args...)
}

// TestE2E_WorkerRestart_WithoutToken_AndCorruptIdentity: a worker restarted
// on its state dir without --token comes back as its node; with a corrupt
// identity.json it exits naming the file, and the advice it gives (move the
// file aside, start with the token of a new slot, deregister the old one)
// brings it back as a new node.
func TestE2E_WorkerRestart_WithoutToken_AndCorruptIdentity(t *testing.T) {
	ctx := context.Background()
	mport, wport, webPort := testproc.FreePort(t), testproc.FreePort(t), testproc.FreePort(t)
	m := startManager(t, filepath.Join(t.TempDir(), "data"), mport)
	mc := connect(t, m.addr)
	nodeID, token, err := mc.RegisterClusterNode(ctx, "first", nil)
	require.NoError(t, err)
	stateDir := filepath.Join(t.TempDir(), "worker")

	w := startWorkerArgs(t, "worker-token", stateDir, wport, "--token", token, "--manager-url", m.addr)
	testproc.Eventually(t, 20*time.Second, "worker online", func() bool { return nodeConnected(t, mc, string(nodeID)) })
	pidFile := filepath.Join(testproc.JobFilesDir(t), "web.pid")
	_, err = mc.CreateJob(ctx, webJob("web", pidFile, webPort))
	require.NoError(t, err)
	require.NoError(t, mc.StartJob(ctx, "web", "primary", nodeID))
	testproc.Eventually(t, 20*time.Second, "service up", func() bool { return httpOK(webPort) })
	w.Stop()
	testproc.Eventually(t, 20*time.Second, "node seen offline", func() bool { return !nodeConnected(t, mc, string(nodeID)) })

	// Restart without --token: the same node, with its job.
	w = startWorkerArgs(t, "worker-tokenless", stateDir, wport, "--manager-url", m.addr)
	testproc.Eventually(t, 20*time.Second, "worker back without --token", func() bool { return nodeConnected(t, mc, string(nodeID)) })
	r, err := mc.JobByID(ctx, "web")
	require.NoError(t, err)
	require.Len(t, r.GetInstances(), 1)
	require.Equal(t, string(nodeID), r.GetInstances()[0].GetNodeId().GetNodeId())
	w.Stop()

	// A corrupt identity stops the worker, with or without a token.
	identity := filepath.Join(stateDir, "identity.json")
	require.NoError(t, os.WriteFile(identity, []byte("{garbage"), 0o600))
	for _, extra := range [][]string{{"--manager-url", m.addr}, {"--token", token, "--manager-url", m.addr}} {
		p := startWorkerArgs(t, "worker-corrupt", stateDir, wport, extra...)
		code, exited := p.Exited(20 * time.Second)
		require.True(t, exited, "a worker with a corrupt identity must exit")
		require.NotEqual(t, 0, code)
		require.Contains(t, p.Output(), identity)
		require.Contains(t, p.Output(), "move it aside")
	}

	// The advice: move it aside, register a new slot, start with its token.
	require.NoError(t, os.Rename(identity, identity+".broken"))
	out, code := ctl(t, m.addr, "slot", "register", "second")
	require.Equal(t, 0, code, out)
	slots, err := mc.ListClusterNodes(ctx)
	require.NoError(t, err)
	var newID, newToken string
	for _, s := range slots {
		if s.GetName() == "second" {
			newID, newToken = s.GetNodeId().GetNodeId(), s.GetToken()
		}
	}
	require.NotEmpty(t, newToken)
	w = startWorkerArgs(t, "worker-new-slot", stateDir, wport, "--token", newToken, "--manager-url", m.addr)
	testproc.Eventually(t, 20*time.Second, "worker online as the new node", func() bool { return nodeConnected(t, mc, newID) })
	out, code = ctl(t, m.addr, "slot", "deregister", string(nodeID))
	require.Equal(t, 0, code, out)
	require.True(t, nodeConnected(t, mc, newID), "the new node stays")
	w.Stop()
	m.Stop()
}
