package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	pacluster "github.com/asynkron/protoactor-go/cluster"

	"github.com/norsk-oss/norsk-manager/proto/commonpb"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
)

// freezeSettleRounds is how many consistency rounds must pass after the
// thawed manager rejoined and after the first passing round before a
// trial ends: the rejoin moves the grains back, so "consistent for good"
// needs rounds after it.
const freezeSettleRounds = 3

// freezeTrialTimeout bounds SIGCONT → the end of a trial.
const freezeTrialTimeout = 90 * time.Second

// freezeQuiet is how long before SIGCONT the client stops starting calls
// through the survivors, so that the first round after SIGCONT (which a
// timer sends) usually starts at once.
const freezeQuiet = freezeCallTimeout

// Victim roles, in the order the trials take them.
const (
	roleLeader  = "leader"
	roleSession = "session holder"
	roleJobHost = "job host"
)

var freezeRoles = []string{roleLeader, roleSession, roleJobHost}

// freezeTrial is what one freeze measured. Durations are since SIGCONT.
type freezeTrial struct {
	victim, role           string // role: the victim's roles when frozen ("leader, session holder", …)
	leaderBefore, leaderAt string // the leader before the freeze and at the end of the trial
	sessionAt              string // the session holder at the end (settled)
	frozen                 time.Duration
	serveFirst, serveGood  time.Duration
	serveFirstOK, serveOK  bool
	serveDowns             int
	caughtUp               time.Duration // → the victim applied what the leader had applied at SIGCONT
	caughtOK               bool
	rejoinDecided          time.Duration
	rejoined               time.Duration
	rejoinOK               bool
	rejoins                int      // rejoin lines the victim logged after SIGCONT
	otherRejoins           []string // other managers that logged a rejoin
	passivated             time.Duration
	passivatedOK           bool
	probesAt, firstAt      time.Duration // the first round whose probe part / whole passed
	goodAt                 time.Duration // consistent for good: every round from then on passed
	probesOK, firstOK      bool
	goodOK                 bool
	rounds, passed         int // rounds after SIGCONT
	duringRounds           int // rounds through the survivors during the freeze
	duringPassed           int
	roundTimes             []time.Duration // durations of the passing rounds after SIGCONT
	jobsNote               string          // the worker jobs not commanded in the trial that did not keep their process
	falseFrom, falseTo     int             // the trial's false answers: freezeCheck.falses[falseFrom:falseTo]
	lateStart              time.Duration   // SIGCONT → the client's first call after it (it was still busy with the survivors)
}

// freezeSetup is the cluster, the worker and the jobs of the scenario.
type freezeSetup struct {
	e      *env
	c      *haCluster
	node   string
	worker *child
	fc     *freezeCheck
}

// runFreeze runs a 3-manager cluster and one real worker on a cluster
// slot, with a worker job and a probe job whose grains each manager hosts;
// e.freezeTrials times it SIGSTOPs a manager for e.freezeFor (the leader,
// the follower holding the worker's session, a follower hosting only
// jobs, in turn), runs consistency rounds through the survivors meanwhile,
// SIGCONTs it and measures until every manager answers consistently.
func runFreeze(ctx context.Context, e *env) error {
	c, err := e.newCluster("freeze", 3, e.managerLogLevel)
	if err != nil {
		return err
	}
	defer c.close()
	if err := c.startAll(); err != nil {
		return err
	}
	leader, err := c.waitStable(ctx, recoverTimeout)
	if err != nil {
		return err
	}
	s := &freezeSetup{e: e, c: c}
	defer s.cleanup()
	if err := s.start(ctx, leader); err != nil {
		return err
	}
	var trials []freezeTrial
	started := time.Now()
	for i, k := 0, 0; i < e.freezeTrials; i++ {
		want := freezeRoles[k%len(freezeRoles)]
		t, err := s.trial(ctx, want)
		if err != nil {
			// What the trials found so far stands; the error is part of it.
			printFreeze(e, s, trials, time.Since(started))
			err = fmt.Errorf("trial %d (victim %s, %s): %w", i+1, t.victim, t.role, err)
			printNote(e, "**The run ended early:** "+err.Error()+freezeFalseNote(s.fc.falses[t.falseFrom:]))
			return fmt.Errorf("%w\nworker log:\n%s", err, s.worker.tail())
		}
		trials = append(trials, t)
		// A session-holder trial that found the session holder leading froze
		// the leader: the next trial is the session-holder trial again (the
		// session holder follows then: the others elected a new leader).
		if want != roleSession || t.role != roleLeader+", "+roleSession {
			k++
		}
	}
	printFreeze(e, s, trials, time.Since(started))
	if err := s.cleanup(); err != nil {
		printNote(e, err.Error())
	}
	printNote(e, c.closeNote())
	return nil
}

// owner returns the manager whose grain (kind, id) is while every manager
// of c is a member: protoactor's rendezvous hash over the actor addresses
// (a rejoin keeps the address, so it keeps the grains).
func (c *haCluster) owner(kind, id string) *haManager {
	rdv := pacluster.NewRendezvous()
	var members []*pacluster.Member
	for _, m := range c.ms {
		host, port := splitAddr(m.actor)
		members = append(members, &pacluster.Member{Id: m.name, Host: host, Port: port, Kinds: []string{kind}})
	}
	rdv.UpdateMembers(members)
	addr := rdv.GetByClusterIdentity(pacluster.NewClusterIdentity(id, kind))
	for _, m := range c.ms {
		if m.actor == addr {
			return m
		}
	}
	return nil
}

func splitAddr(addr string) (string, int32) {
	i := strings.LastIndexByte(addr, ':')
	var port int32
	fmt.Sscan(addr[i+1:], &port)
	return addr[:i], port
}

// ownedID returns the first id prefix-N whose job grain m hosts.
func (c *haCluster) ownedID(prefix string, m *haManager) string {
	for i := 0; ; i++ {
		if id := fmt.Sprintf("%s-%d", prefix, i); c.owner("job", id) == m {
			return id
		}
	}
}

// start registers a slot whose node grain a follower hosts (so that the
// leader and the session holder can be frozen apart), starts the worker,
// and creates, per manager, a probe job and a running worker job whose
// grains that manager hosts.
func (s *freezeSetup) start(ctx context.Context, leader *haManager) error {
	c := s.c
	var token string
	for i := 0; s.node == ""; i++ {
		var slot *managerpb.RegisterClusterNodeResponse
		if err := retryUnavailable(ctx, func(ctx context.Context) (err error) {
			slot, err = leader.mgr.RegisterClusterNode(ctx, &managerpb.RegisterClusterNodeRequest{NodeName: fmt.Sprintf("bench-freeze-%d", i)})
			return err
		}); err != nil {
			return fmt.Errorf("RegisterClusterNode: %w", err)
		}
		if c.owner("node", slot.GetNodeId().GetNodeId()) != leader {
			s.node, token = slot.GetNodeId().GetNodeId(), slot.GetToken()
		}
	}
	s.fc = newFreezeCheck(s.node)
	if err := s.startWorker(ctx, token); err != nil {
		return err
	}
	for _, m := range c.ms {
		p := &probeJob{id: c.ownedID("freeze-probe-"+m.name, m), owner: m.name, older: map[int64]int{}, op: "create"}
		var h *managerpb.JobHash
		if err := retryUnavailable(ctx, func(ctx context.Context) (err error) {
			h, err = leader.mgr.CreateJob(ctx, probeDefinition(p.id, 0, p.op))
			return err
		}); err != nil {
			return fmt.Errorf("CreateJob(%s): %w", p.id, err)
		}
		p.hash = h.GetHash()
		s.fc.probes = append(s.fc.probes, p)

		id := c.ownedID("freeze-run-"+m.name, m)
		r := &runJob{id: id, owner: m.name, pidFile: filepath.Join(c.dir, id+".pid")}
		if err := retryUnavailable(ctx, func(ctx context.Context) error {
			_, err := leader.mgr.CreateJob(ctx, runDefinition(r.id, r.pidFile))
			return err
		}); err != nil {
			return fmt.Errorf("CreateJob(%s): %w", r.id, err)
		}
		s.fc.runs[m.name] = r
	}
	s.fc.setPhase("setup", time.Now(), time.Time{})
	for _, m := range c.ms {
		r := s.fc.runs[m.name]
		if _, err := poll(ctx, recoverTimeout, 100*time.Millisecond, "StartJob("+r.id+")", func() (bool, error) {
			return s.fc.start(ctx, r, leader) == vOK, nil
		}); err != nil {
			return err
		}
	}
	if f := s.fc.falsesIn("setup"); len(f) > 0 {
		return fmt.Errorf("false answers while setting up: %v", f)
	}
	return nil
}

// startWorker starts norsk-ctl --mode=worker on the slot (every manager in
// --manager-url) and waits until ListNodes lists the node connected and
// STARTED.
func (s *freezeSetup) startWorker(ctx context.Context, token string) error {
	e, c := s.e, s.c
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
		"--mode=worker", "--token="+token, "--manager-url="+c.urls(),
		fmt.Sprintf("--listen=127.0.0.1:%d", port), "--state-dir="+stateDir, "--log-level=info")
	if err != nil {
		return err
	}
	_, err = poll(ctx, recoverTimeout, 100*time.Millisecond, "the worker's node connected and STARTED", func() (bool, error) {
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		r, err := c.ms[0].mgr.ListNodes(cctx, &managerpb.ListNodesRequest{})
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
	if err != nil {
		return fmt.Errorf("%w\nworker log:\n%s", err, s.worker.tail())
	}
	return nil
}

// pickVictim returns the manager to freeze for role and its roles at that
// moment. The session holder is fixed (disthash by address); when it
// leads, a session-holder trial freezes the leader holding the session.
func pickVictim(ms []*haManager, want string, leader, holder *haManager) (*haManager, string) {
	switch {
	case want == roleLeader && leader == holder:
		return leader, roleLeader + ", " + roleSession
	case want == roleLeader:
		return leader, roleLeader
	case want == roleSession && holder == leader:
		return holder, roleLeader + ", " + roleSession
	case want == roleSession:
		return holder, "follower, " + roleSession
	}
	for _, m := range ms {
		if m != leader && m != holder {
			return m, "follower, " + roleJobHost
		}
	}
	return nil, ""
}

// trial runs one freeze: settle, pick the victim, a passing round through
// every manager, SIGSTOP, rounds through the survivors, SIGCONT at
// e.freezeFor, rounds through every manager (the victim's worker job
// commanded through the victim) until consistent for good.
func (s *freezeSetup) trial(ctx context.Context, want string) (t freezeTrial, err error) {
	c, fc := s.c, s.fc
	t.falseFrom = len(fc.falses)
	defer func() { t.falseTo = len(fc.falses) }()
	if _, err := c.waitStable(ctx, recoverTimeout); err != nil {
		return t, err
	}
	holder, err := waitOwner(ctx, c, s.node)
	if err != nil {
		return t, err
	}
	leader, _, err := agreedLeader(ctx, c.ms)
	if err != nil || leader == nil {
		return t, fmt.Errorf("no agreed leader after the session settled: %v", err)
	}
	victim, role := pickVictim(c.ms, want, leader, holder)
	t.victim, t.role, t.leaderBefore = victim.name, role, leader.name
	r := fc.runs[victim.name]

	fc.setPhase("before", time.Now(), time.Time{})
	if _, err := poll(ctx, recoverTimeout, 50*time.Millisecond, "a consistent round before the freeze", func() (bool, error) {
		_, ok := fc.round(ctx, c.ms, r, victim, false)
		return ok, nil
	}); err != nil {
		return t, err
	}
	pids := s.otherPIDs(victim)
	marks := map[string]logMark{}
	var survivors []*haManager
	for _, m := range c.ms {
		marks[m.name] = markLog(m)
		if m != victim {
			survivors = append(survivors, m)
		}
	}

	// A bench that fails mid-trial must not leave the victim stopped.
	defer func() { _ = victim.proc.cmd.Process.Signal(syscall.SIGCONT) }()
	frozen, err := s.freezeAtStart(ctx, victim, r)
	if err != nil {
		return t, err
	}
	// SIGCONT comes on time from a timer, whatever the client is doing.
	thawCh := thawAt(victim, survivors, c.ms, frozen.Add(s.e.freezeFor))
	fc.setPhase("during", frozen, frozen.Add(s.e.freezeFor-freezeQuiet))
	for k := 0; !fc.outOfTime(); k++ {
		t.duringRounds++
		if _, ok := fc.round(ctx, survivors, r, survivors[k%len(survivors)], true); ok {
			t.duringPassed++
		} else {
			pace(ctx)
		}
	}
	// Leave the victim's job stopped: what the thawed victim last knew
	// (the job starting) is then as wrong as it can be.
	for try := 0; try < 2 && (r.running || r.uncertain); try++ {
		fc.stop(ctx, r, survivors[try%len(survivors)])
	}
	th := <-thawCh
	if th.err != nil {
		th.watch.stop()
		return t, th.err
	}
	thawed, target, w := th.at, th.target, th.watch
	t.frozen = thawed.Sub(frozen)
	t.lateStart = time.Since(thawed)
	s.afterThaw(ctx, &t, victim, r, marks[victim.name], thawed)
	// Watched until the cluster is stable again, so that "for good" has
	// an end in every trial.
	_, stableErr := c.waitStable(ctx, recoverTimeout)
	seen := w.stop()
	if !seen.first.IsZero() {
		t.serveFirst, t.serveFirstOK = seen.first.Sub(thawed), true
	}
	if !seen.streak.IsZero() {
		t.serveGood, t.serveOK = seen.streak.Sub(thawed), true
	}
	if !seen.caught.IsZero() && target > 0 {
		t.caughtUp, t.caughtOK = seen.caught.Sub(thawed), true
	}
	t.serveDowns = seen.downs
	s.readLogs(&t, victim, marks, thawed)
	t.jobsNote = s.checkPIDs(pids)
	if stableErr != nil {
		return t, fmt.Errorf("after the thaw: %w", stableErr)
	}
	if h, err := waitOwner(ctx, c, s.node); err == nil {
		t.sessionAt = h.name
	}
	if l, _, err := agreedLeader(ctx, c.ms); err == nil && l != nil {
		t.leaderAt = l.name
	}
	return t, nil
}

// freezeAtStart SIGSTOPs the victim the moment a StartJob of r through it
// is acknowledged (stopping r through it first if it runs), so that the
// worker's job_started is still on its way to the victim's node grain,
// and returns the time of SIGSTOP.
func (s *freezeSetup) freezeAtStart(ctx context.Context, victim *haManager, r *runJob) (time.Time, error) {
	fc := s.fc
	var frozen time.Time
	var sigErr error
	onAck := func() {
		sigErr = victim.proc.cmd.Process.Signal(syscall.SIGSTOP)
		frozen = time.Now()
	}
	_, err := poll(ctx, recoverTimeout, 50*time.Millisecond, "a StartJob through the victim to freeze it at", func() (bool, error) {
		if r.running && !r.uncertain && fc.stop(ctx, r, victim) != vOK {
			return false, nil
		}
		fc.startThen(ctx, r, victim, onAck)
		return !frozen.IsZero(), sigErr
	})
	if err != nil {
		return time.Time{}, err
	}
	return frozen, sigErr
}

// thaw is a SIGCONT: when, the catch-up target (the leader's applied
// index just before), and the watch of the thawed manager started then.
type thaw struct {
	at     time.Time
	target uint64
	watch  *thawWatch
	err    error
}

// thawAt SIGCONTs victim at the given time, from a timer: it reads the
// leader's applied index among the survivors first, and starts watching
// the victim right after the signal.
func thawAt(victim *haManager, survivors, all []*haManager, at time.Time) <-chan thaw {
	ch := make(chan thaw, 1)
	time.AfterFunc(time.Until(at), func() {
		var th thaw
		if l, sts, err := agreedLeader(context.Background(), survivors); err == nil && l != nil {
			for i, st := range sts {
				if survivors[i] == l {
					th.target = st.GetAppliedIndex()
				}
			}
		}
		th.err = victim.proc.cmd.Process.Signal(syscall.SIGCONT)
		th.at = time.Now()
		th.watch = watchThaw(victim, all, th.target)
		ch <- th
	})
	return ch
}

// afterThaw runs rounds through every manager, the victim's worker job
// commanded through the victim, until the victim logged its rejoin and
// freezeSettleRounds rounds passed after that and after the first passing
// round (or freezeTrialTimeout).
func (s *freezeSetup) afterThaw(ctx context.Context, t *freezeTrial, victim *haManager, r *runJob, mark logMark, thawed time.Time) {
	fc := s.fc
	fc.setPhase("after", thawed, thawed.Add(freezeTrialTimeout))
	var good time.Time
	settled := 0
	for !fc.outOfTime() && settled < freezeSettleRounds && ctx.Err() == nil {
		begin := time.Now()
		probesOK, ok := fc.round(ctx, s.c.ms, r, victim, false)
		end := time.Now()
		t.rounds++
		if probesOK && !t.probesOK {
			t.probesAt, t.probesOK = end.Sub(thawed), true
		}
		if !ok {
			good = time.Time{}
			settled = 0
			pace(ctx)
			continue
		}
		t.passed++
		t.roundTimes = append(t.roundTimes, end.Sub(begin))
		if !t.firstOK {
			t.firstAt, t.firstOK = end.Sub(thawed), true
		}
		if good.IsZero() {
			good = end
		}
		if rj := mark.logged(logRejoined); len(rj) > 0 && begin.After(rj[0]) {
			settled++
		}
	}
	if !good.IsZero() && settled >= freezeSettleRounds {
		t.goodAt, t.goodOK = good.Sub(thawed), true
	}
}

// pace spaces out rounds that fail at once (a caller's retry pace, not
// synchronisation).
func pace(ctx context.Context) {
	select {
	case <-ctx.Done():
	case <-time.After(50 * time.Millisecond):
	}
}

// readLogs times the victim's rejoin and stale node activation's
// passivation from its log, and notes rejoins of the other managers.
func (s *freezeSetup) readLogs(t *freezeTrial, victim *haManager, marks map[string]logMark, thawed time.Time) {
	vm := marks[victim.name]
	if d := vm.logged(logRejoinDecided); len(d) > 0 {
		t.rejoinDecided = d[0].Sub(thawed)
	}
	if rj := vm.logged(logRejoined); len(rj) > 0 {
		t.rejoined, t.rejoinOK, t.rejoins = rj[0].Sub(thawed), true, len(rj)
	}
	if p := vm.logged(logPassivating); len(p) > 0 {
		t.passivated, t.passivatedOK = p[0].Sub(thawed), true
	}
	for _, m := range s.c.ms {
		if m != victim {
			if n := len(marks[m.name].logged(logRejoined)); n > 0 {
				t.otherRejoins = append(t.otherRejoins, fmt.Sprintf("%s (%d)", m.name, n))
			}
		}
	}
}

// otherPIDs returns the processes of the worker jobs not commanded in a
// trial with this victim.
func (s *freezeSetup) otherPIDs(victim *haManager) map[string]int {
	out := map[string]int{}
	for name, r := range s.fc.runs {
		if name != victim.name {
			out[r.pidFile] = readPID(r.pidFile)
		}
	}
	return out
}

// checkPIDs describes the jobs whose process changed or died ("" if none).
func (s *freezeSetup) checkPIDs(pids map[string]int) string {
	var bad []string
	for f, pid := range pids {
		if now := readPID(f); now != pid || !pidAlive(pid) {
			bad = append(bad, fmt.Sprintf("%s: pid %d, now %d (alive %t)", filepath.Base(f), pid, now, pidAlive(now)))
		}
	}
	return strings.Join(bad, "; ")
}

// cleanup stops the worker jobs (StopJob, then SIGKILL of a process still
// there) and the worker. Idempotent.
func (s *freezeSetup) cleanup() error {
	var errs []error
	if s.fc != nil {
		runs := s.fc.runs
		s.fc.runs = nil
		for _, r := range runs {
			pid := readPID(r.pidFile)
			for _, m := range s.c.running() {
				cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				_, err := m.mgr.StopJob(cctx, &managerpb.StopJobRequest{JobId: &commonpb.JobId{JobId: r.id}, Role: freezeRole,
					NodeId: &commonpb.NodeId{NodeId: s.node}})
				cancel()
				if err == nil {
					break
				}
			}
			if pid > 0 {
				_, _ = poll(context.Background(), 10*time.Second, 50*time.Millisecond, "", func() (bool, error) { return !pidAlive(pid), nil })
				if pidAlive(pid) && ourJobProcess(pid) {
					_ = syscall.Kill(pid, syscall.SIGKILL)
					errs = append(errs, fmt.Errorf("%s's process %d did not stop after StopJob; killed", r.id, pid))
				}
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
