package placement

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/norsk-oss/norsk-manager/actors"
	"github.com/norsk-oss/norsk-manager/actors/placement/scheduler"
	"github.com/norsk-oss/norsk-manager/actors/roles"
	"github.com/norsk-oss/norsk-manager/persistence"
	"github.com/norsk-oss/norsk-manager/proto/errorpb"
	"github.com/norsk-oss/norsk-manager/proto/internalpb"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
)

// Provisioning is what the engine asks the provisioners (issue 13 §1)
// before a HIGH priority job that fits no node stops LOW priority ones:
// whether a node is being created that will take the job role, and when it
// is expected to take it. Config.Provisioning nil: no provisioner, nothing
// is coming (docs/design/placement.md, "Priorities").
type Provisioning interface {
	// NodeComing reports whether a node being created will take (job,
	// role), and by when (the engine's clock) it is expected to; false if
	// none is. Called from the engine's pass: it must not block, and it is
	// called concurrently with the provisioner's own work.
	NodeComing(job, role string) (by time.Time, ok bool)
}

// preemptState is the engine's memory of its preemptions in flight: the
// PreemptJobs sent and not yet answered, by the HIGH priority job role they
// make room for. Once answered the victims' records say it (STOPPING, with
// a JobRecord.preemptions entry), so a new leader holds the same room.
// The zero value is ready.
type preemptState struct {
	mu sync.Mutex
	// pending holds, per HIGH job role, the node and the victims whose
	// PreemptJob is in flight. Guarded by mu.
	pending map[key]pendingPreemption
	// logged holds, per HIGH job role, the last wait or refusal logged,
	// so each is logged once per change. Guarded by mu.
	logged map[key]string
	// answered holds, per victim, the PreemptJobs the job grain accepted,
	// with the record sequence they were decided at: a pass that read the
	// store before the commit still sees the victim running at that
	// sequence, and must neither preempt it again nor think the
	// preemption over. Forgotten once a pass reads a newer record. Guarded
	// by mu.
	answered map[key]answeredPreemption
}

type answeredPreemption struct {
	seq  persistence.Seq
	forK key
	node string
}

// maxPreemptLogged bounds preemptState.logged over a long term.
const maxPreemptLogged = 10000

type pendingPreemption struct {
	node    string
	victims map[key]bool
}

// priorityOf is the priority band of the job of rec.
func priorityOf(rec *internalpb.JobRecord) managerpb.PriorityBand {
	return rec.GetJob().GetJob().GetAutoPlacement().GetRequirements().GetPriorityBand()
}

// priorityRank orders the bands for a pass: HIGH first, then STANDARD, LOW
// last, so room freed for a HIGH job goes to it before anything else of
// the same pass can take it.
func priorityRank(b managerpb.PriorityBand) int {
	switch b {
	case managerpb.PriorityBand_PRIORITY_BAND_HIGH:
		return 0
	case managerpb.PriorityBand_PRIORITY_BAND_LOW:
		return 2
	}
	return 1
}

// sortByPriority orders a pass's candidates HIGH, STANDARD, LOW, keeping
// the store's order within a band.
func sortByPriority(cs []candidate) {
	slices.SortStableFunc(cs, func(a, b candidate) int {
		return priorityRank(priorityOf(a.rec)) - priorityRank(priorityOf(b.rec))
	})
}

// noFit runs after c's decision found no node (nf, on view, for ask in
// pool): a HIGH priority role may stop LOW priority instances to make room
// (preemptFor), a LOW priority one may be dropped (bronzeDrop).
func (e *Engine) noFit(ctx context.Context, w *world, view *scheduler.View, c *candidate, pool *managerpb.Pool, ask scheduler.Ask, nf *scheduler.Failure) {
	switch priorityOf(c.rec) {
	case managerpb.PriorityBand_PRIORITY_BAND_HIGH:
		e.preemptFor(ctx, w, view, c, pool, ask, nf)
	case managerpb.PriorityBand_PRIORITY_BAND_LOW:
		e.bronzeDrop(ctx, w, c, pool, nf)
	}
}

// preemptFor decides whether HIGH priority c, which fits no node (nf),
// stops LOW priority instances to make room, and if so which (the
// scheduler's SelectPreempting: the fewest, then cheapest, on one node,
// every filter of ask honoured), and holds the room in view for the rest
// of the pass. A preemption for c still in progress (its victims stopping)
// holds its room and decides nothing new, so the freed room is neither
// given to another job nor preempted twice.
func (e *Engine) preemptFor(ctx context.Context, w *world, view *scheduler.View, c *candidate, pool *managerpb.Pool, ask scheduler.Ask, nf *scheduler.Failure) {
	if node, ok := e.preemptionInProgress(w, c.key); ok {
		holdRoom(w, view, ask, node)
		w.unwait(c.key)
		return
	}
	if pool.GetPreemptionDisabled() {
		e.logPreempt(c.key, "high priority job waits: preemption disabled in its pool", "pool", c.pool)
		return
	}
	if by, waiting := e.waitsForProvisioner(w, c, pool); waiting {
		e.logPreempt(c.key, "high priority job waits for a node being provisioned", "pool", c.pool, "expected_by", by)
		return
	}
	p, err := view.SelectPreempting(ask, e.victimsOf(w))
	if err != nil || len(p.Victims) == 0 {
		e.logPreempt(c.key, "high priority job fits no node even by stopping low priority jobs", "pool", c.pool, "reason", fmt.Sprint(err))
		return
	}
	reason := preemptReason(c, nf, p)
	e.preempt.mu.Lock()
	if e.preempt.pending == nil {
		e.preempt.pending = map[key]pendingPreemption{}
	}
	pend := pendingPreemption{node: string(p.Decision.Node), victims: map[key]bool{}}
	for _, v := range p.Victims {
		pend.victims[key{v.Job, v.Role}] = true
	}
	e.preempt.pending[c.key] = pend
	delete(e.preempt.logged, c.key)
	e.preempt.mu.Unlock()
	holdRoom(w, view, ask, string(p.Decision.Node))
	w.unwait(c.key)
	e.log.Warn("preempting low priority jobs for a high priority job", "job_id", c.job, "role", c.role, "node_id", p.Decision.Node,
		"victims", len(p.Victims), "reason", reason)
	for _, v := range p.Victims {
		e.sendPreempt(ctx, w, c.key, v, reason)
	}
}

// preemptReason is the text of job_preempted: for which job, why it fits
// nowhere, and what is stopped where.
func preemptReason(c *candidate, nf *scheduler.Failure, p scheduler.Preemption) string {
	names := make([]string, len(p.Victims))
	for i, v := range p.Victims {
		names[i] = key{v.Job, v.Role}.String()
	}
	return fmt.Sprintf("HIGH priority job %s role %s fits no node (%s); stopping %d LOW priority instance(s) on node %s makes room: %s",
		c.job, c.role, nf.Metrics, len(p.Victims), p.Decision.Node, strings.Join(names, ", "))
}

// waitsForProvisioner reports whether c waits for a node a provisioner is
// creating for it instead of preempting: one is coming, expected within
// the pool's high_priority_provision_wait_seconds counted from when c
// became unplaced, and that time has not passed; or c's pool can
// provision and no plan has seen c yet (comingFor: this pass's plan
// decides, the next pass preempts if nothing is coming in time).
func (e *Engine) waitsForProvisioner(w *world, c *candidate, pool *managerpb.Pool) (time.Time, bool) {
	wait := time.Duration(pool.GetHighPriorityProvisionWaitSeconds()) * time.Second
	if wait <= 0 {
		return time.Time{}, false
	}
	since, known := unplacedSince(c.rec, string(c.role))
	if !known {
		since = w.now
	}
	deadline := since.Add(wait)
	by, ok, unplanned := e.comingFor(w, c, pool, deadline)
	if unplanned {
		return by, w.now.Before(deadline)
	}
	if !ok {
		return time.Time{}, false
	}
	return by, w.now.Before(deadline) && !by.After(deadline)
}

// preemptionInProgress reports whether a preemption for k is under way,
// and on which node: a PreemptJob for it in flight, or a victim whose
// record says it is stopping, preempted for k (JobRecord.preemptions and
// the role's last stop JOB_STOPPED_PREEMPTED). Read from the records, so a
// new leader holds the same room.
func (e *Engine) preemptionInProgress(w *world, k key) (string, bool) {
	e.preempt.mu.Lock()
	p, ok := e.preempt.pending[k]
	e.preempt.mu.Unlock()
	if ok {
		return p.node, true
	}
	for i := range w.runningAll() {
		r := &w.runningAll()[i]
		if node, stale := e.answeredFor(r, k); stale {
			return node, true // committed after this pass read the store
		}
		if r.status != internalpb.InstanceStatus_INSTANCE_STOPPING {
			continue
		}
		if pr := preemptionOf(r.rec, string(r.role)); pr != nil && pr.GetForJobId() == string(k.job) && pr.GetForRole() == string(k.role) &&
			pr.GetNodeId() == r.node && lastStopReason(r.rec, string(r.role)) == managerpb.JobHistoryJobStopping_JOB_STOPPED_PREEMPTED {
			return r.node, true
		}
	}
	return "", false
}

// answeredFor reports whether r's record, as this pass read it, predates
// an accepted PreemptJob of r for k, and on which node.
func (e *Engine) answeredFor(r *running, k key) (string, bool) {
	e.preempt.mu.Lock()
	defer e.preempt.mu.Unlock()
	a, ok := e.preempt.answered[r.key]
	return a.node, ok && a.forK == k && a.seq == r.seq
}

// holdRoom adds to view, on node, the room of ask (the job and its
// co-located members), so that nothing else of pass w takes it; the
// members are not decided again in this pass (their room is held with the
// job's). The view is the pass's own; the next pass holds it again while
// the preemption is in progress.
func holdRoom(w *world, view *scheduler.View, ask scheduler.Ask, node string) {
	n := scheduler.NodeID(node)
	view.Remove(ask.Job, ask.Role) // a hold of an earlier decision in this pass
	view.Add(scheduler.Placed{Job: ask.Job, Role: ask.Role, Node: n, Capacity: ask.Requirements.Capacity, GPUCapacity: ask.Requirements.GPUCapacity})
	for _, m := range ask.CoLocated {
		view.Remove(m.Job, m.Role)
		view.Add(scheduler.Placed{Job: m.Job, Role: m.Role, Node: n, Capacity: m.Requirements.Capacity, GPUCapacity: m.Requirements.GPUCapacity})
		w.busy[key{m.Job, m.Role}] = true
	}
}

// victimsOf is every instance the engine may stop for a HIGH priority job:
// of a LOW priority job with auto_placement (or of a live bundle), not
// stopping, no stop or preemption of it in flight. STANDARD and HIGH jobs,
// and jobs started by hand, are never victims.
func (e *Engine) victimsOf(w *world) []scheduler.Placed {
	e.preempt.mu.Lock()
	taken := map[key]bool{}
	for _, p := range e.preempt.pending {
		for k := range p.victims {
			taken[k] = true
		}
	}
	for i := range w.runningAll() {
		r := &w.runningAll()[i]
		switch a, ok := e.preempt.answered[r.key]; {
		case ok && a.seq == r.seq:
			taken[r.key] = true // this pass read the record before the commit
		case ok:
			delete(e.preempt.answered, r.key)
		}
	}
	e.preempt.mu.Unlock()
	e.drain.mu.Lock()
	for k := range e.drain.stops {
		taken[k] = true
	}
	e.drain.mu.Unlock()
	held := w.placed
	var out []scheduler.Placed
	for i := range w.runningAll() {
		r := &w.runningAll()[i]
		if r.status == internalpb.InstanceStatus_INSTANCE_STOPPING || taken[r.key] ||
			priorityOf(r.rec) != managerpb.PriorityBand_PRIORITY_BAND_LOW || r.rec.GetJob().GetJob().GetAutoPlacement() == nil {
			continue
		}
		if p, ok := held[r.key]; ok && string(p.Node) == r.node {
			out = append(out, p)
		}
	}
	return out
}

// PreemptRequestID is the request id of the engine's PreemptJob of (job,
// role) decided on the job record's sequence seq:
// "placement/preempt/<job>/<role>/<seq>" (applied once, as RequestID).
func PreemptRequestID(job, role string, seq uint64) string {
	return fmt.Sprintf("placement/preempt/%s/%s/%d", job, role, seq)
}

// sendPreempt sends the PreemptJob of victim v for the HIGH job role forK
// in the background; the pending preemption ends once every victim's is
// answered.
func (e *Engine) sendPreempt(ctx context.Context, w *world, forK key, v scheduler.Placed, reason string) {
	vk := key{v.Job, v.Role}
	var seq uint64
	var instance string
	for i := range w.runningAll() {
		if r := &w.runningAll()[i]; r.key == vk {
			seq = uint64(r.seq)
			instance = instanceOf(r.rec, string(v.Role)).GetInstanceId()
		}
	}
	// The instance id: a PreemptJob delivered late (this leader frozen
	// meanwhile) must not stop an instance started under that role on that
	// node since; the grain refuses it as stale.
	cmd := &internalpb.JobCommand{RequestId: PreemptRequestID(string(v.Job), string(v.Role), seq), JobId: string(v.Job),
		Cmd: &internalpb.JobCommand_Preempt{Preempt: &internalpb.PreemptJob{Role: string(v.Role), NodeId: string(v.Node),
			ForJobId: string(forK.job), ForRole: string(forK.role), Reason: reason, InstanceId: instance}}}
	log := e.log.With("job_id", v.Job, "role", v.Role, "node_id", v.Node, "for_job_id", forK.job, "for_role", forK.role)
	e.inBackground(func() {
		err := e.request(ctx, string(v.Job), cmd)
		e.preempt.mu.Lock()
		if p, ok := e.preempt.pending[forK]; ok {
			delete(p.victims, vk)
			if len(p.victims) == 0 {
				delete(e.preempt.pending, forK)
			}
		}
		if err == nil {
			if e.preempt.answered == nil || len(e.preempt.answered) >= maxPreemptLogged {
				e.preempt.answered = map[key]answeredPreemption{} // bounded; a stale pass is at most one
			}
			e.preempt.answered[vk] = answeredPreemption{seq: persistence.Seq(seq), forK: forK, node: string(v.Node)}
		}
		e.preempt.mu.Unlock()
		var re *actors.ReplyError
		switch {
		case err == nil:
			e.cfg.Metrics.count(ResultPreempted)
			log.Info("job preempted")
		case errors.As(err, &re) && re.Code == errorpb.Code_FAILED_PRECONDITION:
			log.Debug("preempted job role already stopped or moved", "reply", err)
		case ctx.Err() != nil:
		default:
			log.Warn("preempt job", "error", err)
		}
	})
}

// logPreempt logs msg for k once per change of msg.
func (e *Engine) logPreempt(k key, msg string, args ...any) {
	e.preempt.mu.Lock()
	same := e.preempt.logged[k] == msg
	if !same {
		if e.preempt.logged == nil || len(e.preempt.logged) >= maxPreemptLogged {
			e.preempt.logged = map[key]string{} // bounded: forgetting only logs a line again
		}
		e.preempt.logged[k] = msg
	}
	e.preempt.mu.Unlock()
	if !same {
		e.log.Info(msg, append([]any{"job_id", k.job, "role", k.role}, args...)...)
	}
}

// preemptionOf returns rec's last preemption of role's logical role (the
// newest of "primary", "primary~1", ...: the record keeps one per role the
// instance ran under), nil if none.
func preemptionOf(rec *internalpb.JobRecord, role string) *internalpb.PreemptionRecord {
	var last *internalpb.PreemptionRecord
	for _, p := range rec.GetPreemptions() {
		if roles.LogicalRole(p.GetRole()) == roles.LogicalRole(role) && (last == nil || !p.GetAt().AsTime().Before(last.GetAt().AsTime())) {
			last = p
		}
	}
	return last
}

// lastStopReason is the reason of the newest job_stopping history entry
// of role's logical role in rec; JOB_STOPPED_NODE_STOPPED (0) if there is
// none.
func lastStopReason(rec *internalpb.JobRecord, role string) managerpb.JobHistoryJobStopping_Reason {
	h := rec.GetJob().GetHistoryEntry()
	for i := len(h) - 1; i >= 0; i-- {
		if s := h[i].GetJobStopping(); s != nil && roles.LogicalRole(s.GetRole()) == roles.LogicalRole(role) {
			return s.GetReason()
		}
	}
	return managerpb.JobHistoryJobStopping_JOB_STOPPED_NODE_STOPPED
}
