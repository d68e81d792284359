package ops

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/norsk-oss/norsk-manager/proto/managerpb"
	"github.com/norsk-oss/norsk-manager/test/testproc"
)

// TestRecover_TwoOfThreeLost: a three-manager cluster with a worker
// running a job and jobs written through it. Once the survivor-to-be has
// applied every write, the two other managers are SIGKILLed for good; the
// survivor has no quorum and serves nothing. norsk-manager recover refuses
// to run while it runs; once it is killed too, recover makes it a cluster
// of one. Restarted with its usual flags it serves alone with every
// acknowledged job, takes writes, has the worker's session back with the
// job's process untouched, resets event clients of the old cluster, and a
// fresh manager joins it and serves the same data.
func TestRecover_TwoOfThreeLost(t *testing.T) {
	if testing.Short() {
		t.Skip("starts real managers and a worker")
	}
	c := testproc.NewCluster(t, 3)
	c.StartAll()
	cl := c.Client()
	job := startWebJob(t, cl, c.URLs(), "w1")
	ws := startWriters(t, cl, 2)
	awaitAcked(t, ws, 60)
	for _, w := range ws {
		w.halt()
	}
	acked := ackedBefore(ws)

	leader := c.Leader(60 * time.Second)
	survivor := c.Managers[0]
	if survivor == leader {
		survivor = c.Managers[1]
	}
	// The survivor must hold what was acknowledged: a majority may have
	// committed writes it has not received (recover cannot bring those
	// back; docs/design/backup.md).
	commit := memberOf(t, leader, leader.Name).GetCommitIndex()
	testproc.Await(t, 30*time.Second, survivor.Name+" applied the leader's commit index", func() error {
		if a := memberOf(t, survivor, survivor.Name).GetAppliedIndex(); a < commit {
			return fmt.Errorf("applied %d of %d", a, commit)
		}
		return nil
	})
	oldHead := eventHead(t, survivor.APIAddr)
	var lost []string
	for _, m := range c.Managers {
		if m != survivor {
			m.Kill()
			lost = append(lost, m.Name)
		}
	}
	testproc.Eventually(t, 30*time.Second, survivor.Name+" not serving without a quorum", func() bool { return !testproc.Serving(survivor.APIAddr) })

	out, code := run(t, "recover-in-use", "norsk-manager", "recover", "--data-dir", survivor.DataDir, "--name", survivor.Name)
	if code == 0 || !strings.Contains(out, "is a manager still running on this data dir?") {
		t.Fatalf("recover on a running manager's data dir: exit %d:\n%s", code, out)
	}
	survivor.Kill()
	out = mustRun(t, "recover", "norsk-manager", "recover", "--data-dir", survivor.DataDir, "--name", survivor.Name)
	for _, want := range []string{survivor.Name + " (Raft address " + survivor.RaftAddr + ") is now a cluster of one", "removed        " + strings.Join(lost, ", ")} {
		if !strings.Contains(out, want) {
			t.Errorf("recover output lacks %q:\n%s", want, out)
		}
	}

	survivor.Start()
	survivor.WaitServing(60 * time.Second)
	scl := managerClient(t, survivor.APIAddr)
	for _, ids := range acked {
		for _, id := range ids {
			if !jobExists(t, scl, id) {
				t.Errorf("%s was acknowledged but is missing after the recovery", id)
			}
		}
	}
	if _, err := scl.CreateJob(context.Background(), testproc.WebJob("after-recovery", "/dev/null", 1)); err != nil {
		t.Errorf("a write after the recovery: %v", err)
	}
	job.requireAdopted(t, scl)
	requireResetOnResume(t, survivor.APIAddr, oldHead)

	m4 := c.AddManager("m4")
	cl4 := managerClient(t, m4.APIAddr)
	for _, id := range []string{acked[0][0], acked[1][len(acked[1])-1], "after-recovery", job.id} {
		if !jobExists(t, cl4, id) {
			t.Errorf("%s is missing on the manager that joined the recovered one", id)
		}
	}
	testproc.Await(t, 30*time.Second, "voters "+survivor.Name+" and m4", func() error {
		var voters []string
		for _, mb := range membersOf(t, survivor) {
			if mb.GetVoter() {
				voters = append(voters, mb.GetName())
			}
		}
		slices.Sort(voters)
		if want := []string{survivor.Name, "m4"}; !slices.Equal(voters, want) {
			return fmt.Errorf("voters %v, want %v", voters, want)
		}
		return nil
	})
}

// membersOf returns the cluster members as m sees them.
func membersOf(t *testing.T, m *testproc.Manager) []*managerpb.ClusterMember {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := m.Members(ctx)
	if err != nil {
		t.Fatalf("ClusterMembers on %s: %v", m.Name, err)
	}
	return resp.GetMembers()
}

// memberOf returns how m sees the member named name.
func memberOf(t *testing.T, m *testproc.Manager, name string) *managerpb.ClusterMember {
	t.Helper()
	for _, mb := range membersOf(t, m) {
		if mb.GetName() == name {
			return mb
		}
	}
	t.Fatalf("%s does not list %s", m.Name, name)
	return nil
}
