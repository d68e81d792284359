package job

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/norsk-oss/norsk-manager/actors"
	"github.com/norsk-oss/norsk-manager/actors/roles"
	"github.com/norsk-oss/norsk-manager/persistence"
	"github.com/norsk-oss/norsk-manager/proto/errorpb"
	"github.com/norsk-oss/norsk-manager/proto/internalpb"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
	"github.com/norsk-oss/norsk-manager/proto/workerpb"
)

func hashReply(h int64) *internalpb.Reply {
	return &internalpb.Reply{Payload: &internalpb.Reply_JobHash{JobHash: &managerpb.JobHash{Hash: h}}}
}

// create stores a new job. The job arrives validated, with its id set.
func (g *grain) create(reqID string, job *managerpb.Job) *internalpb.Reply {
	if g.rec != nil {
		return actors.Fail(errorpb.Code_ALREADY_EXISTS, "job %q already exists", g.id)
	}
	now := g.now()
	j := proto.Clone(job).(*managerpb.Job)
	j.CurrentHash = Hash(j)
	j.State = stateAfter(&managerpb.Job{StartDateTime: j.GetStartDateTime()}, now.AsTime())
	next := &internalpb.JobRecord{Job: &managerpb.JobWithHistory{Job: j, HistoryEntry: []*managerpb.JobHistoryEntry{hCreated(now)}},
		// The previous incarnation's last commands (its tombstone's): a
		// retried delete of it is then a repeat, not a delete of this one.
		RecentRequests: slices.Clone(g.deleted)}
	if r := g.commit(reqID, next, updatedEvent(next.GetJob())); r != nil {
		return r
	}
	g.log.Info("job created", "state", j.GetState().String(), "hash", j.GetCurrentHash())
	return hashReply(j.GetCurrentHash())
}

// update replaces the definition if the client's current_hash is current.
func (g *grain) update(reqID string, job *managerpb.Job) *internalpb.Reply {
	if g.rec == nil {
		return g.notFound()
	}
	cur := g.rec.GetJob().GetJob()
	if job.GetCurrentHash() != cur.GetCurrentHash() {
		return actors.Fail(errorpb.Code_FAILED_PRECONDITION,
			"job %q: stale current_hash %d, the job's current hash is %d (it changed since you read it): re-read the job and retry",
			g.id, job.GetCurrentHash(), cur.GetCurrentHash())
	}
	now := g.now()
	next := g.next()
	j := proto.Clone(job).(*managerpb.Job)
	j.State = cur.GetState()
	j.CurrentHash = Hash(j)
	j.State = stateAfter(j, now.AsTime())
	next.Job.Job = j
	stale := carryDefinitions(next, j)
	g.addHistory(next, hUpdated(now, cur))
	events := []*managerpb.EventStreamEvent{updatedEvent(next.GetJob())}
	if ev := driftEvent(next); ev != nil {
		events = append(events, ev)
	}
	if r := g.commit(reqID, next, events...); r != nil {
		return r
	}
	g.log.Info("job updated", "hash", j.GetCurrentHash(), "stale_instances", stale)
	return hashReply(j.GetCurrentHash())
}

// describeInstances names a record's instances for error messages.
func describeInstances(rec *internalpb.JobRecord, pending map[string]pendingStart) string {
	var parts []string
	for _, in := range rec.GetInstances() {
		parts = append(parts, fmt.Sprintf("role %q on node %q (%s)", in.GetRole(), in.GetNodeId(), statusName(in.GetStatus())))
	}
	for role, p := range pending {
		parts = append(parts, fmt.Sprintf("role %q on node %q (starting)", role, p.node))
	}
	return strings.Join(parts, ", ")
}

func statusName(s internalpb.InstanceStatus) string {
	return strings.ToLower(strings.TrimPrefix(s.String(), "INSTANCE_"))
}

func (g *grain) delete(reqID string) *internalpb.Reply {
	if g.rec == nil {
		return g.notFound()
	}
	if len(g.rec.GetInstances()) > 0 || len(g.pending) > 0 {
		if g.rec.GetJob().GetJob().GetAutoPlacement() != nil {
			// A stop would not do: the placement engine places the role again.
			return actors.Fail(errorpb.Code_FAILED_PRECONDITION,
				"job %q has running instances: %s; complete it first (CompleteJob, norsk-ctl job complete): "+
					"the placement engine places an auto-placed job again after a stop", g.id, describeInstances(g.rec, g.pending))
		}
		return actors.Fail(errorpb.Code_FAILED_PRECONDITION,
			"job %q has running instances: %s; stop or complete it first", g.id, describeInstances(g.rec, g.pending))
	}
	recent := g.rec.GetRecentRequests()
	if r := g.commit(reqID, nil, deletedEvent(g.id)); r != nil {
		return r
	}
	g.rec, g.deleted = nil, actors.RememberRequest(slices.Clone(recent), reqID)
	g.log.Info("job deleted")
	g.tellWorkersDeleted()
	return actors.OK()
}

// tellWorkersDeleted asks the grain of every node that may hold a worker
// session to send delete_job for this job on it, so that the worker's
// runtime drops what it keeps for the job beyond its runs (the Docker
// runtime's named volumes). Call it only once the deletion is committed.
//
// The node grain decides: it sends delete_job if its worker session is up
// when the command arrives, and ignores it otherwise (nodes where the job
// never ran ignore delete_job too). Best effort: the commands are one-way
// sends (the grain does not wait for any node, local or on another
// manager); each carries a deadline of NodeTimeout, so one held up (a
// manager failing over) is dropped rather than delivered late, after the
// job id may have been created again; a worker that is offline then keeps
// the job's data; nothing is retried.
func (g *grain) tellWorkersDeleted() {
	if g.cfg.Store == nil {
		return
	}
	nodes, err := sessionNodes(g.cfg.Store)
	if err != nil {
		g.log.Warn("could not list the nodes to tell about the deletion; their workers keep the job's data", "error", err)
		return
	}
	// actors.Expired compares with the wall clock, not the grain's Clock.
	deadline := time.Now().Add(g.cfg.NodeTimeout)
	for _, node := range nodes {
		g.cfg.Router.Send(actors.KindNode, node, &internalpb.NodeCommand{NodeId: node, Deadline: timestamppb.New(deadline),
			Cmd: &internalpb.NodeCommand_DeleteJobData{DeleteJobData: &internalpb.DeleteJobData{JobId: g.id}}})
	}
	g.log.Debug("asked the nodes' workers to delete the job's data", "nodes", len(nodes))
}

// sessionNodes lists the nodes whose grain may hold a worker session: those
// with a dial-back address that were not stopped on purpose (the rule by
// which the reviver wakes node grains). It reads the local store instead
// of asking every manager which sessions are up, so the job grain makes no
// remote call; the node grains know their sessions.
func sessionNodes(store *persistence.Store) ([]string, error) {
	var ids []string
	err := store.View(func(r *persistence.Reader) error {
		return r.Nodes(func(n *internalpb.NodeRecord) error {
			if n.GetAddress() != "" && !(n.GetState() == managerpb.NodeLifecycle_NODE_LIFECYCLE_STOPPED &&
				n.GetStopReason() == managerpb.NodeStopping_USER_REQUESTED) {
				ids = append(ids, n.GetNodeId())
			}
			return nil
		})
	})
	return ids, err
}

// start provisions (job, role) on a node: the node grain checks the node is
// online and sends provision_job; only then is the instance recorded. The
// attempt gets an instance id (newInstanceID), kept with the pending marker,
// sent in the provision and recorded on the Instance. A refusal is returned
// at once; otherwise the reply is sent from the continuation and start
// returns nil. The provision's norsk_cpu_list is startCPUs'; the instance
// records it (Instance.cpu_list).
func (g *grain) start(ctx actor.Context, reqID string, c *internalpb.StartJob) *internalpb.Reply {
	if r := g.checkStartable(c.GetRole()); r != nil {
		return r
	}
	role, node := c.GetRole(), c.GetNodeId()
	p := pendingStart{node: node, instance: newInstanceID(g.id, role, reqID), cpus: startCPUs(g.rec.GetJob().GetJob(), c), note: c.GetPlacement(),
		def: definitionOf(g.rec.GetJob().GetJob())}
	g.pending[role] = p
	delete(g.endedWhilePending, role)
	wj := WorkerJob(g.rec.GetJob().GetJob(), role)
	wj.InstanceId = p.instance
	wj.NorskCpuList = p.cpus
	if c.GetPlacement().GetFence() {
		// The node grain fills in replace_after_ms (worker-sessions.md §8).
		wj.Fence = &workerpb.WorkerFence{}
	}
	cmd := &internalpb.NodeCommand{RequestId: reqID, NodeId: node, Cmd: &internalpb.NodeCommand_Provision{
		Provision: &internalpb.Provision{Job: wj}}}
	f := g.cfg.Router.RequestFuture(actors.KindNode, node, cmd, g.cfg.NodeTimeout)
	ctx.ReenterAfter(f, func(res any, err error) {
		delete(g.pending, role)
		ctx.Respond(g.started(ctx, reqID, role, p, res, err))
		if _, unsure := g.pending[role]; !unsure {
			delete(g.endedWhilePending, role)
		}
	})
	return nil
}

// startCPUs is the cpu list a start of j sends the worker: the cores the
// placement engine assigned (c.cpu_list), else the job's own
// norsk_cpu_list (a manual start keeps its behaviour). The gateway refuses
// a job with both auto_placement and norsk_cpu_list, so an engine start
// never has a list of the job's own to override (placement.md, "Cores").
func startCPUs(j *managerpb.Job, c *internalpb.StartJob) []uint32 {
	if cpus := c.GetCpuList(); len(cpus) > 0 {
		return slices.Clone(cpus)
	}
	return slices.Clone(j.GetNorskCpuList())
}

// checkStartable answers why (job, role) cannot be started now, or nil:
// NOT_FOUND for no job; FAILED_PRECONDITION for a completed job, one with
// a terminal verdict, or one with nothing to run (docs/design/jobs.md:
// no services, no norsk_service_parameters, no product_template — a
// template job's services are its template's); ALREADY_EXISTS for a
// role that has an instance or a start in flight, also under a move's
// role ("primary" running as "primary~1").
func (g *grain) checkStartable(role string) *internalpb.Reply {
	j := g.rec.GetJob().GetJob()
	switch {
	case g.rec == nil:
		return g.notFound()
	case j.GetState() == managerpb.Job_POST:
		return actors.Fail(errorpb.Code_FAILED_PRECONDITION, "job %q is completed (POST) and cannot be started", g.id)
	case j.TerminalState != nil:
		return actors.Fail(errorpb.Code_FAILED_PRECONDITION, "job %q has a terminal failure verdict (%s) and must not be started",
			g.id, j.GetTerminalState().GetFailureReason())
	case len(j.GetServices()) == 0 && j.GetNorskServiceParameters() == nil && j.GetProductTemplate() == nil:
		// A worker would report it running with nothing running.
		return actors.Fail(errorpb.Code_FAILED_PRECONDITION,
			"job %q has no services, so there is nothing to run: add one to services (a job that runs only the Norsk Media container of a worker with --media-image says so by setting norsk_service_parameters)", g.id)
	}
	if i := instanceIndex(g.rec, role); i >= 0 {
		in := g.rec.GetInstances()[i]
		return actors.Fail(errorpb.Code_ALREADY_EXISTS, "job %q role %q is already %s on node %q",
			g.id, role, statusName(in.GetStatus()), in.GetNodeId())
	}
	if p, ok := g.pending[role]; ok {
		return actors.Fail(errorpb.Code_ALREADY_EXISTS, "job %q role %q is already being started on node %q", g.id, role, p.node)
	}
	if i := movedIndex(g.rec, role); i >= 0 {
		in := g.rec.GetInstances()[i]
		return actors.Fail(errorpb.Code_ALREADY_EXISTS, "job %q role %q is already %s on node %q as role %q (moved there)",
			g.id, role, statusName(in.GetStatus()), in.GetNodeId(), in.GetRole())
	}
	return g.checkMoveStart(role)
}

// started records the instance once the node grain accepted the provision.
func (g *grain) started(ctx actor.Context, reqID, role string, p pendingStart, res any, err error) *internalpb.Reply {
	reply, err := actors.FutureReply(res, err)
	if err != nil {
		return actors.Fail(errorpb.Code_UNAVAILABLE, "node %q did not answer the provision of job %q: %v", p.node, g.id, err)
	}
	if actors.AsError(reply) != nil {
		return reply
	}
	return g.recordStart(ctx, reqID, role, p, reply.GetNode(), g.cfg.Clock())
}

// recordStart records as PROVISIONING the instance p that the node grain
// (its record nodeRec) sent the worker, unless the record says it is not
// wanted (then it is stopped) or already has it.
//
// A commit that fails without a verdict — UNAVAILABLE, the outcome of the
// append unknown (a Raft leader frozen or lost mid-append), or ABORTED,
// another writer first — never stops the instance: it may run on air by
// now, and the write may even have committed. The role stays pending
// (a StartJob of it is refused) and confirmStart decides again on a
// record confirmed current. Meanwhile the worker's job_started (or its
// next hello) is adopted by reportStarted as for any pending start. A
// stop sent now could also reach the worker after the next leader
// started the same instance again (the same StartJob request id, hence
// the same instance id, when nothing was recorded) and kill it.
// docs/design/ha.md, "A write whose outcome is unknown".
func (g *grain) recordStart(ctx actor.Context, reqID, role string, p pendingStart, nodeRec *internalpb.NodeRecord, since time.Time) *internalpb.Reply {
	node := p.node
	if g.rec == nil || g.rec.GetJob().GetJob().GetState() == managerpb.Job_POST {
		// Completed while the node was provisioning: take it back.
		g.sendStop(node, role, p.instance)
		return actors.Fail(errorpb.Code_FAILED_PRECONDITION, "job %q was completed while it was being started", g.id)
	}
	if i := instanceIndex(g.rec, role); i >= 0 {
		if g.rec.GetInstances()[i].GetNodeId() == node {
			// The worker reported it started before this continuation ran
			// (with the id of what it runs: this attempt's, or that of an
			// instance it already ran, which it kept).
			return actors.OK()
		}
		// Recorded on another node meanwhile (by another activation): the
		// record, confirmed current or fenced by its seq, wants it there.
		g.sendStop(node, role, p.instance)
		return actors.Fail(errorpb.Code_ALREADY_EXISTS, "job %q role %q runs on node %q", g.id, role, g.rec.GetInstances()[i].GetNodeId())
	}
	if slices.Contains(g.rec.GetRecentRequests(), reqID) {
		// An earlier try whose outcome was unknown did commit (and the
		// instance has ended since; its end is recorded).
		return actors.OK()
	}
	if !moveTargetWanted(g.rec, role) {
		// Its move was aborted while the node was provisioning.
		g.sendStop(node, role, p.instance)
		return actors.Fail(errorpb.Code_FAILED_PRECONDITION, "job %q role %q: its move was backed out while it was being started", g.id, role)
	}
	if g.endedWhilePending[role] == node {
		// The worker reported it failed or stopped before this continuation
		// ran; reportGone recorded provisioned, stopping and stopped.
		return actors.OK()
	}
	now := g.now()
	next := g.next()
	in := &internalpb.Instance{
		Role: role, NodeId: node, Status: internalpb.InstanceStatus_INSTANCE_PROVISIONING, Since: now,
		NodeMetadata: nodeRec.GetMetadata(), RunningNodeMetadata: nodeRec.GetRunningMetadata(),
		InstanceId: p.instance, CpuList: p.cpus,
	}
	recordDefinition(in, p.def, next.GetJob().GetJob())
	putInstance(next, in)
	noteTargetStarted(next, in, now)
	g.addHistory(next, hProvisioned(now, in))
	events := append([]*managerpb.EventStreamEvent{updatedEvent(next.GetJob())}, NotePlaced(next, in, p.note, now)...)
	if r := g.commit(reqID, next, events...); r != nil {
		// The commit reloaded the record. If another activation of this
		// grain recorded the very same instance meanwhile (two activations
		// overlap during a topology change), it runs as wanted: stopping
		// it would take down what that activation acknowledged.
		if i := instanceIndex(g.rec, role); i >= 0 && g.rec.GetInstances()[i].GetNodeId() == node {
			return actors.OK()
		}
		switch r.GetCode() {
		case errorpb.Code_UNAVAILABLE, errorpb.Code_ABORTED:
			// No verdict on this start: left running (see above), and
			// decided again once the record is confirmed current. This
			// also covers a move's target while its move is STARTING.
			g.log.Warn("could not record the instance just started; leaving it running and deciding again on the current record",
				"role", role, "node_id", node, "instance_id", p.instance, "error", r.GetMessage())
			g.confirmLater(ctx, reqID, role, p, nodeRec, since)
			return r
		}
		if roles.IsMoved(role) && moveTargetWanted(g.rec, role) {
			// A move's target while its move is STARTING: left running
			// for the worker's report to adopt (reportRunning; stopped
			// there once the move moved on). A stop now may reach the
			// worker late, after the next leader started the same
			// instance again, and kill what that leader hands over to.
			return r
		}
		g.sendStop(node, role, p.instance)
		return r
	}
	g.log.Info("job provisioned", "role", role, "node_id", node, "instance_id", p.instance)
	return actors.OK()
}

// confirmRetry is the wait before confirmStart tries again; confirmLimit
// bounds how long it keeps trying (no Raft leader for that long: the role
// is then no longer held pending, and the worker's next hello reports the
// instance for adoption, or the stop owed to it).
const (
	confirmRetry = time.Second
	confirmLimit = 5 * time.Minute
)

// confirmLater keeps role pending with p (a StartJob of it is refused, a
// report of it adopted as this start's) and runs confirmStart after
// confirmRetry, on the grain.
func (g *grain) confirmLater(ctx actor.Context, reqID, role string, p pendingStart, nodeRec *internalpb.NodeRecord, since time.Time) {
	g.pending[role] = p
	ctx.ReenterAfter(actor.NewFuture(ctx.ActorSystem(), confirmRetry), func(any, error) {
		g.confirmStart(ctx, reqID, role, p, nodeRec, since)
	})
}

// confirmStart decides again, on a record confirmed current, about the
// start p whose record's write had no verdict (recordStart): recorded
// already (by that write, or by the adoption of the worker's report),
// wanted (recorded now), or not wanted (stopped: a definite answer from
// the current record). While the check cannot be made (no leader) it
// tries again, for at most confirmLimit.
func (g *grain) confirmStart(ctx actor.Context, reqID, role string, p pendingStart, nodeRec *internalpb.NodeRecord, since time.Time) {
	if cur, ok := g.pending[role]; !ok || cur.instance != p.instance || cur.node != p.node {
		return
	}
	if fail := g.ensureCurrent(&internalpb.JobCommand{}); fail != nil {
		if g.cfg.Clock().Sub(since) < confirmLimit {
			g.confirmLater(ctx, reqID, role, p, nodeRec, since)
			return
		}
		delete(g.pending, role)
		delete(g.endedWhilePending, role)
		g.log.Warn("gave up confirming the record of an instance started while the store was unavailable; left running for its worker's next report",
			"role", role, "node_id", p.node, "instance_id", p.instance, "error", fail.GetMessage())
		return
	}
	delete(g.pending, role)
	r := g.recordStart(ctx, reqID, role, p, nodeRec, since)
	if _, again := g.pending[role]; !again {
		delete(g.endedWhilePending, role)
		g.log.Info("decided again on an instance whose record's write had no verdict", "role", role, "node_id", p.node,
			"instance_id", p.instance, "code", r.GetCode().String(), "reply", r.GetMessage())
	}
}

// sendStop asks the node grain to stop (job, role) on its worker. instance
// is the id of the instance meant (empty: unknown); the worker stops what
// runs for (job, role) whatever it is, and echoes instance in its
// job_stopped if nothing ran.
func (g *grain) sendStop(node, role, instance string) {
	g.cfg.Router.Send(actors.KindNode, node, &internalpb.NodeCommand{NodeId: node, Cmd: &internalpb.NodeCommand_StopInstance{
		StopInstance: &internalpb.StopInstance{JobId: g.id, Role: role, InstanceId: instance}}})
}

func (g *grain) stop(ctx actor.Context, reqID string, c *internalpb.StopJob) *internalpb.Reply {
	if g.rec == nil {
		return g.notFound()
	}
	role, node := c.GetRole(), c.GetNodeId()
	i := instanceIndex(g.rec, role)
	if i < 0 {
		if mi := movedIndex(g.rec, role); mi >= 0 {
			m := g.rec.GetInstances()[mi]
			return actors.Fail(errorpb.Code_FAILED_PRECONDITION, "job %q has no instance with role %q: it was moved and runs as role %q on node %q (stop that role)",
				g.id, role, m.GetRole(), m.GetNodeId())
		}
		return actors.Fail(errorpb.Code_FAILED_PRECONDITION, "job %q has no instance with role %q", g.id, role)
	}
	in := g.rec.GetInstances()[i]
	if in.GetNodeId() != node {
		return actors.Fail(errorpb.Code_FAILED_PRECONDITION, "job %q role %q runs on node %q, not on node %q", g.id, role, in.GetNodeId(), node)
	}
	if id := c.GetInstanceId(); id != "" && in.GetInstanceId() != id {
		return actors.Fail(errorpb.Code_FAILED_PRECONDITION, "job %q role %q on node %q is instance %q, not %q: a stale stop",
			g.id, role, node, in.GetInstanceId(), id)
	}
	if in.GetStatus() == internalpb.InstanceStatus_INSTANCE_STOPPING {
		g.sendStop(node, role, in.GetInstanceId()) // idempotent: ask again
		return actors.OK()
	}
	next := g.next()
	g.markStopping(next, role, managerpb.JobHistoryJobStopping_JOB_STOPPED_USER_REQUESTED)
	if r := g.commit(reqID, next, updatedEvent(next.GetJob())); r != nil {
		return r
	}
	g.sendStop(node, role, in.GetInstanceId())
	g.log.Info("job stopping", "role", role, "node_id", node)
	return actors.OK()
}

// markStopping moves an instance of next to STOPPING with a history entry.
func (g *grain) markStopping(next *internalpb.JobRecord, role string, reason managerpb.JobHistoryJobStopping_Reason) {
	i := instanceIndex(next, role)
	in := next.Instances[i]
	in.Status = internalpb.InstanceStatus_INSTANCE_STOPPING
	g.addHistory(next, hStopping(g.now(), in, reason))
}

func (g *grain) complete(ctx actor.Context, reqID string) *internalpb.Reply {
	if g.rec == nil {
		return g.notFound()
	}
	if g.rec.GetJob().GetJob().GetState() == managerpb.Job_POST {
		return actors.OK()
	}
	next := g.next()
	var stops []*internalpb.Instance
	for _, in := range next.GetInstances() {
		if in.GetStatus() != internalpb.InstanceStatus_INSTANCE_STOPPING {
			g.markStopping(next, in.GetRole(), managerpb.JobHistoryJobStopping_JOB_STOPPED_USER_REQUESTED)
		}
		stops = append(stops, in)
	}
	next.Job.Job.State = managerpb.Job_POST
	g.addHistory(next, hCompleted(g.now()))
	events := []*managerpb.EventStreamEvent{updatedEvent(next.GetJob())}
	for _, m := range next.GetMigrations() { // nothing left to move
		events = append(events, abortedEvent(g.id, m, "job completed", true))
	}
	next.Migrations = nil
	if r := g.commit(reqID, next, events...); r != nil {
		return r
	}
	for _, in := range stops {
		g.sendStop(in.GetNodeId(), in.GetRole(), in.GetInstanceId())
	}
	g.log.Info("job completed", "stopping_instances", len(stops))
	return actors.OK()
}

// activate moves a PRE job whose start time has passed to ACTIVE.
func (g *grain) activate(reqID string) *internalpb.Reply {
	if g.rec == nil {
		return g.notFound()
	}
	j := g.rec.GetJob().GetJob()
	if stateAfter(j, g.cfg.Clock()) == j.GetState() {
		return actors.OK()
	}
	next := g.next()
	next.Job.Job.State = managerpb.Job_ACTIVE
	if r := g.commit(reqID, next, updatedEvent(next.GetJob())); r != nil {
		return r
	}
	g.log.Info("job active: start time reached")
	return actors.OK()
}
