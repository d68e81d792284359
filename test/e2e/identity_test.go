package e2e

import (
	"context"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/norsk-oss/norsk-manager/client"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
	"github.com/norsk-oss/norsk-manager/test/testproc"
)

// copyDir copies a directory tree (cp -a: a state or data dir as an
// operator would copy it).
func copyDir(t *testing.T, from, to string) {
	t.Helper()
	out, err := exec.Command("cp", "-a", from, to).CombinedOutput()
	require.NoError(t, err, "%s", out)
}

// webSetup is a manager, a worker on a cluster slot and a web job
// running on it.
type webSetup struct {
	m              *manager
	mc             *client.NorskManager
	ev             *testproc.EventLog
	nodeID, token  string
	stateDir       string
	wport, webPort int
	pidFile        string
	pid            int
	worker         *testproc.Proc
	managerPort    int
	managerDataDir string
}

// newWebSetup starts a manager (with extra flags), a worker on a new slot
// and a web job on it, and waits until the job answers HTTP.
func newWebSetup(t *testing.T, extra ...string) *webSetup {
	ctx := context.Background()
	s := &webSetup{managerDataDir: filepath.Join(t.TempDir(), "data"), managerPort: testproc.FreePort(t),
		wport: testproc.FreePort(t), webPort: testproc.FreePort(t), stateDir: filepath.Join(t.TempDir(), "worker"),
		pidFile: filepath.Join(testproc.JobFilesDir(t), "web.pid")}
	s.m = startManager(t, s.managerDataDir, s.managerPort, extra...)
	s.mc = connect(t, s.m.addr)
	s.ev = &testproc.EventLog{}
	s.ev.Follow(t, s.mc, 30*time.Second)
	id, token, err := s.mc.RegisterClusterNode(ctx, "w1", nil)
	require.NoError(t, err)
	s.nodeID, s.token = string(id), token
	s.worker = startWorker(t, token, s.m.addr, s.stateDir, s.wport)
	testproc.Eventually(t, 20*time.Second, "worker online", func() bool { return nodeConnected(t, s.mc, s.nodeID) })
	_, err = s.mc.CreateJob(ctx, webJob("web", s.pidFile, s.webPort))
	require.NoError(t, err)
	require.NoError(t, s.mc.StartJob(ctx, "web", "primary", id))
	testproc.Eventually(t, 20*time.Second, "the job answers HTTP", func() bool { return httpOK(s.webPort) })
	// The service answers before its worker has saved the job as running
	// (then it reports job_running): a state dir copied in between holds a
	// job still starting, which a restarted worker fails.
	testproc.Eventually(t, 20*time.Second, "the job reported running", func() bool {
		r, err := s.mc.JobByID(ctx, "web")
		return err == nil && lastRoleEntry(r, "primary").GetJobRunning() != nil
	})
	pid, ok := testproc.ReadPID(s.pidFile)
	require.True(t, ok)
	s.pid = pid
	return s
}

// jobStillRunning fails the test unless the job's first process runs and
// the record has its one instance on the node.
func (s *webSetup) jobStillRunning(t *testing.T, when string) {
	t.Helper()
	cur, _ := testproc.ReadPID(s.pidFile)
	require.Equal(t, s.pid, cur, "%s: the job was restarted", when)
	require.True(t, testproc.PIDAlive(s.pid) && httpOK(s.webPort), "%s: the job's process is gone", when)
	r, err := s.mc.JobByID(context.Background(), "web")
	require.NoError(t, err)
	require.Len(t, r.GetInstances(), 1, "%s: instances", when)
}

// TestE2E_CopiedWorkerIdentityRefused copies a running worker's
// --state-dir and starts a second worker on it at another address: while
// the first one's session is live the second is refused (exit code 5,
// both addresses named, a node_alert), and the first keeps its session
// and job. Once the first is gone for --worker-move-grace, the copy is
// taken for the host having moved, once: it re-adopts the job without a
// restart, and the first, started again, is the one refused.
func TestE2E_CopiedWorkerIdentityRefused(t *testing.T) {
	s := newWebSetup(t, "--worker-move-grace", "3s")
	copyState := filepath.Join(t.TempDir(), "copy")
	copyDir(t, s.stateDir, copyState)

	copyPort := testproc.FreePort(t)
	w2 := startWorker(t, s.token, s.m.addr, copyState, copyPort)
	code, exited := w2.Exited(60 * time.Second)
	require.True(t, exited, "the copy must be refused and exit:\n%s", w2.Output())
	require.Equal(t, 5, code, "exit code of a refused identity:\n%s", w2.Output())
	out := w2.Output()
	require.Contains(t, out, testproc.Addr(s.wport), "the refusal names the live worker's address")
	require.Contains(t, out, testproc.Addr(copyPort), "the refusal names the copy's address")
	testproc.Eventually(t, 10*time.Second, "identity conflict alert", func() bool {
		return s.ev.Has(func(e *managerpb.EventStreamEvent) bool {
			return e.GetNodeAlert().GetKind() == managerpb.NodeAlert_IDENTITY_CONFLICT
		})
	})
	require.True(t, strings.Contains(s.m.Output(), "refused a second worker presenting a live node's identity"), "a WARN on the manager")
	require.True(t, nodeConnected(t, s.mc, s.nodeID), "the first worker keeps its session")
	s.jobStillRunning(t, "after the copy was refused")

	// The host moves: the first worker is gone; the copy is accepted once
	// the old session has been down for the grace.
	s.worker.Kill()
	w2 = startWorker(t, s.token, s.m.addr, copyState, copyPort)
	// Online means the slot's session is the moved worker's (its port):
	// right after the kill the node may still read connected on the old
	// worker's session, which the manager has not yet seen end.
	testproc.Eventually(t, 60*time.Second, "the moved worker online", func() bool {
		if !w2.Running() {
			t.Fatalf("the moved worker exited:\n%s", w2.Output())
		}
		return slotServedFrom(t, s.mc, s.nodeID, copyPort) && nodeConnected(t, s.mc, s.nodeID)
	})
	testproc.Eventually(t, 20*time.Second, "the job re-adopted by the moved worker", func() bool {
		r, err := s.mc.JobByID(context.Background(), "web")
		return err == nil && len(r.GetInstances()) == 1
	})
	s.jobStillRunning(t, "after the move")

	// The original comes back: now it is the second identity, refused.
	w1 := startWorker(t, s.token, s.m.addr, s.stateDir, s.wport)
	code, exited = w1.Exited(60 * time.Second)
	require.True(t, exited && code == 5, "the old worker must be refused once the new one holds the node (code %d):\n%s", code, w1.Output())
	require.True(t, w2.Running() && nodeConnected(t, s.mc, s.nodeID), "no flip-flop: the moved worker keeps the node")
	s.jobStillRunning(t, "after the old worker came back")
}

// TestE2E_TerminatedSlotStaysTerminated terminates a cluster slot's node:
// its worker learns it when it registers again and exits 7; the node stays
// stopped.
func TestE2E_TerminatedSlotStaysTerminated(t *testing.T) {
	s := newWebSetup(t)
	require.NoError(t, s.mc.TerminateNode(context.Background(), client.NodeID(s.nodeID)))
	code, exited := s.worker.Exited(60 * time.Second)
	require.True(t, exited, "the terminated node's worker must be refused and exit:\n%s", s.worker.Output())
	require.Equal(t, 7, code, "%s", s.worker.Output())
	require.Contains(t, s.worker.Output(), "terminated by an operator")
	testproc.Eventually(t, 10*time.Second, "the job stopped with its node", func() bool { return !testproc.PIDAlive(s.pid) })
	nodes, err := s.mc.ListNodes(context.Background())
	require.NoError(t, err)
	require.Len(t, nodes, 1)
	require.Equal(t, managerpb.NodeLifecycle_NODE_LIFECYCLE_STOPPED, nodes[0].GetState())
	require.False(t, nodes[0].GetConnected())
}

// TestE2E_CopiedManagerDataDirContested runs two managers on copies of
// one data dir: they both dial the worker, and the one whose session the
// other takes says so (ERROR, a node_alert, the node shown contested)
// instead of silently leaving the node disconnected. The job keeps
// running; when the copy stops, the worker registers with its manager
// again and the node is no longer contested.
func TestE2E_CopiedManagerDataDirContested(t *testing.T) {
	s := newWebSetup(t)
	s.m.Stop()
	copyData := filepath.Join(t.TempDir(), "copy")
	copyDir(t, s.managerDataDir, copyData)
	s.m = startManager(t, s.managerDataDir, s.managerPort)
	testproc.Eventually(t, 30*time.Second, "the worker back on its manager", func() bool { return nodeConnected(t, s.mc, s.nodeID) })
	rogue := startManager(t, copyData, testproc.FreePort(t))

	contested := func() bool {
		nodes, err := s.mc.ListNodes(context.Background())
		return err == nil && len(nodes) == 1 && nodes[0].GetContested() != ""
	}
	testproc.Eventually(t, 30*time.Second, "the node shown contested", contested)
	require.Contains(t, s.m.Output(), "worker session taken by a manager outside this cluster")
	testproc.Eventually(t, 10*time.Second, "contested alert", func() bool {
		return s.ev.Has(func(e *managerpb.EventStreamEvent) bool {
			return e.GetNodeAlert().GetKind() == managerpb.NodeAlert_CONTESTED
		})
	})
	require.True(t, testproc.PIDAlive(s.pid), "the job keeps running")

	rogue.Stop()
	testproc.Eventually(t, 60*time.Second, "the worker back on its manager, not contested", func() bool {
		return nodeConnected(t, s.mc, s.nodeID) && !contested()
	})
	s.jobStillRunning(t, "after the copy stopped")
}

// slotServedFrom reports whether node id's cluster slot has an active
// session with the worker registered on port.
func slotServedFrom(t *testing.T, m *client.NorskManager, id string, port int) bool {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	slots, err := m.ListClusterNodes(ctx)
	if err != nil {
		return false
	}
	for _, sl := range slots {
		if sl.GetNodeId().GetNodeId() == id {
			return sl.GetActive() && int(sl.GetPort()) == port
		}
	}
	return false
}
