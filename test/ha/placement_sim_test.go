package ha

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/norsk-oss/norsk-manager/client"
	"github.com/norsk-oss/norsk-manager/proto/commonpb"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
	"github.com/norsk-oss/norsk-manager/test/simfleet"
	"github.com/norsk-oss/norsk-manager/test/testproc"
)

// TestHA_PlacementSimFleet_LeaderKill500 (issue 11 §4): three managers, a
// simulated fleet of 40 nodes (real worker agents in this process whose
// runtime runs nothing, test/simfleet) and 500 auto-placed jobs; the Raft
// leader, whose engine is placing them, is SIGKILLed once the fleet has
// received its first starts, and the second half of the jobs is created
// after the kill. Afterwards every job has exactly one instance per role
// on the managers and runs on exactly one node, and no node ever received
// a start of a (job, role) while it ran anywhere (the fleet's ledger: a
// stronger check than the end state). The new leader's engine must have
// resumed (the jobs created after the kill run); the gap between the kill
// and the first start after it is logged, not asserted: wall-clock bounds
// are measured by go run ./test/bench, never asserted in tests.
func TestHA_PlacementSimFleet_LeaderKill500(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cluster of real managers and a simulated fleet")
	}
	const nodes, jobs = 40, 500
	ctx := context.Background()
	c := testproc.NewCluster(t, 3)
	c.StartAll()
	cl := clientOf(t, 10*time.Second, c.Managers...)
	fleet, err := simfleet.Start(ctx, simfleet.Config{ManagerURLs: strings.Split(c.URLs(), ","), Nodes: nodes, Capacity: 50,
		Zones: []string{"zone-a", "zone-b"}, StateDir: t.TempDir(), Name: "simha", Logger: warnLogger(t),
		Register: func(ctx context.Context, name string, tags map[string]string) (string, string, error) {
			return registerSlotRetrying(ctx, cl, name, tags)
		}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(fleet.Close)
	testproc.Await(t, 90*time.Second, "every simulated node STARTED", func() error { return nodesStarted(cl, fleet) })

	ids := make([]string, jobs)
	for i := range ids {
		ids[i] = fmt.Sprintf("simha-%03d", i)
	}
	createSimJobs(t, cl, ids[:jobs/2])
	leader := c.Leader(30 * time.Second)
	testproc.Eventually(t, 60*time.Second, "the leader's engine starts placing", func() bool { return fleet.Stats().Starts > 0 })
	before := fleet.Stats().Starts
	killedAt := time.Now()
	leader.Kill()
	t.Logf("SIGKILLed leader %s after %d of %d starts", leader.Name, before, jobs)
	next := c.Leader(30 * time.Second)
	elected := time.Since(killedAt)
	t.Logf("new leader %s, known %s after the kill", next.Name, elected.Round(time.Millisecond))
	createSimJobs(t, cl, ids[jobs/2:])

	testproc.Await(t, 120*time.Second, "every job has exactly one instance, running on exactly one simulated node", func() error {
		return oneInstanceEach(ctx, cl, fleet, ids)
	})
	st := fleet.Stats()
	if st.Violations > 0 {
		t.Fatalf("%d starts of a (job, role) received while it ran:\n%s", st.Violations, strings.Join(st.ViolationLog, "\n"))
	}
	// Only the new leader's engine places the jobs created after the kill.
	resumed := time.Duration(-1)
	for _, id := range ids[jobs/2:] {
		if at, ok := fleet.FirstStart(id, "primary"); ok && (resumed < 0 || at.Sub(killedAt) < resumed) {
			resumed = at.Sub(killedAt)
		}
	}
	t.Logf("the new leader's engine placed its first job %s after the kill (leader known after %s); first start of any job after the kill: %s; "+
		"%d starts before the kill, %d after; %d stops; %d provisions of a running instance received again",
		resumed.Round(time.Millisecond), elected.Round(time.Millisecond), firstStartAfter(st.StartTimes, killedAt), before, st.Starts-before, st.Stops, st.Repeats)
}

// warnLogger logs warnings and errors to t.Log (the fleet's workers log a
// line per job at info).
func warnLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// registerSlotRetrying registers a cluster slot through cl, retrying
// answers of a cluster that cannot serve now, for up to a minute.
func registerSlotRetrying(ctx context.Context, cl *client.NorskManager, name string, tags map[string]string) (string, string, error) {
	deadline := time.Now().Add(time.Minute)
	for {
		id, token, err := cl.RegisterClusterNode(ctx, name, tags)
		if err == nil || !isUnavailable(err) || time.Now().After(deadline) {
			return string(id), token, err
		}
		select {
		case <-ctx.Done():
			return "", "", ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// nodesStarted reports, as an error, the simulated nodes that are not
// connected and STARTED.
func nodesStarted(cl *client.NorskManager, fleet *simfleet.Fleet) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	list, err := cl.ListNodes(ctx)
	if err != nil {
		return err
	}
	up := map[string]bool{}
	for _, n := range list {
		if n.GetConnected() && n.GetState() == managerpb.NodeLifecycle_NODE_LIFECYCLE_STARTED {
			up[n.GetMetadata().GetNodeId().GetNodeId()] = true
		}
	}
	var down []string
	for _, n := range fleet.Nodes() {
		if !up[n.ID] {
			down = append(down, n.Name)
		}
	}
	if len(down) > 0 {
		return fmt.Errorf("%d nodes not STARTED: %v (agents stopped: %v)", len(down), down, fleet.Errors())
	}
	return nil
}

// simJob is an auto-placed job of 1 unit.
func simJob(id string) *managerpb.Job {
	return &managerpb.Job{JobId: &commonpb.JobId{JobId: id}, Tags: map[string]string{"suite": "simfleet"},
		Services:      []*commonpb.Service{{Name: "sim", Command: "true", Restart: commonpb.Service_NEVER}},
		AutoPlacement: &managerpb.AutoPlacement{Requirements: &managerpb.JobRequirements{RequiredCapacity: 1}}}
}

// createSimJobs creates the jobs through cl, 8 at a time, each until the
// cluster acknowledges it (an attempt that failed as unavailable may have
// committed: AlreadyExists on a retry is the acknowledgement), for up to a
// minute each.
func createSimJobs(t *testing.T, cl *client.NorskManager, ids []string) {
	t.Helper()
	errs := parallel(8, len(ids), func(i int) error {
		retried := false
		deadline := time.Now().Add(time.Minute)
		for {
			_, err := cl.CreateJob(context.Background(), simJob(ids[i]))
			switch {
			case err == nil, retried && status.Code(err) == codes.AlreadyExists:
				return nil
			case !isUnavailable(err) || time.Now().After(deadline):
				return fmt.Errorf("CreateJob(%s): %w", ids[i], err)
			}
			retried = true
		}
	})
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
}

// oneInstanceEach reports, as an error, the first job that has not
// exactly one instance (role primary) on the managers, or does not run on
// exactly that one node of the fleet.
func oneInstanceEach(ctx context.Context, cl *client.NorskManager, fleet *simfleet.Fleet, ids []string) error {
	all, err := cl.JobSearch(ctx)
	if err != nil {
		return err
	}
	byID := make(map[string]*managerpb.CurrentJob, len(all))
	for _, j := range all {
		byID[j.GetJob().GetJobId().GetJobId()] = j
	}
	for _, id := range ids {
		j, ok := byID[id]
		if !ok {
			return fmt.Errorf("job %s not listed", id)
		}
		in := j.GetInstances()
		if len(in) != 1 || in[0].GetJobKey().GetRole() != "primary" {
			return fmt.Errorf("job %s has instances %v, want one primary", id, in)
		}
		on := fleet.RunningOn(id, "primary")
		if want := in[0].GetNodeId().GetNodeId(); !slices.Equal(on, []string{want}) {
			return fmt.Errorf("job %s runs on nodes %v of the fleet, its record says %s", id, on, want)
		}
	}
	return nil
}

// firstStartAfter returns how long after t the first start in times (in
// order) came ("none" if none did).
func firstStartAfter(times []time.Time, t time.Time) string {
	for _, at := range times {
		if at.After(t) {
			return at.Sub(t).Round(time.Millisecond).String()
		}
	}
	return "none"
}
