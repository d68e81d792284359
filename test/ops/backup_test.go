package ops

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/norsk-oss/norsk-manager/test/testproc"
)

// TestBackup_SingleManager_SaveUnderLoadRestoreStart: a single manager
// with a worker running a job and two clients writing jobs one after
// another. A snapshot is saved with norsk-ctl while they write; the
// writers go on, then the manager is SIGKILLed for good. The snapshot is
// restored into a new data dir and a manager started on it at the same
// address: it holds every job acknowledged before the save began and a
// consistent prefix of the rest; the worker's job, which the snapshot
// knows, is adopted with its process untouched; a raw event-stream client
// resuming from the old manager's head (newer than the snapshot) gets a
// stream_reset, and so does the client library's subscription that
// followed the old manager.
func TestBackup_SingleManager_SaveUnderLoadRestoreStart(t *testing.T) {
	if testing.Short() {
		t.Skip("starts real managers and a worker")
	}
	addr := testproc.Addr(testproc.FreePort(t))
	old := startSingle(t, "manager", filepath.Join(t.TempDir(), "data"), addr)
	cl := managerClient(t, addr)
	job := startWebJob(t, cl, addr, "w1")
	ev := &testproc.EventLog{}
	ev.Follow(t, cl, 30*time.Second)

	ws := startWriters(t, cl, 2)
	awaitAcked(t, ws, 40)
	before := ackedBefore(ws)
	file, applied := saveSnapshot(t, addr)
	awaitAcked(t, ws, 40) // the writers went on during and after the save
	for _, w := range ws {
		w.halt()
	}
	oldHead := eventHead(t, addr)
	old.Kill()

	newDir := filepath.Join(t.TempDir(), "restored")
	out := mustRun(t, "restore", "norsk-manager", "restore", "--from", file, "--data-dir", newDir)
	if !strings.Contains(out, fmt.Sprintf("applied index  %d", applied)) {
		t.Errorf("restore output does not name the snapshot's applied index %d:\n%s", applied, out)
	}
	startSingle(t, "restored", newDir, addr)
	cl2 := managerClient(t, addr)
	n := checkRestored(t, cl2, ws, before)
	t.Logf("the restored manager has %d of the writers' jobs (%d acknowledged before the save, %d in all)",
		n, len(before[0])+len(before[1]), totalAcked(ws))
	job.requireAdopted(t, cl2)
	requireResetOnResume(t, addr, oldHead)
	testproc.Eventually(t, 30*time.Second, "the subscription that followed the old manager reset", func() bool { return hasReset(ev) })
}

// TestBackup_ClusterFollower_SaveUnderLoadRestoreJoin: a snapshot saved
// from a follower of a three-manager cluster while clients write holds
// every write acknowledged before the save began. After the whole cluster
// is gone, the snapshot restored as the first manager of a new cluster
// (--bootstrap-expect 1) serves it alone; a fresh manager joins it with
// --join and serves the same data; an event client of the old cluster
// gets a stream_reset.
func TestBackup_ClusterFollower_SaveUnderLoadRestoreJoin(t *testing.T) {
	if testing.Short() {
		t.Skip("starts real managers")
	}
	c := testproc.NewCluster(t, 3)
	c.StartAll()
	leader := c.Leader(60 * time.Second)
	var follower *testproc.Manager
	for _, m := range c.Managers {
		if m != leader {
			follower = m
			break
		}
	}
	ws := startWriters(t, c.Client(), 2)
	awaitAcked(t, ws, 40)
	before := ackedBefore(ws)
	file, applied := saveSnapshot(t, follower.APIAddr)
	awaitAcked(t, ws, 40)
	for _, w := range ws {
		w.halt()
	}
	oldHead := eventHead(t, leader.APIAddr)
	for _, m := range c.Managers {
		m.Kill()
	}

	nc := testproc.NewCluster(t, 1)
	r1 := nc.Managers[0]
	out := mustRun(t, "restore", "norsk-manager", "restore", "--from", file, "--data-dir", r1.DataDir,
		"--bootstrap-expect", "1", "--name", r1.Name, "--raft-addr", r1.RaftAddr)
	if !strings.Contains(out, "the first manager of a new cluster: "+r1.Name) || !strings.Contains(out, fmt.Sprintf("applied index  %d", applied)) {
		t.Errorf("restore output:\n%s", out)
	}
	nc.StartAll() // --bootstrap-expect 1: it has Raft state, so it does not bootstrap
	cl := managerClient(t, r1.APIAddr)
	n := checkRestored(t, cl, ws, before)
	t.Logf("the restored manager has %d of the writers' jobs (%d acknowledged before the save, %d in all)",
		n, len(before[0])+len(before[1]), totalAcked(ws))
	requireResetOnResume(t, r1.APIAddr, oldHead)

	m2 := nc.AddManager("m2")
	cl2 := managerClient(t, m2.APIAddr)
	for _, ids := range before {
		for _, id := range []string{ids[0], ids[len(ids)-1]} {
			if !jobExists(t, cl2, id) {
				t.Errorf("%s is missing on the manager that joined the restored one", id)
			}
		}
	}
	requireResetOnResume(t, m2.APIAddr, oldHead)
}
