package e2e

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/norsk-oss/norsk-manager/client"
	"github.com/norsk-oss/norsk-manager/proto/commonpb"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
	"github.com/norsk-oss/norsk-manager/test/testproc"
)

// restartCycles is how many stop → start cycles
// TestE2E_StopThenStartAtOnce_AcrossManagers runs.
const restartCycles = 30

// slowStopJob is a job whose shell writes its pid to pidFile and, on
// SIGTERM, takes about a second to exit: long enough that the node grain's
// stop re-send (every 3 s) often catches the instance still stopping, so
// the worker answers two job_stopped for one instance, the second one
// right after the first.
func slowStopJob(id, pidFile string) *managerpb.Job {
	return &managerpb.Job{
		JobId: &commonpb.JobId{JobId: id},
		Services: []*commonpb.Service{{
			Name:    "slow",
			Restart: commonpb.Service_NEVER,
			Command: fmt.Sprintf("echo $$ > %s; trap 'sleep 1; exit 0' TERM; while :; do sleep 0.2; done", pidFile),
		}},
	}
}

// TestE2E_StopThenStartAtOnce_AcrossManagers is the freeze bench's false
// answer as a plain test: a job is stopped through one manager of a
// three-manager cluster and, the moment its record lists no instance,
// started again on the same node through another, restartCycles times.
// The worker's job_stopped of the earlier instance (the answer to a
// re-sent stop, which arrives after the first) must not be taken for the
// end of the instance being started: every acknowledged StartJob leaves a
// recorded instance, with a new instance id, whose process runs, and every
// StopJob finds the instance (it used to answer FailedPrecondition "has no
// instance").
func TestE2E_StopThenStartAtOnce_AcrossManagers(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a three-manager cluster and a worker")
	}
	ctx := context.Background()
	c := testproc.NewCluster(t, 3)
	c.StartAll()
	cls := make([]*client.NorskManager, len(c.Managers))
	for i, m := range c.Managers {
		cls[i] = m.Client()
	}
	cl := c.Client()
	var node client.NodeID
	var token string
	testproc.Await(t, 60*time.Second, "slot registered", func() error {
		var err error
		node, token, err = cl.RegisterClusterNode(ctx, "w1", nil)
		return err
	})
	testproc.StartWorker(t, "w1", string(node), token, c.URLs())
	testproc.Eventually(t, 60*time.Second, "node started", func() bool { return testproc.NodeStarted(cl, string(node)) })
	const id = "restart"
	pidFile := filepath.Join(testproc.JobFilesDir(t), "restart.pid")
	testproc.Await(t, 60*time.Second, "job created", func() error {
		_, err := cl.CreateJob(ctx, slowStopJob(id, pidFile))
		if status.Code(err) == codes.AlreadyExists {
			return nil
		}
		return err
	})

	seen := map[string]int{} // instance id → cycle
	waits := 0               // StartJobs refused while the previous instance was still stopping
	for cycle := range restartCycles {
		starter, stopper := cls[cycle%3], cls[(cycle+1)%3]
		starterName, stopperName := c.Managers[cycle%3].Name, c.Managers[(cycle+1)%3].Name
		old, _ := testproc.ReadPID(pidFile)

		// Start at once: AlreadyExists only while the record still lists
		// the previous instance (its stop not confirmed yet); asked again
		// every 5 ms, so the start lands right after the confirmation, as
		// a late second job_stopped would.
		deadline := time.Now().Add(30 * time.Second)
		for {
			err := starter.StartJob(ctx, id, "primary", node)
			if err == nil {
				break
			}
			code := status.Code(err)
			if code != codes.AlreadyExists && code != codes.Unavailable && code != codes.DeadlineExceeded || time.Now().After(deadline) {
				t.Fatalf("cycle %d: StartJob via %s of the stopped job: %v", cycle, starterName, err)
			}
			if code == codes.AlreadyExists {
				waits++
			}
			time.Sleep(5 * time.Millisecond) // polling with a deadline
		}
		r, err := starter.JobByID(ctx, id)
		if err != nil {
			t.Fatalf("cycle %d: JobById via %s: %v", cycle, starterName, err)
		}
		in := instanceOn(r, string(node))
		if in == nil {
			t.Fatalf("cycle %d: StartJob via %s acknowledged, but the record lists no instance: %v", cycle, starterName, r.GetInstances())
		}
		iid := in.GetJobKey().GetInstanceId()
		if iid == "" {
			t.Fatalf("cycle %d: the recorded instance has no instance id: %v", cycle, in)
		}
		if prev, ok := seen[iid]; ok {
			t.Fatalf("cycle %d: instance id %s was already the id of cycle %d", cycle, iid, prev)
		}
		seen[iid] = cycle
		var pid int
		testproc.Eventually(t, 30*time.Second, fmt.Sprintf("cycle %d: a new process runs", cycle), func() bool {
			p, ok := testproc.ReadPID(pidFile)
			pid = p
			return ok && p != old && testproc.PIDAlive(p)
		})
		testproc.Await(t, 30*time.Second, fmt.Sprintf("cycle %d: instance %s still recorded", cycle, iid), func() error {
			r, err := starter.JobByID(ctx, id)
			if err != nil {
				return err
			}
			in := instanceOn(r, string(node))
			switch {
			case in == nil:
				t.Fatalf("cycle %d: the instance the worker runs (pid %d) is no longer recorded: %v", cycle, pid, r.GetInstances())
			case in.GetJobKey().GetInstanceId() != iid:
				t.Fatalf("cycle %d: recorded instance id changed from %s to %s", cycle, iid, in.GetJobKey().GetInstanceId())
			}
			return nil
		})

		// Stop through another manager: it must find the instance.
		testproc.Await(t, 30*time.Second, fmt.Sprintf("cycle %d: StopJob via %s acknowledged", cycle, stopperName), func() error {
			err := stopper.StopJob(ctx, id, "primary", node)
			switch status.Code(err) {
			case codes.OK:
				return nil
			case codes.Unavailable, codes.DeadlineExceeded:
				return err
			}
			t.Fatalf("cycle %d: StopJob via %s of the running instance %s: %v", cycle, stopperName, iid, err)
			return nil
		})
		testproc.Eventually(t, 30*time.Second, fmt.Sprintf("cycle %d: process %d gone", cycle, pid), func() bool {
			return !testproc.PIDAlive(pid)
		})
	}
	t.Logf("%d cycles; %d StartJobs refused with AlreadyExists while the previous instance was stopping", restartCycles, waits)
}

// instanceOn returns r's instance on node, or nil.
func instanceOn(r *managerpb.JobByIdResponse, node string) *managerpb.RunningJob {
	for _, in := range r.GetInstances() {
		if in.GetNodeId().GetNodeId() == node {
			return in
		}
	}
	return nil
}
