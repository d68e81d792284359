package main

import (
	"context"
	"fmt"
	"syscall"
	"time"
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
	victim, err := s.prepare(ctx, &t, want)
	if err != nil {
		return t, err
	}
	r := fc.runs[victim.name]
	pids := s.otherPIDs(victim)
	marks := map[string]logMark{}
	for _, m := range c.ms {
		marks[m.name] = markLog(m)
	}
	// A bench that fails mid-trial must not leave the victim stopped.
	defer func() { _ = victim.proc.cmd.Process.Signal(syscall.SIGCONT) }()
	th, err := s.frozen(ctx, &t, victim, r)
	if err != nil {
		return t, err
	}
	s.afterThaw(ctx, &t, victim, r, marks[victim.name], th.at)
	// Watched until the cluster is stable again, so that "for good" has
	// an end in every trial.
	_, stableErr := c.waitStable(ctx, recoverTimeout)
	t.record(th, th.watch.stop())
	s.readLogs(&t, victim, marks, th.at)
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

// prepare waits for a stable cluster and a settled session holder, picks
// the victim for the wanted role and runs rounds through every manager
// until one passes.
func (s *freezeSetup) prepare(ctx context.Context, t *freezeTrial, want string) (*haManager, error) {
	c, fc := s.c, s.fc
	if _, err := c.waitStable(ctx, recoverTimeout); err != nil {
		return nil, err
	}
	holder, err := waitOwner(ctx, c, s.node)
	if err != nil {
		return nil, err
	}
	leader, _, err := agreedLeader(ctx, c.ms)
	if err != nil || leader == nil {
		return nil, fmt.Errorf("no agreed leader after the session settled: %v", err)
	}
	victim, role := pickVictim(c.ms, want, leader, holder)
	t.victim, t.role, t.leaderBefore = victim.name, role, leader.name
	fc.setPhase("before", time.Now(), time.Time{})
	_, err = poll(ctx, recoverTimeout, 50*time.Millisecond, "a consistent round before the freeze", func() (bool, error) {
		_, ok := fc.round(ctx, c.ms, fc.runs[victim.name], victim, false)
		return ok, nil
	})
	return victim, err
}

// frozen freezes the victim (freezeAtStart), runs rounds through the
// survivors until freezeQuiet before SIGCONT, leaves the victim's job
// stopped, and returns the thaw (SIGCONT comes from a timer, on time
// whatever the client is doing).
func (s *freezeSetup) frozen(ctx context.Context, t *freezeTrial, victim *haManager, r *runJob) (thaw, error) {
	c, fc := s.c, s.fc
	var survivors []*haManager
	for _, m := range c.ms {
		if m != victim {
			survivors = append(survivors, m)
		}
	}
	frozen, err := s.freezeAtStart(ctx, victim, r)
	if err != nil {
		return thaw{}, err
	}
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
		return th, th.err
	}
	t.frozen = th.at.Sub(frozen)
	t.lateStart = time.Since(th.at)
	return th, nil
}

// record keeps what the watch of the thawed manager saw, since SIGCONT.
func (t *freezeTrial) record(th thaw, seen thawSeen) {
	if !seen.first.IsZero() {
		t.serveFirst, t.serveFirstOK = seen.first.Sub(th.at), true
	}
	if !seen.streak.IsZero() {
		t.serveGood, t.serveOK = seen.streak.Sub(th.at), true
	}
	if !seen.caught.IsZero() && th.target > 0 {
		t.caughtUp, t.caughtOK = seen.caught.Sub(th.at), true
	}
	t.serveDowns = seen.downs
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
