package e2e

import (
	"context"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/norsk-oss/norsk-manager/client"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
	"github.com/norsk-oss/norsk-manager/test/testproc"
)

// TestE2E_OldStoreCatchesUpWithTheWorkersEpoch starts a manager on an old
// copy of its data dir (as a restore from an old backup does) after the
// worker has verified newer session epochs: the worker refuses the first
// dial as stale, naming its epoch, and the manager dials again above it at
// once, so the session is back within a few seconds and the node is never
// declared stopped (it used to climb one epoch per backed-off dial).
func TestE2E_OldStoreCatchesUpWithTheWorkersEpoch(t *testing.T) {
	s := newWebSetup(t)
	s.m.Stop()
	old := filepath.Join(t.TempDir(), "old")
	copyDir(t, s.managerDataDir, old)
	// Each restart of the manager dials the worker with a higher epoch.
	for range 4 {
		s.m = startManager(t, s.managerDataDir, s.managerPort)
		testproc.Eventually(t, 30*time.Second, "session back", func() bool { return nodeConnected(t, s.mc, s.nodeID) })
		s.m.Stop()
	}
	s.m = startManager(t, old, s.managerPort)
	start := time.Now()
	testproc.Eventually(t, 10*time.Second, "the old store's manager holds the worker session", func() bool {
		return nodeConnected(t, s.mc, s.nodeID)
	})
	t.Logf("session back %s after the old store's manager served", time.Since(start).Round(time.Millisecond))
	require.Contains(t, s.m.Output(), "worker refused a stale session epoch")
	nodes, err := s.mc.ListNodes(context.Background())
	require.NoError(t, err)
	require.Len(t, nodes, 1)
	require.Equal(t, managerpb.NodeLifecycle_NODE_LIFECYCLE_STARTED, nodes[0].GetState())
	s.jobStillRunning(t, "after the old store took the worker back")
}

// TestE2E_StopSurvivesNodeLoss: a StopJob acknowledged while the worker
// is frozen, which the worker never confirms before its node is declared
// lost, still takes effect when the worker comes back: the instance is
// stopped, not re-adopted (it used to be adopted and keep running).
func TestE2E_StopSurvivesNodeLoss(t *testing.T) {
	s := newWebSetup(t)
	ctx := context.Background()
	if err := s.worker.Cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.worker.Cmd.Process.Signal(syscall.SIGCONT) })
	require.NoError(t, s.mc.StopJob(ctx, "web", "primary", client.NodeID(s.nodeID)))
	testproc.Eventually(t, 90*time.Second, "the frozen worker's node declared stopped", func() bool {
		nodes, err := s.mc.ListNodes(ctx)
		return err == nil && len(nodes) == 1 && nodes[0].GetState() == managerpb.NodeLifecycle_NODE_LIFECYCLE_STOPPED
	})
	require.NoError(t, s.worker.Cmd.Process.Signal(syscall.SIGCONT))
	testproc.Eventually(t, 30*time.Second, "the owed stop carried out on the thawed worker", func() bool {
		return !testproc.PIDAlive(s.pid)
	})
	testproc.Eventually(t, 10*time.Second, "no instance recorded", func() bool {
		r, err := s.mc.JobByID(ctx, "web")
		return err == nil && len(r.GetInstances()) == 0
	})
	require.Contains(t, s.m.Output(), "whose acknowledged stop it never confirmed")
}
