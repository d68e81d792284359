package placement

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/norsk-oss/norsk-manager/actors"
	"github.com/norsk-oss/norsk-manager/actors/bundle"
	"github.com/norsk-oss/norsk-manager/actors/node"
	"github.com/norsk-oss/norsk-manager/actors/placement/scheduler"
	"github.com/norsk-oss/norsk-manager/actors/roles"
	"github.com/norsk-oss/norsk-manager/persistence"
	"github.com/norsk-oss/norsk-manager/proto/errorpb"
	"github.com/norsk-oss/norsk-manager/proto/internalpb"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
)

// The engine's driver of make-before-break moves (docs/design/placement.md,
// "Moves"). A move lives in its job record (JobRecord.migrations); each pass
// reads it and sends the one step its state calls for, through the job
// grain, with a request id derived from the record's sequence:
//
//	STARTING, no target yet      → choose the node (the chain), StartJob the target role
//	                               (answered "already being started": wait, moveStartResend)
//	STARTING, target's node draining → AbortMigration (failed: handing over would move it again)
//	STARTING, target RUNNING     → HandOverMigration (the grain stops the source)
//	STARTING, target ended       → AbortMigration (failed: the target's last failure)
//	STARTING, too long           → AbortMigration (failed: not running after moveStartTimeout)
//	HANDING_OVER, source gone    → EndMigration (migration_completed)
//	BACKING_OUT, target gone     → EndMigration (migration_aborted, done)
//
// The state is the record's, so a new leader goes on where the old one
// stopped; a step sent twice (two leaders, a retried pass) is applied once.

// moveStartTimeout is how long a move waits for its target to run before
// it is backed out (a target that never starts: a frozen worker, an image
// that never pulls).
const moveStartTimeout = 5 * time.Minute

// moveResend paces the repeats of a stop a move waits for (the source's in
// HANDING_OVER, the target's in BACKING_OUT): a stop sent just before a
// manager died is sent again by the next leader, at most this often.
const moveResend = 5 * time.Second

// move is one move in progress, read by a pass.
type move struct {
	m   *managerpb.Migration
	rec *internalpb.JobRecord
	seq persistence.Seq
	// bundle and js as in candidate: nil for a plain job.
	bundle *internalpb.BundleRecord
	js     *internalpb.BundleJobState
}

// moveState is the engine's memory of the move steps it sent. The zero
// value is ready.
type moveState struct {
	mu sync.Mutex
	// inflight holds the steps sent and not yet answered, by (job, target
	// role). Guarded by mu.
	inflight map[key]bool
	// resent holds when a stop a move waits for was last sent. Guarded by
	// mu.
	resent map[key]time.Time
	// paused holds, by (job, logical role), until when a drain or a
	// rolling update begins no new move of a role whose drain or update
	// move this engine backed out as failed: a target that fails at once
	// (or fits no node) is not tried again every pass.
	// Guarded by mu.
	paused map[key]time.Time
	// rollHeld holds the rolling-update moves the last pass held back, and
	// why (rolling_pass.go). Guarded by mu.
	rollHeld map[key]string
	// starting holds, by (job, target role), the target StartJobs the job
	// grain answered ALREADY_EXISTS ("already being started": its start
	// of the target is still pending on the node): not sent again until
	// the record changes or moveStartResend passes. Guarded by mu.
	starting map[key]startingTarget
}

// startingTarget is a move target's StartJob the grain is still carrying
// out: decided on record sequence seq, answered at at, placing placed.
type startingTarget struct {
	seq    persistence.Seq
	at     time.Time
	placed scheduler.Placed
}

// moveStartResend paces the repeats of a move target's StartJob that the
// job grain answered "already being started" (its own start of the target
// still waits for the node, as during a failover): without it the driver
// asked again on every pass the answer kicked, about every 50 ms.
const moveStartResend = 5 * time.Second

// maxStartingTargets bounds moveState.starting over a long term; forgetting
// an entry only allows one repeat sooner.
const maxStartingTargets = 10000

// drainMovePause is how long a drain waits before it moves a role again
// after its move failed (see moveState.paused).
const drainMovePause = 30 * time.Second

// movesOf returns rec's moves in progress.
func movesOf(r *persistence.WorldReader, bundles map[string]*internalpb.BundleRecord, rec *internalpb.JobRecord, seq persistence.Seq) ([]move, error) {
	if len(rec.GetMigrations()) == 0 {
		return nil, nil
	}
	j := rec.GetJob().GetJob()
	var b *internalpb.BundleRecord
	var js *internalpb.BundleJobState
	if bid, ok := j.GetTags()[bundle.TagBundleID]; ok {
		var err error
		if b, err = bundleOf(r, bundles, bid); err != nil {
			return nil, err
		}
		if b != nil {
			js = derivedState(b, j.GetJobId().GetJobId())
		}
		if js == nil {
			b = nil
		}
	}
	out := make([]move, 0, len(rec.GetMigrations()))
	for _, m := range rec.GetMigrations() {
		out = append(out, move{m: m, rec: rec, seq: seq, bundle: b, js: js})
	}
	return out, nil
}

// MoveRequestID is the request id of a move step (step: "start" is not
// one: the target's StartJob has RequestID) decided on the job record's
// sequence seq: "placement/move/<step>/<job>/<target role>/<seq>".
func MoveRequestID(step, job, target string, seq uint64) string {
	return fmt.Sprintf("placement/move/%s/%s/%s/%d", step, job, target, seq)
}

// migratePass sends the next step of every move of pass w. It runs before
// the pass's placements, so that a target started now holds its room in
// view before anything else is decided.
func (e *Engine) migratePass(ctx context.Context, w *world, view *scheduler.View) {
	for i := range w.moves {
		mv := &w.moves[i]
		job := scheduler.JobID(mv.rec.GetJob().GetJob().GetJobId().GetJobId())
		k := key{job, scheduler.Role(mv.m.GetTargetRole())}
		if e.moveBusy(k) {
			continue
		}
		target := instanceOf(mv.rec, mv.m.GetTargetRole())
		source := instanceOf(mv.rec, mv.m.GetSourceRole())
		if mv.m.GetPhase() != managerpb.Migration_MIGRATION_STARTING {
			e.mu.Lock()
			delete(e.failures, k) // a start refused after the move moved on
			e.mu.Unlock()
		}
		switch mv.m.GetPhase() {
		case managerpb.Migration_MIGRATION_STARTING:
			e.driveStarting(ctx, w, view, mv, k, source, target)
		case managerpb.Migration_MIGRATION_HANDING_OVER:
			if source == nil {
				e.moveStep(ctx, k, "end", mv, &internalpb.JobCommand{Cmd: &internalpb.JobCommand_EndMigration{EndMigration: &internalpb.EndMigration{TargetRole: string(k.role)}}})
				continue
			}
			e.resendStop(ctx, w, k, source)
		case managerpb.Migration_MIGRATION_BACKING_OUT:
			if target == nil {
				e.moveStep(ctx, k, "end", mv, &internalpb.JobCommand{Cmd: &internalpb.JobCommand_EndMigration{EndMigration: &internalpb.EndMigration{TargetRole: string(k.role)}}})
				continue
			}
			e.resendStop(ctx, w, k, target)
		}
	}
}

// driveStarting sends the step of a move that is STARTING its target.
func (e *Engine) driveStarting(ctx context.Context, w *world, view *scheduler.View, mv *move, k key, source, target *internalpb.Instance) {
	abort := func(reason string) {
		if why := mv.m.GetWhy(); why == managerpb.Migration_MIGRATION_DRAIN || why == managerpb.Migration_MIGRATION_UPDATE {
			e.moves.mu.Lock()
			if e.moves.paused == nil {
				e.moves.paused = map[key]time.Time{}
			}
			e.moves.paused[key{k.job, scheduler.Role(roles.LogicalRole(string(k.role)))}] = w.now.Add(drainMovePause)
			e.moves.mu.Unlock()
		}
		e.moveStep(ctx, k, "abort", mv, &internalpb.JobCommand{Cmd: &internalpb.JobCommand_AbortMigration{AbortMigration: &internalpb.AbortMigration{
			SourceRole: mv.m.GetSourceRole(), TargetRole: string(k.role), Reason: reason, Failed: true}}})
	}
	switch {
	case target != nil && target.GetStatus() != internalpb.InstanceStatus_INSTANCE_STOPPING && node.Draining(w.nodeRecs[target.GetNodeId()]):
		// Handing over would only move the job off the node again.
		abort(fmt.Sprintf("the target's node %s is draining", target.GetNodeId()))
		return
	case target != nil && target.GetStatus() == internalpb.InstanceStatus_INSTANCE_RUNNING:
		e.moveStep(ctx, k, "handover", mv, &internalpb.JobCommand{Cmd: &internalpb.JobCommand_HandOverMigration{HandOverMigration: &internalpb.HandOverMigration{TargetRole: string(k.role)}}})
		return
	case w.now.Sub(mv.m.GetStartedAt().AsTime()) > moveStartTimeout:
		abort(fmt.Sprintf("the target was not running %s after the move began", moveStartTimeout))
		return
	case target != nil:
		return // provisioning: wait for the worker's job_started
	case mv.m.GetTargetNodeId() != "":
		abort(fmt.Sprintf("the target instance on node %s ended before it ran: %s", mv.m.GetTargetNodeId(), lastFailureOf(mv.rec, string(k.role))))
		return
	case source == nil:
		abort("the source instance no longer runs")
		return
	}
	e.mu.Lock()
	u, failed := e.failures[k]
	delete(e.failures, k)
	e.mu.Unlock()
	if failed {
		abort(u.Reason) // the target's StartJob was refused
		return
	}
	if p, ok := e.targetStarting(k, mv.seq, w.now); ok {
		// The grain is still starting it: hold its room, send nothing.
		view.Add(p)
		w.tentative[k] = string(p.Node)
		return
	}
	e.startTarget(ctx, w, view, mv, k, abort)
}

// noteTargetStarting records that the job grain answered the StartJob of
// move target k, decided on record sequence seq and placing p,
// ALREADY_EXISTS at now: the grain's start of it is still in flight.
func (e *Engine) noteTargetStarting(k key, seq persistence.Seq, p scheduler.Placed, now time.Time) {
	e.moves.mu.Lock()
	defer e.moves.mu.Unlock()
	if e.moves.starting == nil || len(e.moves.starting) >= maxStartingTargets {
		e.moves.starting = map[key]startingTarget{}
	}
	e.moves.starting[k] = startingTarget{seq: seq, at: now, placed: p}
}

// targetStarting reports whether the StartJob of move target k must not
// be sent again now (see moveState.starting), with what it places: the
// grain answered "already being started" on record sequence seq less than
// moveStartResend before now. A stale entry is forgotten.
func (e *Engine) targetStarting(k key, seq persistence.Seq, now time.Time) (scheduler.Placed, bool) {
	e.moves.mu.Lock()
	defer e.moves.mu.Unlock()
	st, ok := e.moves.starting[k]
	if !ok {
		return scheduler.Placed{}, false
	}
	if st.seq != seq || now.Sub(st.at) >= moveStartResend {
		delete(e.moves.starting, k)
		return scheduler.Placed{}, false
	}
	return st.placed, true
}

// startTarget chooses the target's node with the placement chain (the
// job's requirements, pool and constraints; the node asked for, else any
// node but the source's — for a rolling update any node, the source's
// too when it has room for both) and sends the StartJob of the target role. A move
// no node fits is backed out with the chain's explanation.
func (e *Engine) startTarget(ctx context.Context, w *world, view *scheduler.View, mv *move, k key, abort func(string)) {
	c := newCandidate(mv.rec, mv.seq, mv.bundle, mv.js)
	c.key = k
	var pool *managerpb.Pool
	if c.pool != "" {
		if pool = w.pools[c.pool]; pool == nil {
			abort(fmt.Sprintf("pool %q does not exist", c.pool))
			return
		}
	}
	ask := e.askOf(w, &c, pool)
	if n := mv.m.GetRequestedNodeId(); n != "" {
		ask.Nodes = []scheduler.NodeID{scheduler.NodeID(n)}
	} else if mv.m.GetWhy() != managerpb.Migration_MIGRATION_UPDATE {
		ask.ExcludeNodes = []scheduler.NodeID{scheduler.NodeID(mv.m.GetSourceNodeId())}
	}
	d, err := view.Select(ask)
	if err != nil {
		abort("no node fits the move's target: " + err.Error())
		return
	}
	view.Add(d.Placed...)
	w.tentative[k] = string(d.Node)
	e.log.Info("move: starting the target", "job_id", k.job, "role", mv.m.GetSourceRole(), "target_role", k.role,
		"node_id", mv.m.GetSourceNodeId(), "target_node_id", d.Node)
	e.start(ctx, &c, d, d.Placed[0], w.noteOf(&c, d, true, ask.Peer))
}

// lastFailureOf is the recorded last failure of role in rec, or a text
// saying there is none.
func lastFailureOf(rec *internalpb.JobRecord, role string) string {
	for _, f := range rec.GetLastFailures() {
		if f.GetRole() == role {
			return f.GetReason()
		}
	}
	return "stopped or its node was lost (no failure recorded)"
}

// moveBusy reports whether a step of the move k, or its target's StartJob,
// is in flight, or its target's StartJob is in its retry pause.
func (e *Engine) moveBusy(k key) bool {
	e.moves.mu.Lock()
	busy := e.moves.inflight[k]
	e.moves.mu.Unlock()
	if busy {
		return true
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	_, starting := e.inflight[k]
	return starting
}

// moveStep sends one step of move mv (k: its job and target role) in the
// background, holding k in flight until the grain answers.
func (e *Engine) moveStep(ctx context.Context, k key, step string, mv *move, jc *internalpb.JobCommand) {
	e.moves.mu.Lock()
	if e.moves.inflight == nil {
		e.moves.inflight = map[key]bool{}
	}
	e.moves.inflight[k] = true
	e.moves.mu.Unlock()
	jc.RequestId, jc.JobId = MoveRequestID(step, string(k.job), string(k.role), uint64(mv.seq)), string(k.job)
	log := e.log.With("job_id", k.job, "role", mv.m.GetSourceRole(), "target_role", k.role, "step", step)
	e.inBackground(func() {
		err := e.request(ctx, string(k.job), jc)
		e.moves.mu.Lock()
		delete(e.moves.inflight, k)
		e.moves.mu.Unlock()
		var re *actors.ReplyError
		switch {
		case err == nil:
			log.Info("move step done")
		case errors.As(err, &re) && re.Code == errorpb.Code_FAILED_PRECONDITION:
			log.Debug("move step refused: the record moved on", "reply", err)
		case ctx.Err() != nil:
		default:
			log.Warn("move step", "error", err)
		}
	})
}

// resendStop sends the StopJob of in (a move's source handing over, or its
// target backing out) again, at most once per moveResend: the grain marked
// it STOPPING and sent the stop once, which a manager that died at that
// instant may never have delivered. A stop of a STOPPING instance commits
// nothing and asks the worker again.
func (e *Engine) resendStop(ctx context.Context, w *world, k key, in *internalpb.Instance) {
	rk := key{k.job, scheduler.Role(in.GetRole())}
	e.moves.mu.Lock()
	if e.moves.resent == nil {
		e.moves.resent = map[key]time.Time{}
	}
	last, ok := e.moves.resent[rk]
	if !ok {
		// First sight in this term: the grain's own stop is recent enough.
		e.moves.resent[rk] = w.now
		e.moves.mu.Unlock()
		return
	}
	if w.now.Sub(last) < moveResend {
		e.moves.mu.Unlock()
		return
	}
	e.moves.resent[rk] = w.now
	e.moves.mu.Unlock()
	// The instance id: a repeat sent late (this leader frozen meanwhile)
	// must not stop an instance started on that node under that role since.
	e.moveStep(ctx, k, "stop", &move{m: &managerpb.Migration{SourceRole: in.GetRole()}, seq: persistence.Seq(w.now.UnixMilli())},
		&internalpb.JobCommand{Cmd: &internalpb.JobCommand_Stop{Stop: &internalpb.StopJob{Role: in.GetRole(), NodeId: in.GetNodeId(),
			InstanceId: in.GetInstanceId()}}})
}

// beginMove asks the job grain to begin a move of r (a drain's or a
// rolling update's, why), with a request id of r's record sequence so that
// a repeated decision begins it once (step "begin", "roll" for an update). The role is held in flight (drain.stops) until the grain
// answers.
func (e *Engine) beginMove(ctx context.Context, r *running, why managerpb.Migration_Why, reason string) {
	k := r.key
	e.drain.mu.Lock()
	if e.drain.stops == nil {
		e.drain.stops = map[key]bool{}
	}
	e.drain.stops[k] = true
	e.drain.mu.Unlock()
	log := e.log.With("job_id", k.job, "role", k.role, "node_id", r.node, "reason", reason)
	step := "begin"
	if why == managerpb.Migration_MIGRATION_UPDATE {
		step = "roll"
	}
	cmd := &internalpb.JobCommand{RequestId: MoveRequestID(step, string(k.job), string(k.role), uint64(r.seq)), JobId: string(k.job),
		Cmd: &internalpb.JobCommand_BeginMigration{BeginMigration: &internalpb.BeginMigration{Role: string(k.role), Why: why, Reason: reason, Who: "placement"}}}
	e.inBackground(func() {
		err := e.request(ctx, string(k.job), cmd)
		e.drain.mu.Lock()
		delete(e.drain.stops, k)
		e.drain.mu.Unlock()
		var re *actors.ReplyError
		switch {
		case err == nil:
			log.Info("move begun by placement")
		case errors.As(err, &re) && re.Code == errorpb.Code_FAILED_PRECONDITION:
			log.Debug("move not begun: the record moved on", "reply", err)
		case ctx.Err() != nil:
		default:
			log.Warn("begin move", "error", err)
		}
	})
}

// isMoving reports whether r's job has a move of r's logical role in
// progress.
func isMoving(r *running) bool {
	l := roles.LogicalRole(string(r.role))
	for _, m := range r.rec.GetMigrations() {
		if roles.LogicalRole(m.GetSourceRole()) == l {
			return true
		}
	}
	return false
}

// drainOne begins the make-before-break move of r off its draining node
// (why drain): the room fitsElsewhere found for it is held by the move's
// target from the next pass on (migratePass runs first).
func (e *Engine) drainOne(ctx context.Context, r *running) {
	e.beginMove(ctx, r, managerpb.Migration_MIGRATION_DRAIN, "node "+r.node+" draining")
}

// drainPaused reports whether a drain (or a rolling update) must not move
// r now: this engine backed a move of its logical role out as failed less
// than drainMovePause ago (moveState.paused; an expired pause is
// forgotten), or r's record shows a target of it that failed without
// taking over less than drainMovePause ago — read from the record, so a
// new leader keeps the pause; such failures do not count towards the
// restart ceiling (restart.go), this pause is what paces the retries.
func (e *Engine) drainPaused(r *running, now time.Time) bool {
	logical := roles.LogicalRole(string(r.role))
	if t, ok := lastUntakenFailure(r.rec, logical); ok && now.Before(t.Add(drainMovePause)) {
		return true
	}
	k := key{r.job, scheduler.Role(logical)}
	e.moves.mu.Lock()
	defer e.moves.mu.Unlock()
	until, ok := e.moves.paused[k]
	if ok && !now.Before(until) {
		delete(e.moves.paused, k)
		return false
	}
	return ok
}
