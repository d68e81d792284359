package job

import (
	"slices"
	"strings"

	"github.com/asynkron/protoactor-go/actor"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/norsk-oss/norsk-manager/actors"
	"github.com/norsk-oss/norsk-manager/persistence"
	"github.com/norsk-oss/norsk-manager/proto/commonpb"
	"github.com/norsk-oss/norsk-manager/proto/errorpb"
	"github.com/norsk-oss/norsk-manager/proto/internalpb"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
)

// instanceReport reconciles the record with what a node's worker says about
// (job, role). Whatever the worker runs that the record does not want
// (unknown or completed job, a duplicate of an instance on another node, an
// instance being stopped) is stopped on the worker again.
func (g *grain) instanceReport(ctx actor.Context, reqID string, r *internalpb.InstanceReport) *internalpb.Reply {
	if g.fromSupersededSession(r) {
		return actors.OK()
	}
	if g.rec == nil {
		if r.GetKind() == internalpb.InstanceReport_STARTED {
			g.unknownRunning(r)
		}
		return g.notFound()
	}
	switch r.GetKind() {
	case internalpb.InstanceReport_STARTED:
		return g.reportStarted(reqID, r)
	case internalpb.InstanceReport_STOPPED:
		// reportGone takes the reason from the record (stoppedReason):
		// the stop's, or the job ended by itself.
		return g.reportGone(reqID, r, managerpb.JobHistoryJobStopping_JOB_STOPPED_UNKNOWN_JOB)
	case internalpb.InstanceReport_FAILED:
		return g.reportGone(reqID, r, managerpb.JobHistoryJobStopping_JOB_STOPPED_JOB_FAILED)
	case internalpb.InstanceReport_MISSING:
		return g.reportGone(reqID, r, managerpb.JobHistoryJobStopping_JOB_STOPPED_NODE_STOPPED)
	}
	return actors.Fail(errorpb.Code_INVALID_ARGUMENT, "unknown instance report kind %v", r.GetKind())
}

// fromSupersededSession reports whether r comes from a worker session
// older than the newest one its node record names (read after the
// freshness check's barrier). Such a report reached a node activation that
// had already lost the worker (its manager was frozen with the message
// queued, say): what it says may have been undone through the newer
// session — a job stopped, or started again — and acting on it would
// record an instance that does not run, or end one that does. The newer
// session's hello re-derives everything, so ignoring it loses nothing.
func (g *grain) fromSupersededSession(r *internalpb.InstanceReport) bool {
	if r.GetSessionEpoch() == 0 || g.cfg.Store == nil {
		return false
	}
	var newest uint64
	err := g.cfg.Store.View(func(rd *persistence.Reader) error {
		n, _, err := rd.Node(r.GetNodeId())
		newest = n.GetSessionEpoch()
		return err
	})
	if err != nil || newest <= r.GetSessionEpoch() {
		return false
	}
	g.log.Info("ignoring a worker report from a superseded session", "node_id", r.GetNodeId(), "role", r.GetRole(),
		"kind", r.GetKind().String(), "report_epoch", r.GetSessionEpoch(), "session_epoch", newest)
	return true
}

// unknownRunning handles a worker running this job while the store has no
// record of it. A tombstone (seq > 0) means it was deleted on purpose:
// stopped at once. Otherwise the store never knew it (restored from an old
// backup, or a copy of the data dir from before the job): the node records
// it as an orphan, kept running for the orphan grace (actors/node
// orphans.go), so a restore never takes a live broadcast off air.
func (g *grain) unknownRunning(r *internalpb.InstanceReport) {
	if g.seq > 0 {
		g.log.Warn("worker runs a deleted job; stopping it", "role", r.GetRole(), "node_id", r.GetNodeId())
		g.sendStop(r.GetNodeId(), r.GetRole(), r.GetInstanceId())
		return
	}
	g.cfg.Router.Send(actors.KindNode, r.GetNodeId(), &internalpb.NodeCommand{NodeId: r.GetNodeId(), Cmd: &internalpb.NodeCommand_OrphanFound{
		OrphanFound: &internalpb.OrphanFound{JobId: g.id, Role: r.GetRole(), ServicePortMappings: r.GetServicePortMappings(),
			InstanceId: r.GetInstanceId()}}})
}

// reportStarted records that the worker runs (job, role). The worker runs
// one instance per (job, role), so what it reports running on the node an
// instance is recorded on is that instance, whatever id the record has (a
// provision of a running (job, role) keeps the running instance and its
// id): the record takes the reported id (adoptID), so that the reports of
// its end are recognised.
func (g *grain) reportStarted(reqID string, r *internalpb.InstanceReport) *internalpb.Reply {
	role, node, id := r.GetRole(), r.GetNodeId(), r.GetInstanceId()
	j := g.rec.GetJob().GetJob()
	if j.GetState() == managerpb.Job_POST {
		g.sendStop(node, role, id)
		return actors.OK()
	}
	now := g.now()
	next := g.next()
	var placed []*managerpb.EventStreamEvent // a pending start's job_placed
	if i := instanceIndex(g.rec, role); i >= 0 {
		in := next.Instances[i]
		switch {
		case in.GetNodeId() != node:
			g.log.Warn("duplicate instance reported; stopping it on the reporting node",
				"role", role, "node_id", node, "recorded_node_id", in.GetNodeId())
			g.sendStop(node, role, id)
			return actors.OK()
		case in.GetStatus() == internalpb.InstanceStatus_INSTANCE_STOPPING:
			g.sendStop(node, role, id)
			if adoptID(in.GetInstanceId(), id) == in.GetInstanceId() {
				return actors.OK()
			}
			forgetDefinition(in, id)
			// Being stopped, but the worker runs another id than the one
			// recorded (the provision found an instance running): record
			// it, so that this stop's job_stopped ends the instance.
			g.log.Info("instance being stopped runs under another instance id; recording it",
				"role", role, "node_id", node, "recorded_instance_id", in.GetInstanceId(), "instance_id", id)
			in.InstanceId = id
		case in.GetStatus() == internalpb.InstanceStatus_INSTANCE_RUNNING:
			if portsEqual(in.GetServicePortMappings(), r.GetServicePortMappings()) && adoptID(in.GetInstanceId(), id) == in.GetInstanceId() {
				return actors.OK()
			}
			forgetDefinition(in, id)
			in.ServicePortMappings, in.InstanceId = r.GetServicePortMappings(), adoptID(in.GetInstanceId(), id)
		default: // PROVISIONING → RUNNING
			in.Status, in.Since, in.ServicePortMappings = internalpb.InstanceStatus_INSTANCE_RUNNING, now, r.GetServicePortMappings()
			forgetDefinition(in, id)
			in.InstanceId = adoptID(in.GetInstanceId(), id)
			g.addHistory(next, hRunning(now, in))
		}
	} else {
		if p, ok := g.pending[role]; ok && p.node != node || !moveTargetWanted(g.rec, role) {
			// A start elsewhere, or the target of a move backed out.
			g.sendStop(node, role, id)
			return actors.OK()
		}
		if mi := movedIndex(g.rec, role); mi >= 0 {
			g.log.Warn("worker runs a role that now runs moved, under another role; stopping it, not adopting it",
				"role", role, "node_id", node, "moved_role", g.rec.GetInstances()[mi].GetRole(), "moved_node_id", g.rec.GetInstances()[mi].GetNodeId())
			g.sendStop(node, role, id)
			return actors.OK()
		}
		if _, starting := g.pending[role]; !starting && owedIndex(g.rec, role, node) >= 0 {
			g.log.Warn("worker runs an instance whose acknowledged stop it never confirmed (its node was lost meanwhile); stopping it, not adopting it",
				"role", role, "node_id", node)
			g.sendStop(node, role, id)
			return actors.OK()
		}
		in := &internalpb.Instance{
			Role: role, NodeId: node, Status: internalpb.InstanceStatus_INSTANCE_RUNNING, Since: now,
			ServicePortMappings: r.GetServicePortMappings(),
			NodeMetadata:        r.GetNodeMetadata(), RunningNodeMetadata: r.GetRunningNodeMetadata(),
			InstanceId: id,
		}
		if p, starting := g.pending[role]; starting {
			// This start's instance reported running before the node
			// grain's answer: it runs with the cores the start sent. An
			// instance adopted otherwise has unknown cores (none recorded).
			in.CpuList = p.cpus
			if id == "" || id == p.instance {
				// And the definition the start sent, unless the worker
				// kept an earlier instance (another id): that one's is
				// unknown, as is any adopted instance's (0).
				recordDefinition(in, p.def, j)
			}
		}
		putInstance(next, in)
		noteTargetStarted(next, in, now)
		g.addHistory(next, hProvisioned(now, in), hRunning(now, in))
		if p, ok := g.pending[role]; ok {
			// Started before the provision's answer: the note of the start.
			placed = NotePlaced(next, in, p.note, now)
		}
		g.log.Info("adopted an instance the worker reports running", "role", role, "node_id", node, "instance_id", id)
	}
	if next.Job.Job.State == managerpb.Job_PRE {
		next.Job.Job.State = managerpb.Job_ACTIVE
	}
	if rep := g.commit(reqID, next, append([]*managerpb.EventStreamEvent{updatedEvent(next.GetJob())}, placed...)...); rep != nil {
		return rep
	}
	g.log.Info("job running", "role", role, "node_id", node, "instance_id", id)
	return actors.OK()
}

// reportGone records that (job, role) no longer runs on the reporting node.
// A report naming another instance than the one recorded or being started
// on that node (otherInstance) is late — the end of an earlier instance,
// or the answer to a repeated stop of it — and changes nothing.
func (g *grain) reportGone(reqID string, r *internalpb.InstanceReport, reason managerpb.JobHistoryJobStopping_Reason) *internalpb.Reply {
	if current, other := g.otherInstance(r); other {
		g.log.Debug("ignoring the end of another instance", "role", r.GetRole(), "node_id", r.GetNodeId(),
			"kind", r.GetKind().String(), "instance_id", r.GetInstanceId(), "current_instance_id", current)
		return actors.OK()
	}
	i := instanceIndex(g.rec, r.GetRole())
	next := g.next()
	var placed []*managerpb.EventStreamEvent // a pending start's job_placed
	p, pending := g.pending[r.GetRole()]
	switch {
	case i < 0 && pending && p.node == r.GetNodeId() && r.GetKind() != internalpb.InstanceReport_MISSING:
		// The worker failed (or finished) the job before the node grain's
		// answer to the provision reached this grain: record the instance
		// and its end now, and tell the continuation (started) not to
		// record it as provisioning afterwards.
		now := g.now()
		in := &internalpb.Instance{Role: r.GetRole(), NodeId: r.GetNodeId(), Status: internalpb.InstanceStatus_INSTANCE_PROVISIONING, Since: now,
			NodeMetadata: r.GetNodeMetadata(), RunningNodeMetadata: r.GetRunningNodeMetadata(), InstanceId: p.instance, CpuList: p.cpus}
		recordDefinition(in, p.def, next.GetJob().GetJob())
		putInstance(next, in)
		noteTargetStarted(next, in, now)
		g.addHistory(next, hProvisioned(now, in))
		placed = NotePlaced(next, in, p.note, now)
		defer func() {
			if g.rec == next { // committed
				g.endedWhilePending[r.GetRole()] = r.GetNodeId()
			}
		}()
	case i < 0 || g.rec.GetInstances()[i].GetNodeId() != r.GetNodeId():
		if j := owedIndex(next, r.GetRole(), r.GetNodeId()); j >= 0 {
			// The owed stop is done: the worker no longer runs it.
			next.StopsOwed = slices.Delete(next.StopsOwed, j, j+1)
			if rep := g.commit(reqID, next); rep != nil {
				return rep
			}
			g.log.Info("owed stop confirmed by the worker", "role", r.GetRole(), "node_id", r.GetNodeId())
		}
		return actors.OK()
	}
	detail := r.GetReason()
	failed := r.GetKind() == internalpb.InstanceReport_FAILED
	if r.GetKind() == internalpb.InstanceReport_STOPPED {
		var byItself bool
		switch reason, byItself = stoppedReason(next, r.GetRole()); {
		case byItself && r.GetFenced():
			reason, detail = managerpb.JobHistoryJobStopping_JOB_STOPPED_NODE_STOPPED, Fenced
		case byItself:
			failed, detail = true, EndedByItself
		}
	}
	g.endInstance(next, r.GetRole(), reason)
	if failed {
		recordFailure(next, &managerpb.InstanceFailure{Role: r.GetRole(), NodeId: &commonpb.NodeId{NodeId: r.GetNodeId()},
			Reason: detail, At: g.now()})
	}
	events := append([]*managerpb.EventStreamEvent{updatedEvent(next.GetJob())}, placed...)
	if detail != "" {
		// The history's stopping reason is an enum; the worker's words go
		// to the event stream as job_info, so operators see why.
		events = append(events, infoEvent(g.id, r.GetRole(), g.now(),
			strings.ToLower(r.GetKind().String())+": "+detail))
	}
	if rep := g.commit(reqID, next, events...); rep != nil {
		return rep
	}
	g.log.Info("job instance ended", "role", r.GetRole(), "node_id", r.GetNodeId(), "instance_id", r.GetInstanceId(),
		"reason", reason.String(), "detail", detail)
	return actors.OK()
}

// Fenced is the detail recorded (the job_info "stopped: …") for an
// instance the worker's fence stopped (InstanceReport.fenced): its worker
// had no manager contact for longer than the job's lease
// (docs/design/worker-sessions.md §8). The end is recorded as a node loss,
// JOB_STOPPED_NODE_STOPPED: the job did nothing wrong, so it is neither a
// failure nor counted toward the restart ceiling, and it is placed again
// without the failure backoff.
const Fenced = "fenced: the worker had no manager contact for longer than the job's lease and stopped it, " +
	"so that it cannot run twice once the managers place it elsewhere (recorded as a node loss, not a failure)"

// EndedByItself is the failure reason recorded (InstanceFailure.reason,
// and the job_info "stopped: …") for an instance the worker reported
// stopped although the manager never stopped it: the worker ends a job on
// its own only when every service completed, i.e. exited with code 0 under
// a NEVER or ON_FAILURE restart policy (worker/internal/svcplan).
const EndedByItself = "ended by itself: every service exited with code 0, and the manager had not stopped it " +
	"(a live job is not expected to end; restarted with the failure backoff, counted toward the restart ceiling)"

// stoppedReason is the history reason of a job_stopped about role, an
// instance of rec on the reporting node. An instance the manager stopped
// (STOPPING) ended for the reason its stop recorded: its newest
// job_stopping entry (JOB_STOPPED_UNKNOWN_JOB if the bounded history lost
// it). Any other instance ended by itself (byItself): the job's own end is
// unexpected for live video, so it is recorded JOB_STOPPED_JOB_FAILED and
// counts as a failure (docs/design/placement.md, "Restart ceiling and
// backoff"), not JOB_STOPPED_UNKNOWN_JOB, which let the engine place an
// auto-placed job that ends at once again without any backoff.
func stoppedReason(rec *internalpb.JobRecord, role string) (reason managerpb.JobHistoryJobStopping_Reason, byItself bool) {
	i := instanceIndex(rec, role)
	if i < 0 || rec.GetInstances()[i].GetStatus() != internalpb.InstanceStatus_INSTANCE_STOPPING {
		return managerpb.JobHistoryJobStopping_JOB_STOPPED_JOB_FAILED, true
	}
	h := rec.GetJob().GetHistoryEntry()
	for k := len(h) - 1; k >= 0; k-- {
		if s := h[k].GetJobStopping(); s != nil && s.GetRole() == role {
			return s.GetReason(), false
		}
	}
	return managerpb.JobHistoryJobStopping_JOB_STOPPED_UNKNOWN_JOB, false
}

// maxStopsOwed bounds JobRecord.stops_owed (the oldest go first).
const maxStopsOwed = 64

// owedIndex returns the index of (role, node) in rec's owed stops, or -1.
func owedIndex(rec *internalpb.JobRecord, role, node string) int {
	return slices.IndexFunc(rec.GetStopsOwed(), func(o *internalpb.StopOwed) bool {
		return o.GetRole() == role && o.GetNodeId() == node
	})
}

// oweStop records that the stop of (role, node) was acknowledged but never
// confirmed by the worker.
func oweStop(rec *internalpb.JobRecord, role, node string, at *timestamppb.Timestamp) {
	if owedIndex(rec, role, node) >= 0 {
		return
	}
	rec.StopsOwed = append(rec.StopsOwed, &internalpb.StopOwed{Role: role, NodeId: node, Since: at})
	if over := len(rec.StopsOwed) - maxStopsOwed; over > 0 {
		rec.StopsOwed = slices.Delete(rec.StopsOwed, 0, over)
	}
}

// maxFailureReason bounds a recorded failure reason, in bytes (the worker
// sends the last output line; the record must stay small).
const maxFailureReason = 1024

// recordFailure keeps f as the last failure of its role in rec, one per
// role, sorted by role (JobByIdResponse.last_failures).
func recordFailure(rec *internalpb.JobRecord, f *managerpb.InstanceFailure) {
	if len(f.Reason) > maxFailureReason {
		f.Reason = strings.ToValidUTF8(f.Reason[:maxFailureReason], "") + "…"
	}
	if f.Reason == "" {
		f.Reason = "failed (the worker gave no reason)"
	}
	rec.LastFailures = slices.DeleteFunc(rec.LastFailures, func(x *managerpb.InstanceFailure) bool { return x.GetRole() == f.GetRole() })
	rec.LastFailures = append(rec.LastFailures, f)
	slices.SortFunc(rec.LastFailures, func(a, b *managerpb.InstanceFailure) int { return strings.Compare(a.GetRole(), b.GetRole()) })
}

// endInstance removes an instance of next, recording stopping (unless it was
// already stopping) and stopped.
func (g *grain) endInstance(next *internalpb.JobRecord, role string, reason managerpb.JobHistoryJobStopping_Reason) {
	i := instanceIndex(next, role)
	in := next.Instances[i]
	now := g.now()
	if in.GetStatus() != internalpb.InstanceStatus_INSTANCE_STOPPING {
		g.addHistory(next, hStopping(now, in, reason))
	}
	g.addHistory(next, hStopped(now, in))
	removeInstance(next, role)
}

// nodeGone ends every instance of the job on a node that stopped.
func (g *grain) nodeGone(reqID string, c *internalpb.NodeGone) *internalpb.Reply {
	if g.rec == nil {
		return actors.OK()
	}
	next := g.next()
	n := 0
	for _, in := range g.rec.GetInstances() {
		if in.GetNodeId() == c.GetNodeId() {
			if in.GetStatus() == internalpb.InstanceStatus_INSTANCE_STOPPING {
				// Acknowledged, never confirmed: owed if the worker comes
				// back still running it.
				oweStop(next, in.GetRole(), in.GetNodeId(), g.now())
			}
			g.endInstance(next, in.GetRole(), c.GetReason())
			n++
		}
	}
	if n == 0 {
		return actors.OK()
	}
	if rep := g.commit(reqID, next, updatedEvent(next.GetJob())); rep != nil {
		return rep
	}
	g.log.Info("job instances ended with their node", "node_id", c.GetNodeId(), "reason", c.GetReason().String(), "instances", n)
	return actors.OK()
}

func portsEqual(a, b map[string]*commonpb.ResolvedPortMappings) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if !proto.Equal(v, b[k]) {
			return false
		}
	}
	return true
}

// infoEvent is a job_info event with text from the manager about (job,
// role) (a container_event without a service name).
func infoEvent(job, role string, at *timestamppb.Timestamp, text string) *managerpb.EventStreamEvent {
	return &managerpb.EventStreamEvent{Event: &managerpb.EventStreamEvent_JobInfo{JobInfo: &commonpb.JobInfoMessage{
		JobKey:    &commonpb.ActiveJobKey{JobId: &commonpb.JobId{JobId: job}, Role: role},
		Timestamp: at,
		Message:   &commonpb.JobInfoMessage_ContainerEvent{ContainerEvent: &commonpb.JobInfoContainerEvent{Text: text}},
	}}}
}
