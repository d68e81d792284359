package main

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/norsk-oss/norsk-manager/proto/commonpb"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
)

// The freeze scenario's client. It is the only writer of its jobs and
// makes one call at a time, so every call starts after the previous one
// ended and linearizability says exactly which answers are right: a read
// must return the newest version any earlier call acknowledged or
// returned, an UpdateJob with that version's hash must succeed, a StopJob
// of a running instance and a StartJob of a stopped one must be
// acknowledged, and an acknowledged call must take effect. A call that
// gets no answer (UNAVAILABLE, DEADLINE_EXCEEDED) has an unknown outcome;
// the answers it can explain afterwards are accepted.

// freezeCallTimeout bounds every call of the freeze client.
const freezeCallTimeout = 3 * time.Second

// stopEffectTimeout bounds acknowledged StopJob → the job's process gone
// on the worker, and → the job's record without the instance (the issue:
// "within 10 s").
const stopEffectTimeout = 10 * time.Second

// startEffectTimeout bounds acknowledged StartJob → a new process of the
// job alive on the worker.
const startEffectTimeout = 30 * time.Second

// verdict judges one answer.
type verdict int

const (
	vOK        verdict = iota // the right answer
	vNoAnswer                 // UNAVAILABLE, DEADLINE_EXCEEDED or CANCELED: outcome unknown
	vNothing                  // ABORTED ("modified concurrently; retry"): nothing done, no claim
	vExplained                // a refusal that an earlier call of unknown outcome explains
	vFalse                    // a false answer (or an acknowledged call without its effect)
)

// probeJob is a job that never runs: the client reads it and replaces its
// definition (UpdateJob with current_hash) through every manager. Every
// version it writes carries a unique op tag.
type probeJob struct {
	id, owner string // owner: the manager whose grain it is while all are members
	rev       int    // the newest version known committed: acknowledged, read, or named by a refusal
	hash      int64  // its current_hash
	op        string // its op tag; "" while it is known only by hash (a refusal named it)
	older     map[int64]int
	pending   []string // op tags of updates of unknown outcome based on (rev, hash)
}

// runJob is a job the worker runs; the client stops and starts it.
type runJob struct {
	id, owner, pidFile string
	running            bool   // after the last acknowledged or resolved call
	uncertain          bool   // the last call got no answer (or was acknowledged without effect)
	lastOp             string // "start" or "stop": the call to repeat while uncertain
}

// falseAnswer is one false answer, with when it came (since the phase's
// reference time: SIGSTOP during the freeze, SIGCONT after it).
type falseAnswer struct {
	phase string // "before", "during", "after"
	at    time.Duration
	what  string
}

// callCounts counts the answers of one phase.
type callCounts struct {
	calls, noAnswer, nothing, explained, falses int
}

// freezeCheck is the client and its judgement.
type freezeCheck struct {
	node   string
	probes []*probeJob
	runs   map[string]*runJob // by the manager hosting the job's grain
	ops    int
	phase  string
	ref    time.Time // the phase's reference time
	stopAt time.Time // no call starts after this (zero: none)
	falses []falseAnswer
	counts map[string]*callCounts
}

func newFreezeCheck(node string) *freezeCheck {
	return &freezeCheck{node: node, runs: map[string]*runJob{}, counts: map[string]*callCounts{}}
}

// setPhase starts a phase: answers are counted under name, times taken
// from ref; no call starts after stopAt (zero: no limit).
func (fc *freezeCheck) setPhase(name string, ref, stopAt time.Time) {
	fc.phase, fc.ref, fc.stopAt = name, ref, stopAt
	if fc.counts[name] == nil {
		fc.counts[name] = &callCounts{}
	}
}

func (fc *freezeCheck) count() *callCounts { return fc.counts[fc.phase] }

// falsesIn returns the false answers of a phase.
func (fc *freezeCheck) falsesIn(phase string) []falseAnswer {
	var out []falseAnswer
	for _, f := range fc.falses {
		if f.phase == phase {
			out = append(out, f)
		}
	}
	return out
}

// judge counts a call's outcome and records a false answer.
func (fc *freezeCheck) judge(v verdict, format string, args ...any) verdict {
	c := fc.count()
	c.calls++
	switch v {
	case vNoAnswer:
		c.noAnswer++
	case vNothing:
		c.nothing++
	case vExplained:
		c.explained++
	case vFalse:
		c.falses++
		fc.falses = append(fc.falses, falseAnswer{phase: fc.phase, at: time.Since(fc.ref), what: fmt.Sprintf(format, args...)})
	}
	return v
}

// outOfTime reports whether the phase allows no further call.
func (fc *freezeCheck) outOfTime() bool { return !fc.stopAt.IsZero() && time.Now().After(fc.stopAt) }

// noAnswer classifies err as no answer (outcome unknown) or nothing done.
func noAnswer(err error) (verdict, bool) {
	switch status.Code(err) {
	case codes.Unavailable, codes.DeadlineExceeded, codes.Canceled:
		return vNoAnswer, true
	case codes.Aborted:
		return vNothing, true
	}
	return vOK, false
}

// round runs one consistency round: for every probe job and every manager
// m of ms, JobById through the manager after m in ms ("elsewhere") must
// return the newest version, then UpdateJob through m with that version's
// hash must succeed; then the worker job r is stopped and started through
// via, each call acknowledged and in effect on the worker. The round
// stops at the first call that does not pass, unless all is set (during
// a freeze: make every change the survivors can make), and when the
// phase's time is up. probesOK: every probe call passed.
func (fc *freezeCheck) round(ctx context.Context, ms []*haManager, r *runJob, via *haManager, all bool) (probesOK, ok bool) {
	probesOK = true
	for _, p := range fc.probes {
		for i, m := range ms {
			if fc.outOfTime() {
				return false, false
			}
			passed := fc.read(ctx, p, ms[(i+1)%len(ms)]) == vOK
			if passed || all {
				passed = fc.update(ctx, p, m) == vOK && passed
			}
			if probesOK = probesOK && passed; !passed && !all {
				return false, false
			}
		}
	}
	if fc.outOfTime() {
		return probesOK, false
	}
	ok = fc.cycle(ctx, r, via)
	return probesOK, probesOK && ok
}

// read checks JobById of p through m.
func (fc *freezeCheck) read(ctx context.Context, p *probeJob, m *haManager) verdict {
	cctx, cancel := context.WithTimeout(ctx, freezeCallTimeout)
	resp, err := m.mgr.JobById(cctx, &commonpb.JobId{JobId: p.id})
	cancel()
	if v, ok := noAnswer(err); ok {
		return fc.judge(v, "")
	}
	if err != nil {
		return fc.judge(vFalse, "JobById(%s) via %s: %v (the job exists, version %d)", p.id, m.name, err, p.rev)
	}
	j := resp.GetJob().GetJob()
	op, h := j.GetTags()[freezeOpTag], j.GetCurrentHash()
	switch {
	case h == p.hash && (op == p.op || p.op == "" && slices.Contains(p.pending, op)):
		p.op, p.pending = op, nil
		return fc.judge(vOK, "")
	case h != p.hash && p.op != "" && slices.Contains(p.pending, op):
		// An update of unknown outcome was committed.
		p.advance(op, h)
		return fc.judge(vOK, "")
	}
	if rev, ok := p.older[h]; ok {
		return fc.judge(vFalse, "JobById(%s) via %s returned version %d (hash %d); version %d (hash %d) was acknowledged or read before this call",
			p.id, m.name, rev, h, p.rev, p.hash)
	}
	return fc.judge(vFalse, "JobById(%s) via %s returned hash %d, op %q: not a version the bench wrote (newest %d, hash %d)", p.id, m.name, h, op, p.rev, p.hash)
}

// advance makes (op, hash) p's newest version, one after the current.
func (p *probeJob) advance(op string, hash int64) {
	p.older[p.hash] = p.rev
	p.rev, p.hash, p.op, p.pending = p.rev+1, hash, op, nil
}

// update replaces p's definition through m with the newest hash.
func (fc *freezeCheck) update(ctx context.Context, p *probeJob, m *haManager) verdict {
	if p.op == "" {
		// Known only by the hash a refusal named: a read resolves it first
		// (no call made).
		return vExplained
	}
	fc.ops++
	op := strconv.Itoa(fc.ops)
	job := probeDefinition(p.id, p.rev+1, op)
	job.CurrentHash = p.hash
	cctx, cancel := context.WithTimeout(ctx, freezeCallTimeout)
	resp, err := m.mgr.UpdateJob(cctx, job)
	cancel()
	if err == nil {
		p.advance(op, resp.GetHash())
		return fc.judge(vOK, "")
	}
	if v, ok := noAnswer(err); ok {
		if v == vNoAnswer {
			p.pending = append(p.pending, op)
		}
		return fc.judge(v, "")
	}
	msg := status.Convert(err).Message()
	if cur, named := namedHash(msg); status.Code(err) == codes.FailedPrecondition && named {
		if rev, stale := p.older[cur]; stale {
			return fc.judge(vFalse, "UpdateJob(%s) via %s with the hash of version %d (the newest) refused, naming version %d's hash as current: %s",
				p.id, m.name, p.rev, rev, msg)
		}
		if cur != p.hash && len(p.pending) > 0 {
			// An update of unknown outcome was committed; which one, the
			// next read tells.
			p.older[p.hash] = p.rev
			p.rev, p.hash, p.op = p.rev+1, cur, ""
			return fc.judge(vExplained, "")
		}
	}
	return fc.judge(vFalse, "UpdateJob(%s) via %s with the hash of version %d (the newest): %v", p.id, m.name, p.rev, err)
}

// namedHash extracts the current hash a stale-hash refusal names ("the
// job's current hash is N").
func namedHash(msg string) (int64, bool) {
	_, rest, ok := strings.Cut(msg, "current hash is ")
	if !ok {
		return 0, false
	}
	end := strings.IndexFunc(rest, func(r rune) bool { return r != '-' && (r < '0' || r > '9') })
	if end < 0 {
		end = len(rest)
	}
	n, err := strconv.ParseInt(rest[:end], 10, 64)
	return n, err == nil
}

// cycle stops and starts r through via; true if both were acknowledged and
// took effect. An unknown outcome is first resolved by repeating the call;
// a job known stopped is started first.
func (fc *freezeCheck) cycle(ctx context.Context, r *runJob, via *haManager) bool {
	if r.uncertain {
		op := fc.start
		if r.lastOp == "stop" {
			op = fc.stop
		}
		if op(ctx, r, via) != vOK {
			return false
		}
	}
	if !r.running && (fc.outOfTime() || fc.start(ctx, r, via) != vOK) {
		return false
	}
	return !fc.outOfTime() && fc.stop(ctx, r, via) == vOK && !fc.outOfTime() && fc.start(ctx, r, via) == vOK
}

// stop calls StopJob of r's instance through m and checks its effect.
func (fc *freezeCheck) stop(ctx context.Context, r *runJob, m *haManager) verdict {
	pid := readPID(r.pidFile)
	cctx, cancel := context.WithTimeout(ctx, freezeCallTimeout)
	_, err := m.mgr.StopJob(cctx, &managerpb.StopJobRequest{JobId: &commonpb.JobId{JobId: r.id}, Role: freezeRole,
		NodeId: &commonpb.NodeId{NodeId: fc.node}})
	cancel()
	explained := false
	switch v, ok := noAnswer(err); {
	case err == nil:
	case ok:
		if v == vNoAnswer {
			r.uncertain, r.lastOp = true, "stop"
		}
		return fc.judge(v, "")
	case r.uncertain && status.Code(err) == codes.FailedPrecondition && strings.Contains(err.Error(), "no instance"):
		explained = true // the earlier stop of unknown outcome happened
	default:
		// Trust nothing known about the job any more: the next call (a
		// start, which the refusal says is due) resolves its state.
		r.uncertain, r.lastOp = true, "start"
		return fc.judge(vFalse, "StopJob(%s) via %s of its running instance: %v", r.id, m.name, err)
	}
	r.running, r.uncertain = false, false
	if what := stopEffect(ctx, r, m, pid); what != "" {
		r.uncertain, r.lastOp = true, "stop"
		return fc.judge(vFalse, "StopJob(%s) via %s acknowledged, but %s", r.id, m.name, what)
	}
	if explained {
		return fc.judge(vExplained, "")
	}
	return fc.judge(vOK, "")
}

// stopEffect waits until the job's process pid is gone and m's JobById
// lists no instance; it describes what did not happen ("" if all did).
func stopEffect(ctx context.Context, r *runJob, m *haManager, pid int) string {
	if pid > 0 {
		if _, err := poll(ctx, stopEffectTimeout, pollEvery, "", func() (bool, error) { return !pidAlive(pid), nil }); err != nil {
			return fmt.Sprintf("its process %d still ran %s later", pid, stopEffectTimeout)
		}
	}
	var last string
	if _, err := poll(ctx, stopEffectTimeout, 20*time.Millisecond, "", func() (bool, error) {
		cctx, cancel := context.WithTimeout(ctx, freezeCallTimeout)
		defer cancel()
		resp, err := m.mgr.JobById(cctx, &commonpb.JobId{JobId: r.id})
		if err != nil {
			last = err.Error()
			return false, nil
		}
		last = fmt.Sprintf("instances %v", resp.GetInstances())
		return len(resp.GetInstances()) == 0, nil
	}); err != nil {
		return fmt.Sprintf("JobById via %s still answered %s %s after the process was gone", m.name, last, stopEffectTimeout)
	}
	return ""
}

// start calls StartJob of r through m and checks its effect.
func (fc *freezeCheck) start(ctx context.Context, r *runJob, m *haManager) verdict {
	return fc.startThen(ctx, r, m, nil)
}

// startThen is start calling onAck (if not nil) as soon as the StartJob is
// acknowledged, before it checks the effect.
func (fc *freezeCheck) startThen(ctx context.Context, r *runJob, m *haManager, onAck func()) verdict {
	old := readPID(r.pidFile)
	cctx, cancel := context.WithTimeout(ctx, freezeCallTimeout)
	_, err := m.mgr.StartJob(cctx, &managerpb.StartJobRequest{JobId: &commonpb.JobId{JobId: r.id}, Role: freezeRole,
		NodeId: &commonpb.NodeId{NodeId: fc.node}})
	cancel()
	explained := false
	switch v, ok := noAnswer(err); {
	case err == nil:
	case ok:
		if v == vNoAnswer {
			r.uncertain, r.lastOp = true, "start"
		}
		return fc.judge(v, "")
	case r.uncertain && status.Code(err) == codes.AlreadyExists:
		explained = true // the earlier start of unknown outcome happened
	default:
		// The next call is a stop (the refusal says the job runs): it
		// resolves the job's state.
		r.uncertain, r.lastOp = true, "stop"
		return fc.judge(vFalse, "StartJob(%s) via %s of the stopped job: %v", r.id, m.name, err)
	}
	r.running, r.uncertain = true, false
	if onAck != nil {
		onAck()
	}
	if _, err := poll(ctx, startEffectTimeout, pollEvery, "", func() (bool, error) {
		// A start of unknown outcome that happened may have written the
		// pid file already.
		pid := readPID(r.pidFile)
		return pid > 0 && (pid != old || explained) && pidAlive(pid), nil
	}); err != nil {
		r.uncertain, r.lastOp = true, "stop"
		return fc.judge(vFalse, "StartJob(%s) via %s acknowledged, but no new process ran %s later (pid file: %d, before: %d)",
			r.id, m.name, startEffectTimeout, readPID(r.pidFile), old)
	}
	if explained {
		return fc.judge(vExplained, "")
	}
	return fc.judge(vOK, "")
}

// freezeRole is the role the worker jobs run in.
const freezeRole = "primary"

// freezeOpTag is the tag naming the write that made a probe version.
const freezeOpTag = "op"

// probeDefinition is version rev of probe job id, written by op.
func probeDefinition(id string, rev int, op string) *managerpb.Job {
	return &managerpb.Job{JobId: &commonpb.JobId{JobId: id},
		Tags:     map[string]string{"bench": "freeze", "rev": strconv.Itoa(rev), freezeOpTag: op},
		Services: []*commonpb.Service{{Name: "probe", Restart: commonpb.Service_NEVER, Command: "true"}}}
}

// runDefinition is a worker job whose shell writes its pid to pidFile,
// then execs a process that lives until the bench exits.
func runDefinition(id, pidFile string) *managerpb.Job {
	return &managerpb.Job{JobId: &commonpb.JobId{JobId: id}, Tags: map[string]string{"bench": "freeze"},
		Services: []*commonpb.Service{{Name: "sleeper", Restart: commonpb.Service_NEVER,
			Command: fmt.Sprintf("echo $$ > %s; exec tail -f --pid=%d /dev/null", shellQuote(pidFile), os.Getpid())}}}
}
