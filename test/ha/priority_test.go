package ha

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/norsk-oss/norsk-manager/client"
	"github.com/norsk-oss/norsk-manager/proto/commonpb"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
	"github.com/norsk-oss/norsk-manager/test/testproc"
)

// TestHA_PreemptionSurvivesLeaderKill (issue 13 §3, §4): three managers and
// one worker of 2 units running two LOW priority jobs. A HIGH priority job
// is created and the Raft leader, whose engine decides the preemption, is
// SIGKILLed at once: whether its PreemptJob committed or not, the new
// leader carries on from the records. Afterwards the HIGH job runs, exactly
// one LOW job was stopped (one process each for the HIGH job and the
// other LOW job, none for the stopped one), and no second preemption
// happened.
func TestHA_PreemptionSurvivesLeaderKill(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cluster of real managers and a worker")
	}
	ctx := context.Background()
	c := testproc.NewCluster(t, 3)
	c.StartAll()
	cl := clientOf(t, 10*time.Second, c.Managers...)
	var nodeID client.NodeID
	var token string
	testproc.Await(t, 60*time.Second, "slot registered", func() error {
		var err error
		nodeID, token, err = cl.RegisterClusterNode(ctx, "prio-w", nil)
		return err
	})
	testproc.StartWorker(t, "prio-w", string(nodeID), token, c.URLs(), "--capacity", "2")
	testproc.Await(t, 60*time.Second, "node started", func() error {
		if !testproc.NodeStarted(cl, string(nodeID)) {
			return fmt.Errorf("not connected and STARTED")
		}
		return nil
	})

	// Each job sleeps for a distinct number of seconds: its process is
	// found by that argument.
	base := 60_000_000 + os.Getpid()%1000*1000
	ids := []string{"low-a", "low-b", "news"}
	arg := func(i int) string { return fmt.Sprint(base + i) }
	job := func(i int, band managerpb.PriorityBand) *managerpb.Job {
		return &managerpb.Job{JobId: &commonpb.JobId{JobId: ids[i]},
			Services:      []*commonpb.Service{{Name: "idle", Command: "exec sleep " + arg(i), Restart: commonpb.Service_NEVER}},
			AutoPlacement: &managerpb.AutoPlacement{Requirements: &managerpb.JobRequirements{RequiredCapacity: 1, PriorityBand: band}}}
	}
	t.Cleanup(func() {
		for i := range ids {
			testproc.KillProcessesMentioning("sleep\x00" + arg(i) + "\x00")
		}
	})
	for i := range 2 {
		createJobAcked(t, cl, job(i, managerpb.PriorityBand_PRIORITY_BAND_LOW))
	}
	testproc.Await(t, 60*time.Second, "both LOW jobs run", func() error {
		for i := range 2 {
			if got := processesWithArgs("sleep", arg(i)); got != 1 {
				return fmt.Errorf("%s runs %d processes", ids[i], got)
			}
		}
		return nil
	})

	leader := c.Leader(30 * time.Second)
	createJobAcked(t, cl, job(2, managerpb.PriorityBand_PRIORITY_BAND_HIGH))
	t.Logf("SIGKILL leader %s as it preempts", leader.Name)
	leader.Kill()

	testproc.Await(t, 90*time.Second, "news runs, one LOW job stopped, the other running", func() error {
		if got := processesWithArgs("sleep", arg(2)); got != 1 {
			return fmt.Errorf("news runs %d processes, want 1", got)
		}
		running := 0
		for i := range 2 {
			switch got := processesWithArgs("sleep", arg(i)); got {
			case 0:
			case 1:
				running++
			default:
				return fmt.Errorf("%s runs %d processes", ids[i], got)
			}
		}
		if running != 1 {
			return fmt.Errorf("%d LOW jobs run, want 1", running)
		}
		return nil
	})
	// The records agree, and say one preemption.
	preempted := 0
	for i := range 2 {
		r, err := cl.JobByID(ctx, client.JobID(ids[i]))
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range r.GetJob().GetHistoryEntry() {
			if e.GetJobStopping().GetReason() == managerpb.JobHistoryJobStopping_JOB_STOPPED_PREEMPTED {
				preempted++
			}
		}
	}
	if preempted != 1 {
		t.Fatalf("%d preemptions in the LOW jobs' histories, want 1", preempted)
	}
}
