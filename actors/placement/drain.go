package placement

import (
	"context"
	"errors"
	"fmt"
	"sync"

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

// Reasons the engine stops an instance, logged with the stop.
const (
	stopDrain   = "node draining"
	stopDormant = "bundle job dormant"
)

// running is one recorded instance of a job the engine may have to stop:
// of an auto-placed job, or of a job of a live bundle.
type running struct {
	key
	rec    *internalpb.JobRecord
	seq    persistence.Seq
	node   string
	status internalpb.InstanceStatus
	// bundle and js are the bundle record and its state of this derived
	// job; nil for a plain job, or a derived job its (live) bundle's
	// record does not list.
	bundle *internalpb.BundleRecord
	js     *internalpb.BundleJobState
}

// bundleID is the id of r's bundle, "" for a plain job.
func (r *running) bundleID() string { return r.bundle.GetBundle().GetBundleId().GetBundleId() }

// runningOf returns rec's instances the engine may have to stop (see
// running). A derived job of a bundle that is not LIVE is left to the
// bundle grain, which stops a DELETING bundle's jobs itself.
func runningOf(r *persistence.WorldReader, bundles map[string]*internalpb.BundleRecord, rec *internalpb.JobRecord, seq persistence.Seq) ([]running, error) {
	if len(rec.GetInstances()) == 0 {
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
		if b == nil || b.GetBundle().GetState() != managerpb.BundleState_BUNDLE_STATE_LIVE {
			return nil, nil
		}
		if js = derivedState(b, j.GetJobId().GetJobId()); js == nil {
			return nil, nil
		}
	} else if j.GetAutoPlacement() == nil {
		return nil, nil // started by hand: the operator's to stop
	}
	var out []running
	for _, in := range rec.GetInstances() {
		out = append(out, running{key: key{scheduler.JobID(j.GetJobId().GetJobId()), scheduler.Role(in.GetRole())},
			rec: rec, seq: seq, node: in.GetNodeId(), status: in.GetStatus(), bundle: b, js: js})
	}
	return out, nil
}

// drainState is the engine's memory of its stops: those in flight, and
// the draining nodes already logged as drained. The zero value is ready.
type drainState struct {
	mu sync.Mutex
	// stops holds the StopJobs sent and not yet answered. Guarded by mu.
	stops map[key]bool
	// drained holds the draining nodes "node drained" was logged for in
	// this term. Guarded by mu.
	drained map[string]bool
	// waiting holds why each (job, role) on a draining node fitting no
	// other node was last left there, logged once per change. Guarded by
	// mu.
	waiting map[key]string
}

// StopRequestID is the request id of the engine's StopJob of (job, role)
// decided on the job record's sequence seq: "placement/stop/<job>/<role>/<seq>".
// As for RequestID, every decision on the same record version sends the
// same id, so the job grain applies it once.
func StopRequestID(job, role string, seq uint64) string {
	return fmt.Sprintf("placement/stop/%s/%s/%d", job, role, seq)
}

// stopPass decides the stops of pass w (placement.md, "Drain and dormant
// jobs"): every instance of a dormant bundle job; on a DRAINING node every
// instance of an auto-placed job that fits another node now (view, the
// pass's view after its placements), a bundle's one move (a job and its
// co_locate_with group) at a time and only while the other replica of each
// of them runs. It runs after the placements of the same pass, so a role
// placed in this pass counts as not running yet.
func (e *Engine) stopPass(ctx context.Context, w *world, view *scheduler.View) {
	if w.draining == 0 && w.dormant.Len() == 0 {
		// No draining node, no dormant bundle job running: nothing to
		// stop (the stops in flight are answered by their grains).
		e.logDrained(w, nil)
		e.logWaiting(map[key]string{})
		return
	}
	all := w.runningAll()
	e.drain.mu.Lock()
	inflight := make(map[key]bool, len(e.drain.stops))
	for k := range e.drain.stops {
		inflight[k] = true
	}
	e.drain.mu.Unlock()
	byKey := make(map[key]*running, len(all))
	moving := map[string]bool{}
	for i := range all {
		r := &all[i]
		byKey[r.key] = r
		if l := (key{r.job, scheduler.Role(roles.LogicalRole(string(r.role)))}); l != r.key {
			if o, ok := byKey[l]; !ok || o.status != internalpb.InstanceStatus_INSTANCE_RUNNING {
				byKey[l] = r // a moved role answers for its logical role
			}
		}
		if r.bundle != nil && (r.status != internalpb.InstanceStatus_INSTANCE_RUNNING || inflight[r.key] || isMoving(r)) {
			moving[r.bundleID()] = true
		}
	}
	for i := range w.candidates {
		if c := &w.candidates[i]; c.bundle != nil {
			moving[c.bundle.GetBundle().GetBundleId().GetBundleId()] = true
		}
	}
	left := map[string]int{} // auto-placed instances left on each draining node
	waiting := map[key]string{}
	elsewhere := func(group []*running, wait bool) string {
		return e.fitsElsewhere(w, view, group, w.placed, wait)
	}
	fits := func(group []*running) bool {
		why := elsewhere(group, true)
		if why != "" {
			waiting[group[0].key] = why
		}
		return why == ""
	}
	e.holdMovesInProgress(w, inflight, elsewhere)
	for i := range all {
		r := &all[i]
		if r.status == internalpb.InstanceStatus_INSTANCE_STOPPING || inflight[r.key] {
			if node.Draining(w.nodeRecs[r.node]) {
				left[r.node]++
			}
			continue
		}
		if r.js.GetDormant() {
			e.stop(ctx, r, stopDormant)
			inflight[r.key] = true
			continue
		}
		if !node.Draining(w.nodeRecs[r.node]) {
			continue
		}
		left[r.node]++
		if isMoving(r) || e.drainPaused(r, w.now) {
			continue // its move (migrate.go) takes it off the node, or failed just now
		}
		if r.bundle == nil {
			if !fits([]*running{r}) {
				continue
			}
			e.drainOne(ctx, r)
			inflight[r.key] = true
			continue
		}
		bid := r.bundleID()
		if moving[bid] {
			continue
		}
		group := moveGroup(r, byKey, inflight)
		if !peersRunning(group, byKey, w) || !fits(group) {
			continue
		}
		moving[bid] = true
		if len(group) == 1 {
			e.drainOne(ctx, r)
			inflight[r.key] = true
			continue
		}
		for _, m := range group { // a co_locate_with group: stop, then placed again as one
			e.stop(ctx, m, stopDrain)
			inflight[m.key] = true
		}
	}
	e.logDrained(w, left)
	e.logWaiting(waiting)
}

// holdMovesInProgress holds in view, before a pass decides new drain
// stops, the room of every move a drain started in an earlier pass and
// that is not placed yet: an instance of an auto-placed or bundle job on a
// draining node that is stopping or whose stop is in flight. Its role is
// placed again only once the worker confirms the stop, passes later; were
// its room not held meanwhile, each pass would see the same free units
// and stop more jobs than fit, taking them off air with nowhere to go.
// elsewhere (fitsElsewhere on the pass's view, which holds the room it
// finds) is called for each; one that fits nowhere now holds nothing and
// is not logged as waiting (it is leaving anyway).
func (e *Engine) holdMovesInProgress(w *world, inflight map[key]bool, elsewhere func([]*running, bool) string) {
	all := w.runningAll()
	for i := range all {
		r := &all[i]
		if r.js.GetDormant() || !node.Draining(w.nodeRecs[r.node]) || isMoving(r) ||
			(r.status != internalpb.InstanceStatus_INSTANCE_STOPPING && !inflight[r.key]) {
			continue
		}
		elsewhere([]*running{r}, false)
	}
}

// fitsElsewhere returns "" if group (a job, or a bundle job with its
// co_locate_with group, all on one draining node) fits another node now,
// holding that room in view for the rest of the pass so that two moves of
// one pass do not count on the same free units; else why not (the chain's
// explanation), with view as it was. A drain never stops a job that has
// nowhere to go. placedBy is the pass's placed instances by (job, role).
// With wait, a group no node fits waits for room in w (provision.go), as
// an unplaced job does: the pool's provisioner may create the node its
// move needs.
func (e *Engine) fitsElsewhere(w *world, view *scheduler.View, group []*running, placedBy map[key]scheduler.Placed, wait bool) string {
	var removed []scheduler.Placed
	for _, m := range group {
		if p, ok := placedBy[m.key]; ok && view.Remove(m.job, m.role) {
			removed = append(removed, p)
		}
	}
	first := group[0]
	c := newCandidate(first.rec, first.seq, first.bundle, first.js)
	var pool *managerpb.Pool
	if c.pool != "" {
		if pool = w.pools[c.pool]; pool == nil {
			view.Add(removed...)
			return fmt.Sprintf("pool %q does not exist", c.pool)
		}
	}
	ask := e.askOf(w, &c, pool)
	for _, m := range group[1:] {
		ask.CoLocated = append(ask.CoLocated, scheduler.Member{Job: m.job, Role: m.role,
			Requirements: scheduler.RequirementsFromProto(m.rec.GetJob().GetJob().GetAutoPlacement().GetRequirements()),
			Template:     scheduler.TemplateFromJob(m.rec.GetJob().GetJob())})
	}
	d, err := view.Select(ask)
	if err != nil {
		view.Add(removed...)
		if nf := (*scheduler.Failure)(nil); wait && errors.As(err, &nf) {
			w.waitFor(&c, ask)
		}
		return err.Error()
	}
	view.Add(d.Placed...)
	return ""
}

// logWaiting logs, once per change of its reason, each (job, role) a drain
// leaves on its node because it fits no other node, and keeps waiting as
// the pass's set.
func (e *Engine) logWaiting(waiting map[key]string) {
	e.drain.mu.Lock()
	old := e.drain.waiting
	e.drain.waiting = waiting
	e.drain.mu.Unlock()
	for k, why := range waiting {
		if old[k] != why {
			e.log.Warn("drain waiting: job fits no other node", "job_id", k.job, "role", k.role, "reason", why)
		}
	}
}

// moveGroup is what moves with r off its draining node: r and the
// instances of its co_locate_with group in the same replica on the same
// node, so that the group is placed again as one (a member moved alone
// could only go back to the group's node).
func moveGroup(r *running, byKey map[key]*running, inflight map[key]bool) []*running {
	group := []*running{r}
	b := r.bundle.GetBundle()
	for _, name := range coLocateGroup(b, r.js.GetJobName()) {
		k := key{scheduler.JobID(bundle.JobID(b.GetBundleId().GetBundleId(), r.js.GetReplicaIndex(), name)), scheduler.Role(roles.LogicalRole(string(r.role)))}
		if m, ok := byKey[k]; ok && m.node == r.node && !inflight[k] && m.status != internalpb.InstanceStatus_INSTANCE_STOPPING {
			group = append(group, m)
		}
	}
	return group
}

// peersRunning reports whether, for each member of group, the other
// replica of the same bundle job runs (RUNNING, not being stopped): a job
// is never taken off both replicas at once. A bundle job whose other
// replica the bundle record does not list has no peer to wait for.
func peersRunning(group []*running, byKey map[key]*running, w *world) bool {
	for _, m := range group {
		b := m.bundle.GetBundle()
		other, role := uint32(1), scheduler.RoleBackup
		if m.js.GetReplicaIndex() == 1 {
			other, role = 0, scheduler.RolePrimary
		}
		id := bundle.JobID(b.GetBundleId().GetBundleId(), other, m.js.GetJobName())
		if derivedState(m.bundle, id) == nil {
			continue
		}
		p, ok := byKey[key{scheduler.JobID(id), role}]
		if !ok || p.status != internalpb.InstanceStatus_INSTANCE_RUNNING {
			return false
		}
	}
	return true
}

// logDrained logs "node drained" once per term for each draining node with
// no auto-placed instance left (left counts them), and forgets the nodes
// no longer draining, so a second drain is logged again.
func (e *Engine) logDrained(w *world, left map[string]int) {
	e.drain.mu.Lock()
	defer e.drain.mu.Unlock()
	if e.drain.drained == nil {
		e.drain.drained = map[string]bool{}
	}
	for id := range e.drain.drained {
		if !node.Draining(w.nodeRecs[id]) {
			delete(e.drain.drained, id)
		}
	}
	for id, rec := range w.nodeRecs {
		if !node.Draining(rec) || left[id] > 0 || e.drain.drained[id] {
			continue
		}
		e.drain.drained[id] = true
		e.log.Info("node drained", "node_id", id)
	}
}

// stop sends the StopJob of r in the background, holding r's role in
// flight until the job grain answers. A stop the grain finds already done
// (no such instance, or on another node) is not an error.
func (e *Engine) stop(ctx context.Context, r *running, why string) {
	k := r.key
	e.drain.mu.Lock()
	if e.drain.stops == nil {
		e.drain.stops = map[key]bool{}
	}
	e.drain.stops[k] = true
	e.drain.mu.Unlock()
	log := e.log.With("job_id", k.job, "role", k.role, "node_id", r.node, "reason", why)
	cmd := &internalpb.JobCommand{RequestId: StopRequestID(string(k.job), string(k.role), uint64(r.seq)), JobId: string(k.job),
		Cmd: &internalpb.JobCommand_Stop{Stop: &internalpb.StopJob{Role: string(k.role), NodeId: r.node,
			InstanceId: instanceOf(r.rec, string(k.role)).GetInstanceId()}}} // a late send stops no later instance
	e.inBackground(func() {
		err := e.request(ctx, string(k.job), cmd)
		e.drain.mu.Lock()
		delete(e.drain.stops, k)
		e.drain.mu.Unlock()
		var re *actors.ReplyError
		switch {
		case err == nil:
			log.Info("job stopped by placement")
		case errors.As(err, &re) && re.Code == errorpb.Code_FAILED_PRECONDITION:
			log.Debug("job role already stopped or moved", "reply", err)
		case ctx.Err() != nil:
		default:
			log.Warn("stop job", "error", err)
		}
	})
}
