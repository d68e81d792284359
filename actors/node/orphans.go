package node

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/norsk-oss/norsk-manager/actors"
	"github.com/norsk-oss/norsk-manager/persistence"
	"github.com/norsk-oss/norsk-manager/proto/commonpb"
	"github.com/norsk-oss/norsk-manager/proto/errorpb"
	"github.com/norsk-oss/norsk-manager/proto/internalpb"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
	"github.com/norsk-oss/norsk-manager/proto/workerpb"
)

// Orphans (ARCHITECTURE §7.8, docs/design/worker-sessions.md "Orphans"):
// a job instance a worker runs that the store does not know — it never
// knew the job: a store restored from an old backup, a data dir from
// before the job existed — is not stopped on sight. Its job grain (the
// fresh activation) tells the node grain, which records it on the node
// with the time it will be stopped (OrphanGrace after it was first seen),
// raises a node_alert, and lists it in ListNodes. When the grace passes it
// checks once more: a job known by then is adopted (reported to its grain
// again), one still unknown is stopped. An operator may stop it earlier
// (StopOrphan). A job the store knows was deleted (its tombstone) is
// stopped at once, as before: it was deleted on purpose.

// DefaultOrphanGrace is how long an orphan keeps running by default.
const DefaultOrphanGrace = 10 * time.Minute

// orphanCheck bounds how long an orphan waits before its job is looked up
// again.
const orphanCheck = 30 * time.Second

// orphanDue is the self-message of the orphan timer.
type orphanDue struct{}

// orphanIndex returns the index of (job, role) in rec's orphans, or -1.
func orphanIndex(rec *internalpb.NodeRecord, job, role string) int {
	return slices.IndexFunc(rec.GetOrphans(), func(o *managerpb.Orphan) bool {
		return o.GetJobKey().GetJobId().GetJobId() == job && o.GetJobKey().GetRole() == role
	})
}

func jobKey(job, role string) *commonpb.ActiveJobKey {
	return &commonpb.ActiveJobKey{JobId: &commonpb.JobId{JobId: job}, Role: role}
}

// evAlert is a node_alert event about this node.
func (g *grain) evAlert(kind managerpb.NodeAlert_Kind, key *commonpb.ActiveJobKey, stopAt *timestamppb.Timestamp, format string, args ...any) *managerpb.EventStreamEvent {
	return &managerpb.EventStreamEvent{Event: &managerpb.EventStreamEvent_NodeAlert{NodeAlert: &managerpb.NodeAlert{
		NodeId: g.nodeID(), Kind: kind, Message: fmt.Sprintf(format, args...), JobKey: key, At: g.now(), StopAt: stopAt}}}
}

// onOrphanFound records an instance its job grain found unknown.
func (g *grain) onOrphanFound(ctx actor.Context, c *internalpb.OrphanFound) *internalpb.Reply {
	if g.rec == nil {
		return g.notFound()
	}
	job, role := c.GetJobId(), c.GetRole()
	if orphanIndex(g.rec, job, role) >= 0 {
		return actors.OK()
	}
	if g.cfg.OrphanGrace < 0 {
		g.stopOnWorker(job, role)
		g.log.Warn("worker runs a job the store does not know; stopped it at once (orphan grace off)", "job_id", job, "role", role)
		if r := g.commit("", g.next(), g.evAlert(managerpb.NodeAlert_ORPHAN_STOPPED, jobKey(job, role), nil,
			"job %q role %q runs on node %s but is unknown to the store; stopped at once (--orphan-grace 0)", job, role, g.id)); r != nil {
			g.log.Warn("could not record the orphan's stop", "error", r.GetMessage())
		}
		return actors.OK()
	}
	now := g.cfg.Clock()
	stopAt := timestamppb.New(now.Add(g.cfg.OrphanGrace))
	next := g.next()
	key := jobKey(job, role)
	key.InstanceId = c.GetInstanceId()
	next.Orphans = append(next.Orphans, &managerpb.Orphan{JobKey: key, FirstSeen: timestamppb.New(now), StopAt: stopAt,
		ServicePortMappings: c.GetServicePortMappings()})
	sortOrphans(next.Orphans)
	ev := g.evAlert(managerpb.NodeAlert_ORPHAN_FOUND, jobKey(job, role), stopAt,
		"job %q role %q runs on node %s but is unknown to the store (a store restored from an old backup?): kept running until %s, then stopped; "+
			"create or restore the job to keep it, or stop it now (norsk-ctl node stop-orphan %s %s %s)",
		job, role, g.id, stopAt.AsTime().Format(time.RFC3339), g.id, job, role)
	if r := g.commit("", next, ev); r != nil {
		return r
	}
	g.log.Warn("worker runs a job the store does not know: an orphan, kept running for the grace", "job_id", job, "role", role,
		"stop_at", stopAt.AsTime().Format(time.RFC3339))
	g.scheduleOrphans(ctx)
	return actors.OK()
}

func sortOrphans(os []*managerpb.Orphan) {
	slices.SortFunc(os, func(a, b *managerpb.Orphan) int {
		if c := strings.Compare(a.GetJobKey().GetJobId().GetJobId(), b.GetJobKey().GetJobId().GetJobId()); c != 0 {
			return c
		}
		return strings.Compare(a.GetJobKey().GetRole(), b.GetJobKey().GetRole())
	})
}

// scheduleOrphans arms the timer for the earliest orphan stop time.
func (g *grain) scheduleOrphans(ctx actor.Context) {
	if g.cancelOrphans != nil {
		g.cancelOrphans()
		g.cancelOrphans = nil
	}
	var first time.Time
	for _, o := range g.rec.GetOrphans() {
		if t := o.GetStopAt().AsTime(); first.IsZero() || t.Before(first) {
			first = t
		}
	}
	if first.IsZero() {
		return
	}
	// At least every orphanCheck: a job created or restored meanwhile is
	// adopted then, not only when the grace ends.
	g.cancelOrphans = g.timer.SendOnce(min(max(first.Sub(g.cfg.Clock()), 0), orphanCheck), ctx.Self(), &orphanDue{})
}

// onOrphansDue settles every orphan whose grace passed: adopted if its job
// is known by now, stopped on the worker otherwise. Without a healthy
// session nothing can be stopped: the orphans wait for the next one.
func (g *grain) onOrphansDue(ctx actor.Context) {
	g.cancelOrphans = nil
	if g.rec == nil || !g.healthy || g.superseded {
		return
	}
	now := g.cfg.Clock()
	known := g.knownJobs(g.rec.GetOrphans())
	next := g.next()
	var events []*managerpb.EventStreamEvent
	var keep []*managerpb.Orphan
	for _, o := range next.GetOrphans() {
		job, role := o.GetJobKey().GetJobId().GetJobId(), o.GetJobKey().GetRole()
		switch {
		case known[job]:
			g.report(job, &internalpb.InstanceReport{Kind: internalpb.InstanceReport_STARTED, Role: role, ServicePortMappings: o.GetServicePortMappings(),
				InstanceId: o.GetJobKey().GetInstanceId()})
			events = append(events, g.evAlert(managerpb.NodeAlert_ORPHAN_ADOPTED, o.GetJobKey(), nil,
				"job %q role %q on node %s is known again; adopted, not stopped", job, role, g.id))
		case o.GetStopAt().AsTime().After(now):
			keep = append(keep, o)
		default:
			g.stopOnWorker(job, role)
			events = append(events, g.evAlert(managerpb.NodeAlert_ORPHAN_STOPPED, o.GetJobKey(), nil,
				"orphan job %q role %q on node %s stopped: unknown to the store for the orphan grace (since %s)", job, role, g.id,
				o.GetFirstSeen().AsTime().Format(time.RFC3339)))
			g.log.Warn("orphan stopped: its grace passed and the store still does not know its job", "job_id", job, "role", role)
		}
	}
	if len(events) > 0 {
		next.Orphans = keep
		if r := g.commit("", next, events...); r != nil {
			g.log.Warn("could not record the orphans settled", "error", r.GetMessage())
		}
	}
	g.scheduleOrphans(ctx)
}

// knownJobs reports which of the orphans' jobs the store knows now (read
// after the barrier, so a job created or restored through any manager
// counts).
func (g *grain) knownJobs(orphans []*managerpb.Orphan) map[string]bool {
	known := map[string]bool{}
	g.instancesOnNode() // the barrier
	_ = g.cfg.Store.View(func(r *persistence.Reader) error {
		for _, o := range orphans {
			id := o.GetJobKey().GetJobId().GetJobId()
			if _, _, err := r.Job(id); err == nil {
				known[id] = true
			}
		}
		return nil
	})
	return known
}

// stopOrphan stops an orphan now, on an operator's request.
func (g *grain) stopOrphan(ctx actor.Context, reqID string, c *internalpb.StopOrphan) *internalpb.Reply {
	if g.rec == nil {
		return g.notFound()
	}
	i := orphanIndex(g.rec, c.GetJobId(), c.GetRole())
	if i < 0 {
		return actors.Fail(errorpb.Code_NOT_FOUND, "node %s has no orphan job %q role %q", g.id, c.GetJobId(), c.GetRole())
	}
	if !g.healthy {
		return g.notOnline()
	}
	g.stopOnWorker(c.GetJobId(), c.GetRole())
	next := g.next()
	next.Orphans = slices.Delete(next.Orphans, i, i+1)
	if r := g.commit(reqID, next, g.evAlert(managerpb.NodeAlert_ORPHAN_STOPPED, jobKey(c.GetJobId(), c.GetRole()), nil,
		"orphan job %q role %q on node %s stopped by an operator", c.GetJobId(), c.GetRole(), g.id)); r != nil {
		return r
	}
	g.log.Info("orphan stopped by an operator", "job_id", c.GetJobId(), "role", c.GetRole())
	g.scheduleOrphans(ctx)
	return actors.OK()
}

// orphanEnded forgets an orphan the worker no longer runs (it stopped or
// failed on its own, or a new session's hello does not list it).
func (g *grain) orphanEnded(job, role, why string) {
	if g.rec == nil {
		return
	}
	i := orphanIndex(g.rec, job, role)
	if i < 0 {
		return
	}
	next := g.next()
	next.Orphans = slices.Delete(next.Orphans, i, i+1)
	if r := g.commit("", next, g.evAlert(managerpb.NodeAlert_ORPHAN_STOPPED, jobKey(job, role), nil,
		"orphan job %q role %q on node %s ended on the worker (%s)", job, role, g.id, why)); r != nil {
		g.log.Warn("could not record the orphan's end", "error", r.GetMessage())
	}
}

// forgetMissingOrphans drops the orphans a new session's hello does not
// list.
func (g *grain) forgetMissingOrphans(running []*workerpb.WorkerRunningJob) {
	for _, o := range slices.Clone(g.rec.GetOrphans()) {
		job, role := o.GetJobKey().GetJobId().GetJobId(), o.GetJobKey().GetRole()
		if !slices.ContainsFunc(running, func(rj *workerpb.WorkerRunningJob) bool {
			return rj.GetJob().GetJobId().GetJobId() == job && rj.GetJob().GetRole() == role
		}) {
			g.orphanEnded(job, role, "not running when its session started")
		}
	}
}

// stopOnWorker sends stop_job for (job, role) on the current session.
func (g *grain) stopOnWorker(job, role string) {
	g.sendToWorker(&workerpb.NodeControllerMessage{Message: &workerpb.NodeControllerMessage_StopJob{StopJob: jobKey(job, role)}})
}
