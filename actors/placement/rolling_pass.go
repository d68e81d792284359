package placement

import (
	"context"
	"fmt"

	"github.com/norsk-oss/norsk-manager/actors/placement/scheduler"
	"github.com/norsk-oss/norsk-manager/actors/roles"
	"github.com/norsk-oss/norsk-manager/proto/internalpb"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
)

// The engine's side of a rolling update (docs/design/placement.md,
// "Definition drift and rolling updates"): each pass reads which instances
// of UPDATE_STRATEGY_MIGRATE jobs run a stale definition (rollingOrder, from
// the records: a new leader sees the same), and begins the next move of
// each group (nextRollingMoves) through the job grain's BeginMigration with
// why MIGRATION_UPDATE. The move driver (migrate.go) carries it out like any
// other move; its target's StartJob sends the record's current definition,
// so once the move ends nothing of the role is stale.

// rollingPass begins the rolling-update moves of pass w. It runs after
// stopPass, so a drain move begun in this pass holds its bundle (its begin
// is in flight in drain.stops). A move is begun only when its target fits
// a node now (view, the pass's view, which then holds that room for the
// rest of the pass): one that fits nowhere waits, logged, rather than
// being begun and backed out again and again.
func (e *Engine) rollingPass(ctx context.Context, w *world, view *scheduler.View) {
	if w.rolling.Len() == 0 { // no stale instance of a rolling-update job
		e.noteRollHeld(nil)
		return
	}
	order := rollingOrder(w.jobs, w.bundles, w.now)
	if len(order) == 0 {
		e.noteRollHeld(nil)
		return
	}
	busy := e.rollingBusy(w)
	all := w.runningAll()
	byKey := make(map[key]*running, len(all))
	for i := range all {
		byKey[all[i].key] = &all[i]
	}
	held := map[key]string{}
	for _, m := range nextRollingMoves(order, func(g string) bool { return busy[g] }) {
		r := byKey[m.key]
		if r == nil {
			continue
		}
		why := e.rollHeld(w, r)
		if why == "" {
			why = e.rollFits(w, view, r)
		}
		if why != "" {
			held[m.key] = why
			continue
		}
		e.beginMove(ctx, r, managerpb.Migration_MIGRATION_UPDATE,
			fmt.Sprintf("rolling update: runs definition hash %d, current %d", m.runs, m.current))
	}
	e.noteRollHeld(held)
}

// rollingBusy returns the groups (bundle ids, plain job ids) of w with a
// change in progress, which a rolling update must not add a move to: a
// move in a job record (any why: one move at a time per bundle, never both
// replicas moving), an instance not RUNNING (starting or stopping), a role
// with no instance the engine is to place (a bundle's replica down: its
// other replica stays where it is), or a StartJob, move step or begin of
// the engine still unanswered.
func (e *Engine) rollingBusy(w *world) map[string]bool {
	e.mu.Lock()
	starting := make(map[scheduler.JobID]bool, len(e.inflight))
	for k := range e.inflight {
		starting[k.job] = true
	}
	e.mu.Unlock()
	e.moves.mu.Lock()
	for k := range e.moves.inflight {
		starting[k.job] = true
	}
	e.moves.mu.Unlock()
	e.drain.mu.Lock()
	for k := range e.drain.stops {
		starting[k.job] = true
	}
	e.drain.mu.Unlock()
	busy := map[string]bool{}
	for id, rec := range w.jobs {
		group, _, ok := rollingGroup(id, rec.GetJob().GetJob(), w.bundles)
		if !ok {
			continue
		}
		if len(rec.GetMigrations()) > 0 || starting[scheduler.JobID(id)] {
			busy[group] = true
			continue
		}
		for _, in := range rec.GetInstances() {
			if in.GetStatus() != internalpb.InstanceStatus_INSTANCE_RUNNING {
				busy[group] = true
			}
		}
	}
	for i := range w.candidates {
		c := &w.candidates[i]
		if c.bundle != nil {
			busy[c.bundle.GetBundle().GetBundleId().GetBundleId()] = true
		} else {
			busy[string(c.job)] = true
		}
	}
	return busy
}

// rollHeld returns why the rolling move of r must wait, or "": a move of
// its role just failed (drainPaused: the driver backed a failed update
// move out, or the record shows a target that failed without taking over,
// less than drainMovePause ago), or the restart policy of its pool says
// wait (the backoff after the last failure of its logical role) or stop
// (the ceiling). A failed target that never took over is paced by the
// pause alone: it does not count towards the backoff or the ceiling
// (failuresOf). The pause's record part, the backoff and the ceiling are
// read from the record, so a new leader holds the same moves.
func (e *Engine) rollHeld(w *world, r *running) string {
	logical := scheduler.Role(roles.LogicalRole(string(r.role)))
	if e.drainPaused(r, w.now) {
		return fmt.Sprintf("a move of %s failed less than %s ago", logical, drainMovePause)
	}
	c := newCandidate(r.rec, r.seq, r.bundle, r.js)
	var pool *managerpb.Pool
	if c.pool != "" {
		pool = w.pools[c.pool]
	}
	policy := policyOf(pool)
	hist := failuresOf(r.rec, logical)
	v := policy.Next(hist.times, w.now)
	switch {
	case v.Exceeded:
		return fmt.Sprintf("restart ceiling reached (%d failures of %s within %s; last: %s)", len(hist.times), logical, policy.Window, hist.last)
	case v.Wait > 0:
		return fmt.Sprintf("restart backoff after the last failure of %s (last: %s)", logical, hist.last)
	}
	return ""
}

// rollFits returns "" if the target of r's rolling move fits a node now,
// holding that room in view; else why not (the chain's explanation). The
// ask is the move driver's (migrate.go, startTarget) for a move of why
// update: the job's requirements, pool, constraints and bundle rules, any
// node, the source's included.
func (e *Engine) rollFits(w *world, view *scheduler.View, r *running) string {
	c := newCandidate(r.rec, r.seq, r.bundle, r.js)
	c.key = key{r.job, scheduler.Role(roles.TargetRole(string(r.role), r.rec.GetMoveCount()+1))}
	var pool *managerpb.Pool
	if c.pool != "" {
		if pool = w.pools[c.pool]; pool == nil {
			return fmt.Sprintf("pool %q does not exist", c.pool)
		}
	}
	d, err := view.Select(e.askOf(w, &c, pool))
	if err != nil {
		return "no node fits the new instance: " + err.Error()
	}
	view.Add(d.Placed...)
	return ""
}

// noteRollHeld logs, once per change of its reason, each rolling move held
// back (held: by job and role, why), and keeps held as the pass's set.
func (e *Engine) noteRollHeld(held map[key]string) {
	e.moves.mu.Lock()
	old := e.moves.rollHeld
	e.moves.rollHeld = held
	e.moves.mu.Unlock()
	for k, why := range held {
		if old[k] != why {
			e.log.Warn("rolling update waiting", "job_id", k.job, "role", k.role, "reason", why)
		}
	}
}
