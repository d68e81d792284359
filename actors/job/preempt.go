package job

import (
	"slices"
	"strings"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/norsk-oss/norsk-manager/actors"
	"github.com/norsk-oss/norsk-manager/proto/commonpb"
	"github.com/norsk-oss/norsk-manager/proto/errorpb"
	"github.com/norsk-oss/norsk-manager/proto/internalpb"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
)

// preempt is the placement engine's stop of a LOW priority instance to make
// room for a HIGH priority job role (docs/design/placement.md,
// "Priorities"): StopJob's rules (FAILED_PRECONDITION when role has no
// instance on the node, or c names another instance id — a stale
// preemption, nothing changes; an instance already stopping is asked
// again), with
// the history reason JOB_STOPPED_PREEMPTED, the preemption kept in the
// record and job_preempted raised in the same commit.
func (g *grain) preempt(ctx actor.Context, reqID string, c *internalpb.PreemptJob) *internalpb.Reply {
	if g.rec == nil {
		return g.notFound()
	}
	role, node := c.GetRole(), c.GetNodeId()
	i := instanceIndex(g.rec, role)
	if i < 0 {
		return actors.Fail(errorpb.Code_FAILED_PRECONDITION, "job %q has no instance with role %q", g.id, role)
	}
	in := g.rec.GetInstances()[i]
	if in.GetNodeId() != node {
		return actors.Fail(errorpb.Code_FAILED_PRECONDITION, "job %q role %q runs on node %q, not on node %q", g.id, role, in.GetNodeId(), node)
	}
	if id := c.GetInstanceId(); id != "" && in.GetInstanceId() != id {
		return actors.Fail(errorpb.Code_FAILED_PRECONDITION, "job %q role %q on node %q is instance %q, not %q: a stale preemption",
			g.id, role, node, in.GetInstanceId(), id)
	}
	if in.GetStatus() == internalpb.InstanceStatus_INSTANCE_STOPPING {
		g.sendStop(node, role, in.GetInstanceId()) // idempotent: ask again
		return actors.OK()
	}
	next := g.next()
	g.markStopping(next, role, managerpb.JobHistoryJobStopping_JOB_STOPPED_PREEMPTED)
	ev := ApplyPreemption(next, c, g.now())
	if r := g.commit(reqID, next, updatedEvent(next.GetJob()), ev); r != nil {
		return r
	}
	g.sendStop(node, role, in.GetInstanceId())
	g.log.Info("job stopping: preempted", "role", role, "node_id", node, "for_job_id", c.GetForJobId(), "for_role", c.GetForRole())
	return actors.OK()
}

// ApplyPreemption keeps c as the last preemption of its role in rec
// (JobRecord.preemptions, sorted by role; the reason bounded to 2 KiB) and
// returns the job_preempted event of the commit. now stamps the record.
// The caller marks the instance stopping; the placement engine's tests
// apply it to their fake records, so both follow one rule.
func ApplyPreemption(rec *internalpb.JobRecord, c *internalpb.PreemptJob, now *timestamppb.Timestamp) *managerpb.EventStreamEvent {
	reason := clip(c.GetReason())
	rec.Preemptions = slices.DeleteFunc(rec.Preemptions, func(p *internalpb.PreemptionRecord) bool { return p.GetRole() == c.GetRole() })
	rec.Preemptions = append(rec.Preemptions, &internalpb.PreemptionRecord{Role: c.GetRole(), NodeId: c.GetNodeId(),
		ForJobId: c.GetForJobId(), ForRole: c.GetForRole(), Reason: reason, At: now})
	slices.SortFunc(rec.Preemptions, func(x, y *internalpb.PreemptionRecord) int { return strings.Compare(x.GetRole(), y.GetRole()) })
	return &managerpb.EventStreamEvent{Event: &managerpb.EventStreamEvent_JobPreempted{JobPreempted: &managerpb.JobPreempted{
		JobId: rec.GetJob().GetJob().GetJobId(), Role: c.GetRole(), NodeId: &commonpb.NodeId{NodeId: c.GetNodeId()},
		ForJobId: &commonpb.JobId{JobId: c.GetForJobId()}, ForRole: c.GetForRole(), Reason: reason}}}
}
