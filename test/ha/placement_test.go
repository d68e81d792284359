package ha

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/norsk-oss/norsk-manager/client"
	"github.com/norsk-oss/norsk-manager/proto/commonpb"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
	"github.com/norsk-oss/norsk-manager/test/testproc"
)

// TestHA_PlacementSurvivesLeaderKill: three managers, two workers, and
// auto-placed jobs created while the Raft leader (whose placement engine
// is placing them) is SIGKILLed half way: afterwards every job has exactly
// one instance, and exactly one process runs for each on the workers. The
// new leader's engine placed the rest without a StartJob from anyone.
func TestHA_PlacementSurvivesLeaderKill(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cluster of real managers and workers")
	}
	ctx := context.Background()
	c := testproc.NewCluster(t, 3)
	c.StartAll()
	cl := clientOf(t, 10*time.Second, c.Managers...)
	for i := range 2 {
		name := fmt.Sprintf("pw%d", i+1)
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
	}

	// Each job sleeps for a distinct number of seconds: its process is
	// found by that argument.
	const n = 40
	base := 50_000_000 + os.Getpid()%1000*1000
	arg := func(i int) string { return fmt.Sprint(base + i) }
	job := func(i int) *managerpb.Job {
		return &managerpb.Job{JobId: &commonpb.JobId{JobId: fmt.Sprintf("auto-%02d", i)},
			Services:      []*commonpb.Service{{Name: "idle", Command: "exec sleep " + arg(i), Restart: commonpb.Service_NEVER}},
			AutoPlacement: &managerpb.AutoPlacement{Requirements: &managerpb.JobRequirements{RequiredCapacity: 1}}}
	}
	t.Cleanup(func() {
		for i := range n {
			testproc.KillProcessesMentioning("sleep\x00" + arg(i) + "\x00")
		}
	})
	for i := range n / 2 {
		createJobAcked(t, cl, job(i))
	}
	leader := c.Leader(30 * time.Second)
	t.Logf("SIGKILL leader %s while it places", leader.Name)
	leader.Kill()
	for i := n / 2; i < n; i++ {
		createJobAcked(t, cl, job(i))
	}

	testproc.Await(t, 90*time.Second, "every job has exactly one instance and one process", func() error {
		for i := range n {
			id := fmt.Sprintf("auto-%02d", i)
			r, err := cl.JobByID(ctx, client.JobID(id))
			if err != nil {
				return fmt.Errorf("JobById %s: %w", id, err)
			}
			if got := len(r.GetInstances()); got != 1 {
				return fmt.Errorf("job %s has %d instances, want 1", id, got)
			}
			if got := processesWithArgs("sleep", arg(i)); got != 1 {
				return fmt.Errorf("job %s runs %d processes, want 1", id, got)
			}
		}
		return nil
	})
}

// processesWithArgs counts the processes whose command line is exactly
// args.
func processesWithArgs(args ...string) int {
	want := []byte{}
	for _, a := range args {
		want = append(append(want, a...), 0)
	}
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return -1
	}
	count := 0
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err == nil && bytes.Equal(b, want) {
			count++
		}
	}
	return count
}
