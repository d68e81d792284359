package ha

import (
	"context"
	"fmt"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/norsk-oss/norsk-manager/actors/roles"
	"github.com/norsk-oss/norsk-manager/client"
	"github.com/norsk-oss/norsk-manager/proto/commonpb"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
	"github.com/norsk-oss/norsk-manager/test/testproc"
)

// TestHA_MoveSurvivesFrozenLeader (issue 13 §2): as
// TestHA_MoveSurvivesLeaderKill, but the leader driving a drain's moves is
// frozen (SIGSTOP) instead of killed, the other managers elect a leader
// that finishes the moves, and the old leader is thawed: whatever steps it
// had decided before the freeze and sends when it runs again (a move's
// start, hand-over, stop, a drain's begin) must change nothing. In the end
// every job has one instance, on the new node, no move left, one process,
// and no source stopped before its target ran.
func TestHA_MoveSurvivesFrozenLeader(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cluster of real managers and workers")
	}
	ctx := context.Background()
	c := testproc.NewCluster(t, 3)
	c.StartAll()
	cl := clientOf(t, 10*time.Second, c.Managers...)
	worker := func(cl *client.NorskManager, name string) client.NodeID {
		var nodeID client.NodeID
		var token string
		testproc.Await(t, 60*time.Second, "slot "+name+" registered", func() error {
			var err error
			nodeID, token, err = cl.RegisterClusterNode(ctx, name, nil)
			return err
		})
		testproc.StartWorker(t, name, string(nodeID), token, c.URLs(), "--capacity", "100")
		testproc.Await(t, 60*time.Second, "node "+name+" started", func() error {
			if !testproc.NodeStarted(cl, string(nodeID)) {
				return fmt.Errorf("not connected and STARTED")
			}
			return nil
		})
		return nodeID
	}
	w1 := worker(cl, "fw1")

	const n = 8
	base := 61_000_000 + os.Getpid()%1000*1000
	arg := func(i int) string { return fmt.Sprint(base + i) }
	id := func(i int) string { return fmt.Sprintf("fz-%02d", i) }
	t.Cleanup(func() {
		for i := range n {
			testproc.KillProcessesMentioning("sleep\x00" + arg(i) + "\x00")
		}
	})
	for i := range n {
		createJobAcked(t, cl, &managerpb.Job{JobId: &commonpb.JobId{JobId: id(i)},
			Services:      []*commonpb.Service{{Name: "idle", Command: "exec sleep " + arg(i), Restart: commonpb.Service_NEVER}},
			AutoPlacement: &managerpb.AutoPlacement{Requirements: &managerpb.JobRequirements{RequiredCapacity: 1}}})
	}
	runsOn := func(cl *client.NorskManager, i int, node client.NodeID) error {
		r, err := cl.JobByID(ctx, client.JobID(id(i)))
		if err != nil {
			return err
		}
		if len(r.GetMigrations()) > 0 {
			return fmt.Errorf("%s still moving: %v", id(i), r.GetMigrations())
		}
		if got := len(r.GetInstances()); got != 1 {
			return fmt.Errorf("%s has %d instances, want 1", id(i), got)
		}
		in := r.GetInstances()[0]
		if in.GetNodeId().GetNodeId() != string(node) || roles.LogicalRole(in.GetJobKey().GetRole()) != "primary" {
			return fmt.Errorf("%s runs %s on %s", id(i), in.GetJobKey().GetRole(), in.GetNodeId().GetNodeId())
		}
		if got := processesWithArgs("sleep", arg(i)); got != 1 {
			return fmt.Errorf("%s runs %d processes, want 1", id(i), got)
		}
		return nil
	}
	all := func(cl *client.NorskManager, node client.NodeID) func() error {
		return func() error {
			for i := range n {
				if err := runsOn(cl, i, node); err != nil {
					return err
				}
			}
			return nil
		}
	}
	testproc.Await(t, 90*time.Second, "every job runs on fw1", all(cl, w1))
	w2 := worker(cl, "fw2")

	testproc.Await(t, 60*time.Second, "DrainNode(fw1) acknowledged", func() error { return cl.DrainNode(ctx, w1, "frozen leader test") })
	testproc.Await(t, 30*time.Second, "a move in progress", func() error {
		for i := range n {
			if r, err := cl.JobByID(ctx, client.JobID(id(i))); err == nil && len(r.GetMigrations()) > 0 {
				return nil
			}
		}
		return fmt.Errorf("no move begun yet")
	})
	leader := c.Leader(30 * time.Second)
	proc := leader.Proc()
	if err := proc.Cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = proc.Cmd.Process.Signal(syscall.SIGCONT) })
	var others []*testproc.Manager
	for _, m := range c.Managers {
		if m != leader {
			others = append(others, m)
		}
	}
	t.Logf("froze leader %s while it moved", leader.Name)
	ocl := clientOf(t, 10*time.Second, others...)
	testproc.Await(t, 120*time.Second, "the new leader moved every job to fw2", all(ocl, w2))

	if err := proc.Cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	testproc.Await(t, 60*time.Second, "the thawed manager follows the new leader", func() error {
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		resp, err := leader.Members(cctx)
		if err != nil {
			return err
		}
		if resp.GetLeader() == "" || resp.GetLeader() == leader.Name {
			return fmt.Errorf("it sees leader %q", resp.GetLeader())
		}
		return nil
	})
	// Passes ran after the thaw (a job created now is placed), and what the
	// thawed manager sent on waking changed nothing.
	createJobAcked(t, cl, &managerpb.Job{JobId: &commonpb.JobId{JobId: "fz-barrier"},
		Services:      []*commonpb.Service{{Name: "idle", Command: "exec sleep " + fmt.Sprint(base+999), Restart: commonpb.Service_NEVER}},
		AutoPlacement: &managerpb.AutoPlacement{Requirements: &managerpb.JobRequirements{RequiredCapacity: 1}}})
	t.Cleanup(func() { testproc.KillProcessesMentioning("sleep\x00" + fmt.Sprint(base+999) + "\x00") })
	testproc.Await(t, 60*time.Second, "the barrier job runs", func() error {
		if got := processesWithArgs("sleep", fmt.Sprint(base+999)); got != 1 {
			return fmt.Errorf("%d processes of the barrier job", got)
		}
		return nil
	})
	if err := all(cl, w2)(); err != nil {
		t.Fatal(err)
	}
	for i := range n {
		r, err := cl.JobByID(ctx, client.JobID(id(i)))
		if err != nil {
			t.Fatal(err)
		}
		target := r.GetInstances()[0].GetJobKey().GetRole()
		var running, stopped time.Time
		for _, e := range r.GetJob().GetHistoryEntry() {
			if x := e.GetJobRunning(); x.GetRole() == target && running.IsZero() {
				running = x.GetTimestamp().AsTime()
			}
			if x := e.GetJobStopped(); x.GetRole() == "primary" {
				stopped = x.GetTimestamp().AsTime()
			}
		}
		if running.IsZero() || stopped.IsZero() || stopped.Before(running) {
			t.Errorf("%s: source stopped at %v, target %s running at %v: off air in between", id(i), stopped, target, running)
		}
	}
}
