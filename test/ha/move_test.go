package ha

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/norsk-oss/norsk-manager/actors/roles"
	"github.com/norsk-oss/norsk-manager/client"
	"github.com/norsk-oss/norsk-manager/proto/commonpb"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
	"github.com/norsk-oss/norsk-manager/test/testproc"
)

// TestHA_MoveSurvivesLeaderKill (issue 13 §2, §4): three managers; ten
// auto-placed jobs run on worker mw1; mw2 joins and mw1 is drained, which
// moves every job make-before-break; the Raft leader, whose engine drives
// the moves, is SIGKILLed while they are in progress. The moves are in
// the job records, so the new leader finishes (or backs out) each: in the
// end every job has exactly one instance, on mw2, no move left, and one
// process; and no job's source stopped before its target ran.
func TestHA_MoveSurvivesLeaderKill(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cluster of real managers and workers")
	}
	ctx := context.Background()
	c := testproc.NewCluster(t, 3)
	c.StartAll()
	cl := clientOf(t, 10*time.Second, c.Managers...)
	worker := func(name string) client.NodeID {
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
	w1 := worker("mw1")

	const n = 10
	base := 60_000_000 + os.Getpid()%1000*1000
	arg := func(i int) string { return fmt.Sprint(base + i) }
	id := func(i int) string { return fmt.Sprintf("mv-%02d", i) }
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
	runsOn := func(i int, node client.NodeID, logical string) error {
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
		if in.GetNodeId().GetNodeId() != string(node) || roles.LogicalRole(in.GetJobKey().GetRole()) != logical {
			return fmt.Errorf("%s runs %s on %s", id(i), in.GetJobKey().GetRole(), in.GetNodeId().GetNodeId())
		}
		if got := processesWithArgs("sleep", arg(i)); got != 1 {
			return fmt.Errorf("%s runs %d processes, want 1", id(i), got)
		}
		return nil
	}
	testproc.Await(t, 90*time.Second, "every job runs on mw1", func() error {
		for i := range n {
			if err := runsOn(i, w1, "primary"); err != nil {
				return err
			}
		}
		return nil
	})
	w2 := worker("mw2")

	testproc.Await(t, 60*time.Second, "DrainNode(mw1) acknowledged", func() error { return cl.DrainNode(ctx, w1, "move test") })
	testproc.Await(t, 30*time.Second, "a move in progress", func() error {
		for i := range n {
			if r, err := cl.JobByID(ctx, client.JobID(id(i))); err == nil && len(r.GetMigrations()) > 0 {
				return nil
			}
		}
		return fmt.Errorf("no move begun yet")
	})
	leader := c.Leader(30 * time.Second)
	leader.Kill()
	moving := 0
	for i := range n { // read after the kill: a lower bound of the moves it interrupted
		if r, err := cl.JobByID(ctx, client.JobID(id(i))); err == nil && len(r.GetMigrations()) > 0 {
			moving++
		}
	}
	t.Logf("SIGKILLed leader %s while it moved; %d of %d moves still in progress after it", leader.Name, moving, n)

	testproc.Await(t, 120*time.Second, "every job moved to mw2: one instance, one process, no move left", func() error {
		for i := range n {
			if err := runsOn(i, w2, "primary"); err != nil {
				return err
			}
		}
		return nil
	})
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
