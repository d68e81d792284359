package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/norsk-oss/norsk-manager/proto/commonpb"
	"github.com/norsk-oss/norsk-manager/proto/internalpb"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
)

// ownerSettle is how long exactly one manager must hold the worker's
// session, unchanged, before the holder counts as the session's owner (a
// node grain moves back to a restarted manager a moment after it serves).
const ownerSettle = 3 * time.Second

// sessionJobID is the job of session-failover.
const sessionJobID = "bench-session-job"

// sessionTrial is what one kill of the session's owner measured.
type sessionTrial struct {
	killed    string // the manager killed
	wasLeader bool   // it was the Raft leader
	newOwner  string // the survivor that took the session
	session   time.Duration
	sessionOK bool
	event     time.Duration // kill → physical_node_connected received
	eventOK   bool
	listed    time.Duration // kill → ListNodes on a survivor lists the node connected and STARTED
	listedOK  bool
	serving   time.Duration // restart → the killed manager SERVING
	servingOK bool
	backOwner string // the owner once the sessions settled after the restart
	pid       int    // the job's pid after the trial (0: unreadable)
	pidAlive  bool
}

// sessionSetup is the worker and the job of session-failover.
type sessionSetup struct {
	e       *env
	c       *haCluster
	node    string
	worker  *child
	pidFile string
	started bool // StartJob was called
	pid     int  // the job's process at the start
	history int  // the job's history entries once it ran
}

// runSessionFailover runs a 3-manager cluster, a real worker process
// (norsk-ctl --mode=worker, every manager in --manager-url) on a cluster
// slot running one job, and open-loop CreateJob writers on every manager.
// e.sessionTrials times it finds the manager holding the worker's session
// (the one whose Cluster/Liveness lists the node connected), SIGKILLs it and
// measures kill → a survivor holds the session, → physical_node_connected
// on the event stream, → ListNodes on a survivor lists the node connected,
// checks that the job's process keeps its pid, restarts the killed manager
// and waits for a stable cluster and a settled session owner. Over the
// whole run no lifecycle event of the node and no change of the job may be
// published.
func runSessionFailover(ctx context.Context, e *env) error {
	c, err := e.newCluster("session-failover", 3, "info")
	if err != nil {
		return err
	}
	defer c.close()
	if err := c.startAll(); err != nil {
		return err
	}
	if _, err := c.waitStable(ctx, recoverTimeout); err != nil {
		return err
	}
	ev := followCluster(c.ms, func(x *managerpb.EventStreamEvent) bool {
		// Node events (any node: there is one) and the job's own events.
		switch x.GetEvent().(type) {
		case *managerpb.EventStreamEvent_NodeStarting, *managerpb.EventStreamEvent_NodeStarted,
			*managerpb.EventStreamEvent_NodeStopping, *managerpb.EventStreamEvent_NodeStopped,
			*managerpb.EventStreamEvent_PhysicalNodeConnected, *managerpb.EventStreamEvent_JobDeleted:
			return true
		case *managerpb.EventStreamEvent_JobUpdated:
			return x.GetJobUpdated().GetJobWithHistory().GetJob().GetJobId().GetJobId() == sessionJobID
		}
		return false
	})
	defer ev.close()
	if err := ev.waitReady(ctx, recoverTimeout); err != nil {
		return err
	}
	s := &sessionSetup{e: e, c: c}
	defer s.cleanup()
	if err := s.start(ctx, ev); err != nil {
		return err
	}
	w, err := startWrites(e, c.ms, "session")
	if err != nil {
		return err
	}
	defer w.close()
	owner, err := waitOwner(ctx, c, s.node)
	if err != nil {
		return err
	}
	baseline := ev.headIndex()
	firstOwner := owner.name
	var trials []sessionTrial
	for i := range e.sessionTrials {
		t, err := sessionOnce(ctx, c, w, ev, s)
		if err != nil {
			return fmt.Errorf("trial %d: %w\nworker log:\n%s", i+1, err, s.worker.tail())
		}
		trials = append(trials, t)
	}
	w.close()
	// Whatever the kills caused has been published by now: the last trial
	// waited for a stable cluster and a settled owner.
	bad := forbiddenEvents(ev.after(baseline), s.node, s.history)
	printSessionFailover(e, w, s, firstOwner, trials, bad, ev.resetCount())
	if err := s.cleanup(); err != nil {
		printNote(e, err.Error())
	}
	ev.close() // before the managers stop: they would drain its streams
	printNote(e, c.closeNote())
	return nil
}

// start registers a cluster slot, starts the worker on it (every manager
// in --manager-url), waits for node_started, then creates and starts the
// job and reads its pid.
func (s *sessionSetup) start(ctx context.Context, ev *clusterEvents) error {
	e, c := s.e, s.c
	api := c.ms[0].mgr
	idx := ev.headIndex()
	var slot *managerpb.RegisterClusterNodeResponse
	if err := retryUnavailable(ctx, func(ctx context.Context) (err error) {
		slot, err = api.RegisterClusterNode(ctx, &managerpb.RegisterClusterNodeRequest{NodeName: "bench-worker"})
		return err
	}); err != nil {
		return fmt.Errorf("RegisterClusterNode: %w", err)
	}
	s.node = slot.GetNodeId().GetNodeId()
	port, err := listenPort()
	if err != nil {
		return err
	}
	bin, err := e.binaries(ctx)
	if err != nil {
		return err
	}
	stateDir := filepath.Join(c.dir, "worker")
	if err := os.MkdirAll(stateDir, 0o700); err != nil {
		return err
	}
	s.worker, err = startChild("norsk-ctl --mode=worker", filepath.Join(c.dir, "worker.log"), filepath.Join(bin, "norsk-ctl"),
		"--mode=worker", "--token="+slot.GetToken(), "--manager-url="+c.urls(),
		fmt.Sprintf("--listen=127.0.0.1:%d", port), "--state-dir="+stateDir, "--log-level=info")
	if err != nil {
		return err
	}
	if _, err := ev.waitFirst(ctx, idx, eventTimeout, "node_started", func(x *managerpb.EventStreamEvent) bool {
		return nodeStarted(x, s.node)
	}); err != nil {
		return fmt.Errorf("%w\nworker log:\n%s", err, s.worker.tail())
	}

	// The job: its shell writes its pid, then execs a process that lives
	// until the bench exits (so that it cannot outlive a killed bench).
	s.pidFile = filepath.Join(c.dir, "job.pid")
	job := &managerpb.Job{JobId: &commonpb.JobId{JobId: sessionJobID}, Tags: map[string]string{"bench": "session-failover"},
		Services: []*commonpb.Service{{Name: "sleeper", Restart: commonpb.Service_NEVER,
			Command: fmt.Sprintf("echo $$ > %s; exec tail -f --pid=%d /dev/null", shellQuote(s.pidFile), os.Getpid())}}}
	idx = ev.headIndex()
	if err := retryUnavailable(ctx, func(ctx context.Context) error {
		_, err := api.CreateJob(ctx, job)
		return err
	}); err != nil {
		return fmt.Errorf("CreateJob: %w", err)
	}
	s.started = true
	if err := retryUnavailable(ctx, func(ctx context.Context) error {
		_, err := api.StartJob(ctx, &managerpb.StartJobRequest{JobId: job.GetJobId(), Role: "primary", NodeId: &commonpb.NodeId{NodeId: s.node}})
		return err
	}); err != nil {
		return fmt.Errorf("StartJob: %w", err)
	}
	running := func(x *managerpb.EventStreamEvent) bool {
		return newestEntry(x, sessionJobID, func(h *managerpb.JobHistoryEntry) bool { return h.GetJobRunning() != nil })
	}
	if _, err := ev.waitFirst(ctx, idx, eventTimeout, "job_running", running); err != nil {
		return fmt.Errorf("%w\nworker log:\n%s", err, s.worker.tail())
	}
	for _, te := range ev.after(idx) {
		if running(te.ev) {
			s.history = len(te.ev.GetJobUpdated().GetJobWithHistory().GetHistoryEntry())
		}
	}
	if _, err := poll(ctx, eventTimeout, pollEvery, "the job's pid file", func() (bool, error) {
		s.pid = readPID(s.pidFile)
		return s.pid > 0 && pidAlive(s.pid), nil
	}); err != nil {
		return err
	}
	return nil
}

// cleanup stops the job (StopJob, then SIGKILL of its process if it is
// still there) and the worker. Idempotent.
func (s *sessionSetup) cleanup() error {
	var errs []error
	if s.started {
		s.started = false
		for _, m := range s.c.running() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			_, err := m.mgr.StopJob(ctx, &managerpb.StopJobRequest{JobId: &commonpb.JobId{JobId: sessionJobID}, Role: "primary",
				NodeId: &commonpb.NodeId{NodeId: s.node}})
			cancel()
			if err == nil {
				break
			}
		}
		pid := s.pid
		if pid == 0 {
			pid = readPID(s.pidFile)
		}
		if pid > 0 {
			deadline := time.Now().Add(10 * time.Second)
			for pidAlive(pid) && time.Now().Before(deadline) {
				time.Sleep(50 * time.Millisecond)
			}
			// Still there: kill it, if it is still the process the job
			// started (its command line names this bench's pid).
			if pidAlive(pid) && ourJobProcess(pid) {
				_ = syscall.Kill(pid, syscall.SIGKILL)
				errs = append(errs, fmt.Errorf("the job's process %d did not stop after StopJob; killed", pid))
			}
		}
	}
	if s.worker != nil {
		w := s.worker
		s.worker = nil
		if err := w.stop(); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// ourJobProcess reports whether pid runs the command of the session job
// of this bench process.
func ourJobProcess(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	return err == nil && strings.Contains(string(b), fmt.Sprintf("--pid=%d", os.Getpid()))
}

func readPID(path string) int {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	var pid int
	if _, err := fmt.Sscan(strings.TrimSpace(string(b)), &pid); err != nil {
		return 0
	}
	return pid
}

func pidAlive(pid int) bool { return syscall.Kill(pid, 0) == nil }

func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// retryUnavailable calls fn (10 s per call) until it succeeds or fails
// with another code than Unavailable, for up to recoverTimeout.
func retryUnavailable(ctx context.Context, fn func(context.Context) error) error {
	deadline := time.Now().Add(recoverTimeout)
	for {
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err := fn(cctx)
		cancel()
		if err == nil || status.Code(err) != codes.Unavailable || time.Now().After(deadline) || ctx.Err() != nil {
			return err
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// holders returns the managers of ms whose own Cluster/Liveness lists node
// connected (a verified worker session up on that manager).
func holders(ctx context.Context, ms []*haManager, node string) []*haManager {
	held := make([]bool, len(ms))
	var wg sync.WaitGroup
	for i, m := range ms {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
			defer cancel()
			r, err := m.internal.Liveness(cctx, &internalpb.LivenessRequest{})
			if err != nil {
				return
			}
			for _, n := range r.GetNodes() {
				if n.GetNodeId() == node && n.GetConnected() {
					held[i] = true
				}
			}
		}()
	}
	wg.Wait()
	var out []*haManager
	for i, m := range ms {
		if held[i] {
			out = append(out, m)
		}
	}
	return out
}

// waitOwner waits until exactly one running manager has held node's
// session, the same one, for ownerSettle, and returns it.
func waitOwner(ctx context.Context, c *haCluster, node string) (*haManager, error) {
	var owner *haManager
	var since time.Time
	_, err := poll(ctx, recoverTimeout, 50*time.Millisecond, "one settled holder of the worker's session", func() (bool, error) {
		if err := exitedErr(c.ms); err != nil {
			return false, err
		}
		h := holders(ctx, c.running(), node)
		if len(h) != 1 {
			owner = nil
			var names []string
			for _, m := range h {
				names = append(names, m.name)
			}
			return false, fmt.Errorf("holders %v", names)
		}
		if h[0] != owner {
			owner, since = h[0], time.Now()
		}
		return time.Since(since) >= ownerSettle, nil
	})
	return owner, err
}

// sessionOnce waits for a stable cluster, settled writes and a settled
// session owner, kills the owner, measures, restarts it and waits until
// the cluster is stable and the session settled again.
func sessionOnce(ctx context.Context, c *haCluster, w *writeLoad, ev *clusterEvents, s *sessionSetup) (sessionTrial, error) {
	var t sessionTrial
	leader, err := c.waitStable(ctx, recoverTimeout)
	if err != nil {
		return t, err
	}
	if _, err := w.waitSettled(ctx, time.Now(), clearStreak, recoverTimeout); err != nil {
		return t, fmt.Errorf("before the kill: %w", err)
	}
	owner, err := waitOwner(ctx, c, s.node)
	if err != nil {
		return t, err
	}
	// The leader may have changed while the owner settled.
	if l, _, err := agreedLeader(ctx, c.ms); err == nil && l != nil {
		leader = l
	}
	idx := ev.headIndex()
	t.killed, t.wasLeader = owner.name, owner == leader
	var survivors []*haManager
	wi := 0
	for i, m := range c.ms {
		if m == owner {
			wi = i
		} else {
			survivors = append(survivors, m)
		}
	}
	w.pause(wi)
	kill := time.Now()
	owner.kill()

	var wg sync.WaitGroup
	wg.Add(3)
	go func() {
		defer wg.Done()
		at, err := poll(ctx, recoverTimeout, pollEvery, "a survivor holding the session", func() (bool, error) {
			h := holders(ctx, survivors, s.node)
			if len(h) > 0 {
				t.newOwner = h[0].name
			}
			return len(h) > 0, nil
		})
		t.session, t.sessionOK = at.Sub(kill), err == nil
	}()
	go func() {
		defer wg.Done()
		at, err := ev.waitFirst(ctx, idx, recoverTimeout, "physical_node_connected", func(x *managerpb.EventStreamEvent) bool {
			return x.GetPhysicalNodeConnected().GetNode().GetId() == s.node
		})
		t.event, t.eventOK = at.Sub(kill), err == nil
	}()
	go func() {
		defer wg.Done()
		m := survivors[0]
		at, err := poll(ctx, recoverTimeout, 50*time.Millisecond, "ListNodes lists the node connected", func() (bool, error) {
			cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			defer cancel()
			r, err := m.mgr.ListNodes(cctx, &managerpb.ListNodesRequest{})
			if err != nil {
				return false, err
			}
			for _, n := range r.GetNodes() {
				if n.GetMetadata().GetNodeId().GetNodeId() == s.node {
					return n.GetConnected() && n.GetState() == managerpb.NodeLifecycle_NODE_LIFECYCLE_STARTED, nil
				}
			}
			return false, nil
		})
		t.listed, t.listedOK = at.Sub(kill), err == nil
	}()
	wg.Wait()
	t.pid = readPID(s.pidFile)
	t.pidAlive = t.pid > 0 && pidAlive(t.pid)

	restart := time.Now()
	if err := c.start(owner); err != nil {
		return t, err
	}
	at, err := waitServing(ctx, []*haManager{owner}, recoverTimeout)
	if err != nil {
		return t, fmt.Errorf("restart %s: %w", owner.name, err)
	}
	t.serving, t.servingOK = at.Sub(restart), true
	w.resume(wi)
	if _, err := c.waitStable(ctx, recoverTimeout); err != nil {
		return t, fmt.Errorf("after the restart: %w", err)
	}
	back, err := waitOwner(ctx, c, s.node)
	if err != nil {
		return t, fmt.Errorf("after the restart: %w", err)
	}
	t.backOwner = back.name
	return t, nil
}

// forbiddenEvents describes the events among evs that a manager failover
// must not cause: a lifecycle event of node, or a change of the job's
// history (history entries of the job once it ran).
func forbiddenEvents(evs []timedEvent, node string, history int) []string {
	var out []string
	for _, te := range evs {
		x := te.ev
		var what string
		switch {
		case x.GetNodeStarting() != nil && x.GetNodeStarting().GetNodeMetadata().GetNodeId().GetNodeId() == node:
			what = "node_starting"
		case x.GetNodeStarted() != nil && x.GetNodeStarted().GetNodeMetadata().GetNodeId().GetNodeId() == node:
			what = "node_started"
		case x.GetNodeStopping() != nil && x.GetNodeStopping().GetNodeId().GetNodeId() == node:
			what = "node_stopping (" + x.GetNodeStopping().GetReason().String() + ")"
		case x.GetNodeStopped() != nil && x.GetNodeStopped().GetNodeId().GetNodeId() == node:
			what = "node_stopped"
		case x.GetJobUpdated() != nil && len(x.GetJobUpdated().GetJobWithHistory().GetHistoryEntry()) != history:
			what = fmt.Sprintf("job_updated of the job with %d history entries, was %d",
				len(x.GetJobUpdated().GetJobWithHistory().GetHistoryEntry()), history)
		case x.GetJobDeleted() != nil && x.GetJobDeleted().GetJobId().GetJobId() == sessionJobID:
			what = "job_deleted of the job"
		}
		if what != "" {
			out = append(out, fmt.Sprintf("%s (log index %d)", what, x.GetLogIndex()))
		}
	}
	return out
}

func printSessionFailover(e *env, w *writeLoad, s *sessionSetup, firstOwner string, trials []sessionTrial, bad []string, resets int) {
	out := e.out
	fmt.Fprintln(out, "## session-failover")
	fmt.Fprintln(out)
	fmt.Fprintf(out, "Three norsk-manager processes (fsync on) formed with `--bootstrap-expect 3`, %s. "+
		"A norsk-ctl --mode=worker process (process runtime, `--manager-url` = all three managers) on a cluster slot runs one job, "+
		"one service that never restarts (its shell writes its pid, then execs a process that lives until the bench exits). "+
		"Open-loop writers as in failover (a CreateJob every %s per manager). %d trials; each: wait until the cluster is stable "+
		"(as in failover), the writes have all succeeded for %s, and exactly one manager, the same one for %s, holds the worker's session "+
		"(its own internal Cluster/Liveness lists the node connected: hello verified and the session epoch committed); "+
		"stop writing to it and SIGKILL it (t0); measure t0 → a survivor's Cluster/Liveness lists the node connected (polled every %s), "+
		"t0 → `physical_node_connected` for the node received (the new session's first health ping; the event log is followed on every manager, "+
		"a follower resuming after its last index, so the survivors' streams carry it), t0 → `ListNodes` asked on a survivor lists the node "+
		"connected and STARTED (polled every 50 ms); then restart the killed manager on its data dir and ports and wait until it serves, "+
		"the cluster is stable and the session owner settled again (it may move back).\n\n",
		timingsLine(e.timings), e.writeInterval, len(trials), clearStreak, ownerSettle, pollEvery)
	var sess, evt, list, serving durs
	for _, t := range trials {
		sess.add(t.session, t.sessionOK)
		evt.add(t.event, t.eventOK)
		list.add(t.listed, t.listedOK)
		serving.add(t.serving, t.servingOK)
	}
	fmt.Fprintln(out, latencyHeader)
	sess.row(e, "kill → a survivor holds the worker's session (Cluster/Liveness)")
	evt.row(e, "kill → physical_node_connected for the node")
	list.row(e, "kill → ListNodes on a survivor: node connected, STARTED")
	serving.row(e, "restart → the killed manager SERVING")
	fmt.Fprintln(out)
	fmt.Fprintln(out, "| trial | killed (role) | new holder | session ms | physical_node_connected ms | ListNodes ms | holder after the restart | job pid |")
	fmt.Fprintln(out, "|---|---|---|---|---|---|---|---|")
	msOr := func(d time.Duration, ok bool) string {
		if !ok {
			return "none within " + recoverTimeout.String()
		}
		return fmtMs(ms(d))
	}
	pidsOK := true
	for i, t := range trials {
		role := "follower"
		if t.wasLeader {
			role = "leader"
		}
		pid := fmt.Sprintf("%d", t.pid)
		switch {
		case t.pid == 0:
			pid, pidsOK = "pid file unreadable", false
		case t.pid != s.pid:
			pid, pidsOK = fmt.Sprintf("%d, was %d: restarted", t.pid, s.pid), false
		case !t.pidAlive:
			pid, pidsOK = fmt.Sprintf("%d gone", t.pid), false
		}
		fmt.Fprintf(out, "| %d | %s (%s) | %s | %s | %s | %s | %s | %s |\n", i+1, t.killed, role, t.newOwner,
			msOr(t.session, t.sessionOK), msOr(t.event, t.eventOK), msOr(t.listed, t.listedOK), t.backOwner, pid)
	}
	fmt.Fprintln(out)
	fmt.Fprintf(out, "Session holder before the first trial: %s. Per-trial kill → session (ms): %s.\n\n", firstOwner, sess.perTrial())
	if pidsOK {
		fmt.Fprintf(out, "The job's process kept its pid (%d) and was alive after every kill.\n", s.pid)
	} else {
		fmt.Fprintf(out, "**The job's process did not survive every kill with its pid (%d at the start).**\n", s.pid)
	}
	if len(bad) == 0 {
		fmt.Fprintln(out, "No node_starting, node_started, node_stopping or node_stopped of the worker's node and no change of the job's history was published from the first trial to the end.")
	} else {
		fmt.Fprintf(out, "**Published during the trials: %s.**\n", strings.Join(bad, ", "))
	}
	if resets > 0 {
		fmt.Fprintf(out, "The bench's event followers got %d stream_reset(s) (a resumed stream whose index a restarted manager did not have yet); events in the snapshots that followed are not checked.\n", resets)
	}
	ok, fails, byCode := w.total()
	fmt.Fprintf(out, "All writes of the run: %d acknowledged, %d failed (%s).\n\n", ok, fails, fmtCodes(byCode))
	// The stricter of the measures: the node's first health ping on the new session.
	p99 := evt.p99()
	fmt.Fprintf(out, "Target: kill → worker session back on another manager (physical_node_connected) p99 %s ms < 5000 ms, job pid kept, no node event: %s\n\n",
		fmtMs(ms(p99)), met(evt.fails == 0 && p99 < 5*time.Second && pidsOK && len(bad) == 0))
}
