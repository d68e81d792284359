package ha

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/norsk-oss/norsk-manager/client"
	"github.com/norsk-oss/norsk-manager/proto/commonpb"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
	"github.com/norsk-oss/norsk-manager/test/testproc"
)

// job is a job under test: a WebJob on one worker.
type workerJob struct {
	id      string
	node    string
	port    int
	pidFile string
	pid     int
	history []string
}

// TestHA_JobsSurviveManagerKills runs three workers on cluster slots of a
// three-manager cluster, a job on each, and SIGKILLs a manager five times
// (the leader in rounds 1, 3 and 5, the follower holding most worker
// sessions in the others), restarting it each time. Throughout, the
// jobs' processes must keep running with the same PIDs, the jobs stay
// running, and no node lifecycle event (node_starting, node_started,
// node_stopping, node_stopped) nor a job state change is published: a
// manager failover only moves worker sessions to another manager.
func TestHA_JobsSurviveManagerKills(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cluster of real managers and workers")
	}
	ctx := context.Background()
	c := testproc.NewCluster(t, 3)
	c.StartAll()
	hc := newWatchedCluster(t, c)
	cl := clientOf(t, 10*time.Second, c.Managers...)
	ev := &testproc.EventLog{}
	ev.Follow(t, cl, 30*time.Second)

	// Three workers, each given every manager, and a job on each.
	var jobs []*workerJob
	for i := range 3 {
		name := fmt.Sprintf("w%d", i+1)
		var nodeID client.NodeID
		var token string
		testproc.Await(t, 60*time.Second, "slot "+name+" registered", func() error {
			var err error
			nodeID, token, err = cl.RegisterClusterNode(ctx, name, nil)
			return err
		})
		testproc.StartWorker(t, name, string(nodeID), token, c.URLs())
		jobs = append(jobs, &workerJob{id: "web-" + name, node: string(nodeID), port: testproc.FreePort(t),
			pidFile: filepath.Join(testproc.JobFilesDir(t), name+".pid")})
	}
	for _, j := range jobs {
		testproc.Await(t, 60*time.Second, "node "+j.node+" started", func() error {
			if !testproc.NodeStarted(cl, j.node) {
				return fmt.Errorf("not connected and STARTED")
			}
			return nil
		})
		createJobAcked(t, cl, testproc.WebJob(j.id, j.pidFile, j.port))
		if err := cl.StartJob(ctx, client.JobID(j.id), "primary", client.NodeID(j.node)); err != nil {
			t.Fatalf("StartJob(%s): %v", j.id, err)
		}
	}
	for _, j := range jobs {
		testproc.Await(t, 60*time.Second, j.id+" serving HTTP", func() error {
			if !testproc.HTTPOK(j.port) {
				return fmt.Errorf("no answer on port %d", j.port)
			}
			return nil
		})
		pid, ok := testproc.ReadPID(j.pidFile)
		if !ok {
			t.Fatalf("%s: no pid file", j.id)
		}
		j.pid = pid
		testproc.Await(t, 30*time.Second, j.id+" running on "+j.node, func() error {
			h, err := jobRunning(cl, j)
			j.history = h
			return err
		})
	}
	// Everything before this point is setup; from here on no node or job
	// may change state.
	baseline := ev.Len()
	for _, j := range jobs {
		t.Logf("job %s on node %s: pid %d, port %d, history %v", j.id, j.node, j.pid, j.port, j.history)
	}

	leaderRounds := []bool{true, false, true, false, true}
	for round, killLeader := range leaderRounds {
		killRound(t, hc, cl, jobs, round+1, killLeader)
	}

	// The jobs' processes are the ones started at the beginning.
	for _, j := range jobs {
		pid, ok := testproc.ReadPID(j.pidFile)
		switch {
		case !ok:
			t.Errorf("%s: pid file gone", j.id)
		case pid != j.pid:
			t.Errorf("%s was restarted: pid %d, was %d", j.id, pid, j.pid)
		case !testproc.PIDAlive(j.pid):
			t.Errorf("%s: process %d is gone", j.id, j.pid)
		case !testproc.HTTPOK(j.port):
			t.Errorf("%s: no HTTP answer on port %d", j.id, j.port)
		}
		h, err := jobRunning(cl, j)
		if err != nil {
			t.Errorf("%s: %v", j.id, err)
		} else if !slices.Equal(h, j.history) {
			t.Errorf("%s: history %v, was %v", j.id, h, j.history)
		}
		// The last restart may still be handing the node's session back
		// to its owner (the session moves once more after "settled"):
		// wait for it, with a deadline.
		if !eventuallyTrue(30*time.Second, func() bool { return testproc.NodeStarted(cl, j.node) }) {
			t.Errorf("node %s is not connected and STARTED at the end (waited 30s)", j.node)
		}
	}

	// Nothing happened to the nodes and jobs as far as the event stream
	// tells.
	nodes := map[string]bool{}
	for _, j := range jobs {
		nodes[j.node] = true
	}
	for _, e := range ev.Snapshot()[baseline:] {
		if what := forbiddenEvent(e, nodes, jobs); what != "" {
			t.Errorf("event at log index %d: %s", e.GetLogIndex(), what)
		}
	}
	if err := ev.CheckExactlyOnce(); err != nil {
		t.Errorf("event stream across the kills: %v", err)
	}
	if os.Getenv("HB_DEBUG") != "" {
		t.Error("HB_DEBUG: failing to keep the logs")
	}
}

// jobRunning returns the kinds of j's history entries if its last one
// is Running and its only instance is (j, primary) on j's node.
func jobRunning(cl *client.NorskManager, j *workerJob) ([]string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r, err := cl.JobByID(ctx, client.JobID(j.id))
	if err != nil {
		return nil, err
	}
	var kinds []string
	for _, h := range r.GetJob().GetHistoryEntry() {
		kinds = append(kinds, strings.TrimPrefix(fmt.Sprintf("%T", h.GetHistoryEntry()), "*managerpb.JobHistoryEntry_Job"))
	}
	switch in := r.GetInstances(); {
	case len(kinds) == 0 || kinds[len(kinds)-1] != "Running":
		return kinds, fmt.Errorf("history %v does not end with Running", kinds)
	case len(in) != 1 || in[0].GetNodeId().GetNodeId() != j.node || in[0].GetJobKey().GetRole() != "primary":
		return kinds, fmt.Errorf("instances %v, want (primary, %s)", in, j.node)
	}
	return kinds, nil
}

// forbiddenEvent describes e if it is a change of one of the nodes'
// lifecycle or of one of the jobs' state ("" otherwise).
// physical_node_connected (a worker session established on a manager)
// and job_info are expected during a failover.
func forbiddenEvent(e *managerpb.EventStreamEvent, nodes map[string]bool, jobs []*workerJob) string {
	switch x := e.GetEvent().(type) {
	case *managerpb.EventStreamEvent_NodeStarting:
		if nodes[x.NodeStarting.GetNodeMetadata().GetNodeId().GetNodeId()] {
			return "node_starting " + x.NodeStarting.GetNodeMetadata().GetNodeId().GetNodeId()
		}
	case *managerpb.EventStreamEvent_NodeStarted:
		if nodes[x.NodeStarted.GetNodeMetadata().GetNodeId().GetNodeId()] {
			return "node_started " + x.NodeStarted.GetNodeMetadata().GetNodeId().GetNodeId()
		}
	case *managerpb.EventStreamEvent_NodeStopping:
		if nodes[x.NodeStopping.GetNodeId().GetNodeId()] {
			return fmt.Sprintf("node_stopping %s (%s)", x.NodeStopping.GetNodeId().GetNodeId(), x.NodeStopping.GetReason())
		}
	case *managerpb.EventStreamEvent_NodeStopped:
		if nodes[x.NodeStopped.GetNodeId().GetNodeId()] {
			return "node_stopped " + x.NodeStopped.GetNodeId().GetNodeId()
		}
	case *managerpb.EventStreamEvent_JobUpdated:
		jh := x.JobUpdated.GetJobWithHistory()
		for _, j := range jobs {
			if jh.GetJob().GetJobId().GetJobId() == j.id && len(jh.GetHistoryEntry()) != len(j.history) {
				return fmt.Sprintf("job_updated %s with %d history entries, was %d", j.id, len(jh.GetHistoryEntry()), len(j.history))
			}
		}
	case *managerpb.EventStreamEvent_JobDeleted:
		return "job_deleted"
	case *managerpb.EventStreamEvent_StreamReset:
		return "stream_reset: " + x.StreamReset.GetReason()
	}
	return ""
}

// killRound SIGKILLs one manager (the leader, or the follower holding
// the most worker sessions), waits until the survivors accept writes and
// every node has its session back, restarts the manager and waits until
// it serves and the sessions settled. It checks the jobs' processes after
// each step and logs how long each took.
func killRound(t *testing.T, hc *watchedCluster, cl *client.NorskManager, jobs []*workerJob, round int, killLeader bool) {
	t.Helper()
	leader := hc.leader(t, 60*time.Second)
	sessions := hc.sessionsByManager()
	victim := leader
	if !killLeader {
		victim = nil
		for _, m := range hc.Managers {
			if m != leader && (victim == nil || len(sessions[m.Name]) > len(sessions[victim.Name])) {
				victim = m
			}
		}
	}
	role := "leader"
	if victim != leader {
		role = "follower"
	}
	t.Logf("round %d: killing %s %s (sessions %v; all: %v)", round, role, victim.Name, sessions[victim.Name], sessions)
	watch := watchSessions(t, hc, jobs)
	victim.Kill()
	killed := time.Now()
	checkProcesses(t, jobs, fmt.Sprintf("round %d, after the kill", round))

	// The survivors serve writes again, and every session is back on a
	// survivor.
	served := make(chan error, 1)
	var probeTook time.Duration // written before served is sent to
	go func() {
		err := probeWrites(cl, round, killed)
		probeTook = time.Since(killed)
		served <- err
	}()
	watch.settle(t, fmt.Sprintf("round %d, after the kill", round))
	if err := <-served; err != nil {
		t.Fatal(err)
	}
	t.Logf("round %d: writes served again %s after the kill", round, probeTook.Round(time.Millisecond))

	watch = watchSessions(t, hc, jobs)
	victim.Start()
	victim.WaitServing(60 * time.Second)
	t.Logf("round %d: %s serving again %s after its restart", round, victim.Name, time.Since(watch.since).Round(time.Millisecond))
	awaitMembers(t, hc, len(hc.Managers))
	watch.settle(t, fmt.Sprintf("round %d, after the restart", round))
	checkProcesses(t, jobs, fmt.Sprintf("round %d, after the restart", round))
}

// probeWrites creates fresh jobs through cl until one is acknowledged,
// for up to a minute after killed. It runs on its own goroutine, so it
// returns its error instead of failing the test.
func probeWrites(cl *client.NorskManager, round int, killed time.Time) error {
	for attempt := 0; ; attempt++ {
		id := fmt.Sprintf("probe-r%d-%d", round, attempt)
		_, err := cl.CreateJob(context.Background(), &managerpb.Job{JobId: &commonpb.JobId{JobId: id}})
		if err == nil {
			return nil
		}
		if !isUnavailable(err) || time.Since(killed) > 60*time.Second {
			return fmt.Errorf("round %d: CreateJob(%s) %s after the kill: %w", round, id, time.Since(killed), err)
		}
	}
}

// maxSessionGap bounds how long a worker session may stay down (or be
// held twice) around a manager kill or restart: the grain's new owner must
// dial the worker, well before the worker registers again on its own
// (after its DialBackTimeout, 30 s) and before the node would be
// declared lost (LostTimeout, 30 s).
const maxSessionGap = 20 * time.Second

// sessionWatch polls, every 100 ms on its own goroutine, which managers
// hold the worker sessions of the jobs' nodes, recording for each node
// the longest interval without exactly one holder, and every change.
type sessionWatch struct {
	hc    *watchedCluster
	jobs  []*workerJob
	since time.Time
	stop  chan struct{}
	done  chan struct{}

	mu struct {
		sync.Mutex
		down    map[string]time.Time     // node → since when it lacks a single holder
		gap     map[string]time.Duration // node → longest such interval
		trace   []string                 // holder changes, for the log
		holders string                   // at the last poll
		changed time.Time                // of holders
		settled bool                     // every node had one holder at the last poll
	}
}

func watchSessions(t *testing.T, hc *watchedCluster, jobs []*workerJob) *sessionWatch {
	w := &sessionWatch{hc: hc, jobs: jobs, since: time.Now(), stop: make(chan struct{}), done: make(chan struct{})}
	w.mu.down, w.mu.gap = map[string]time.Time{}, map[string]time.Duration{}
	go func() {
		defer close(w.done)
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			w.poll()
			select {
			case <-w.stop:
				return
			case <-tick.C:
			}
		}
	}()
	t.Cleanup(w.halt)
	return w
}

func (w *sessionWatch) halt() {
	select {
	case <-w.stop:
	default:
		close(w.stop)
	}
	<-w.done
}

func (w *sessionWatch) poll() {
	holder := map[string][]string{}
	for m, nodes := range w.hc.sessionsByManager() {
		for _, n := range nodes {
			holder[n] = append(holder[n], m)
		}
	}
	now := time.Now()
	w.mu.Lock()
	defer w.mu.Unlock()
	if h := holders(w.jobs, holder); h != w.mu.holders {
		w.mu.holders, w.mu.changed = h, now
		w.mu.trace = append(w.mu.trace, fmt.Sprintf("+%s %s", now.Sub(w.since).Round(time.Millisecond), h))
	}
	w.mu.settled = true
	for _, j := range w.jobs {
		d, down := w.mu.down[j.node]
		switch {
		case len(holder[j.node]) == 1 && down:
			w.mu.gap[j.node] = max(w.mu.gap[j.node], now.Sub(d))
			delete(w.mu.down, j.node)
		case len(holder[j.node]) != 1 && !down:
			w.mu.down[j.node] = now
			w.mu.settled = false
		case len(holder[j.node]) != 1:
			w.mu.settled = false
		}
	}
}

// settle waits until every node has had exactly one session holder for
// 3 s (grains move back to a restarted manager a moment after it serves),
// stops the watch, logs the gaps and the holder changes, and fails the
// test if a session stayed down longer than maxSessionGap.
func (w *sessionWatch) settle(t *testing.T, when string) {
	t.Helper()
	testproc.Await(t, 90*time.Second, "every worker session up and settled ("+when+")", func() error {
		w.mu.Lock()
		defer w.mu.Unlock()
		switch d := time.Since(w.mu.changed); {
		case !w.mu.settled:
			return fmt.Errorf("holders %s", w.mu.holders)
		case d < 3*time.Second:
			return fmt.Errorf("holders %s for %s only", w.mu.holders, d.Round(time.Millisecond))
		}
		return nil
	})
	w.halt()
	w.mu.Lock()
	defer w.mu.Unlock()
	var parts []string
	for _, j := range w.jobs {
		gap := w.mu.gap[j.node]
		parts = append(parts, fmt.Sprintf("%s %s", j.id, gap.Round(time.Millisecond)))
		if gap > maxSessionGap {
			t.Errorf("%s: the session of %s's node %s was down for %s (> %s): holders %s", when, j.id, j.node,
				gap.Round(time.Millisecond), maxSessionGap, strings.Join(w.mu.trace, ", "))
		}
	}
	t.Logf("%s: longest session gaps %s; settled %s after; holders: %s", when, strings.Join(parts, ", "),
		w.mu.changed.Sub(w.since).Round(time.Millisecond), strings.Join(w.mu.trace, ", "))
}

// holders describes which managers hold each job's node's session,
// nodes in job order, by their job's name (e.g. "web-w1:m2").
func holders(jobs []*workerJob, holder map[string][]string) string {
	var parts []string
	for _, j := range jobs {
		hs := slices.Clone(holder[j.node])
		slices.Sort(hs)
		h := strings.Join(hs, "+")
		if h == "" {
			h = "none"
		}
		parts = append(parts, j.id+":"+h)
	}
	return strings.Join(parts, " ")
}

// awaitMembers waits until every running manager sees n members alive.
func awaitMembers(t *testing.T, hc *watchedCluster, n int) {
	t.Helper()
	testproc.Await(t, 60*time.Second, fmt.Sprintf("%d members alive on every manager", n), func() error {
		for _, m := range hc.Running() {
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
			r, err := m.Members(ctx)
			cancel()
			if err != nil {
				return fmt.Errorf("%s: %w", m.Name, err)
			}
			alive := 0
			for _, mem := range r.GetMembers() {
				if mem.GetGossipState() == "alive" {
					alive++
				}
			}
			if alive != n {
				return fmt.Errorf("%s sees %d members alive", m.Name, alive)
			}
		}
		return nil
	})
}

// checkProcesses fails the test if a job's process changed or died.
func checkProcesses(t *testing.T, jobs []*workerJob, when string) {
	t.Helper()
	for _, j := range jobs {
		if pid, ok := testproc.ReadPID(j.pidFile); !ok || pid != j.pid || !testproc.PIDAlive(j.pid) {
			t.Fatalf("%s: %s's process changed: pid file %d (ok %v), was %d (alive %v)", when, j.id, pid, ok, j.pid, testproc.PIDAlive(j.pid))
		}
	}
}

// eventuallyTrue polls cond every 50ms until it holds or d has passed.
func eventuallyTrue(d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	for {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(50 * time.Millisecond)
	}
}
