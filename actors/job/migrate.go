package job

import (
	"slices"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/norsk-oss/norsk-manager/actors"
	"github.com/norsk-oss/norsk-manager/actors/roles"
	"github.com/norsk-oss/norsk-manager/proto/commonpb"
	"github.com/norsk-oss/norsk-manager/proto/errorpb"
	"github.com/norsk-oss/norsk-manager/proto/internalpb"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
)

// The job grain's side of a make-before-break move (docs/design/placement.md,
// "Moves"). The grain keeps the move in the record (JobRecord.migrations)
// and applies its steps; the placement engine decides them (actors/placement
// migrate.go): BeginMigration records it, the engine's StartJob of the
// target role records the target (noteTargetStarted), HandOverMigration
// stops the source once the target runs, EndMigration removes the move once
// the source (or, backing out, the target) is gone. AbortMigration backs it
// out while the source still runs.

// MigrationOf returns the move in progress in rec whose source or target
// has the logical role of role, or nil.
func MigrationOf(rec *internalpb.JobRecord, role string) *managerpb.Migration {
	l := roles.LogicalRole(role)
	for _, m := range rec.GetMigrations() {
		if roles.LogicalRole(m.GetSourceRole()) == l {
			return m
		}
	}
	return nil
}

// migrationByTarget returns the index of the move whose target role is
// target in rec, or -1.
func migrationByTarget(rec *internalpb.JobRecord, target string) int {
	return slices.IndexFunc(rec.GetMigrations(), func(m *managerpb.Migration) bool { return m.GetTargetRole() == target })
}

// beginMigration records a move of c.role (see internalpb.BeginMigration):
// a logical role ("primary") that runs under a move's role since a move
// ("primary~1") moves that instance.
func (g *grain) beginMigration(reqID string, c *internalpb.BeginMigration) *internalpb.Reply {
	if g.rec == nil {
		return g.notFound()
	}
	j := g.rec.GetJob().GetJob()
	role := c.GetRole()
	i := instanceIndex(g.rec, role)
	if mi := movedIndex(g.rec, role); i < 0 && mi >= 0 {
		// The logical role, which runs under a move's role since a move:
		// that instance is the one to move ("primary" → "primary~1").
		i, role = mi, g.rec.GetInstances()[mi].GetRole()
	}
	switch {
	case j.GetState() == managerpb.Job_POST:
		return actors.Fail(errorpb.Code_FAILED_PRECONDITION, "job %q is completed (POST): nothing to move", g.id)
	case j.GetTerminalState() != nil:
		return actors.Fail(errorpb.Code_FAILED_PRECONDITION, "job %q has a terminal failure verdict (%s) and must not be started elsewhere",
			g.id, j.GetTerminalState().GetFailureReason())
	case i < 0:
		return actors.Fail(errorpb.Code_FAILED_PRECONDITION, "role: job %q has no instance with role %q (it runs %s)", g.id, role, describeInstances(g.rec, g.pending))
	}
	in := g.rec.GetInstances()[i]
	if m := MigrationOf(g.rec, role); m != nil {
		return actors.Fail(errorpb.Code_FAILED_PRECONDITION, "role: job %q role %q is already moving (%s → %s, %s); abort it first (AbortMigration) or wait for it",
			g.id, role, m.GetSourceRole(), m.GetTargetRole(), phaseName(m.GetPhase()))
	}
	switch {
	case in.GetStatus() != internalpb.InstanceStatus_INSTANCE_RUNNING:
		return actors.Fail(errorpb.Code_FAILED_PRECONDITION, "role: job %q role %q is %s on node %q, not running: only a running instance is moved",
			g.id, role, statusName(in.GetStatus()), in.GetNodeId())
	case c.GetRequestedNodeId() != "" && c.GetRequestedNodeId() == in.GetNodeId():
		return actors.Fail(errorpb.Code_FAILED_PRECONDITION, "target_node_id: job %q role %q already runs on node %q", g.id, role, in.GetNodeId())
	}
	now := g.now()
	next := g.next()
	next.MoveCount++
	m := &managerpb.Migration{
		SourceRole: role, TargetRole: roles.TargetRole(role, next.MoveCount), Move: next.MoveCount,
		SourceNodeId: in.GetNodeId(), RequestedNodeId: c.GetRequestedNodeId(),
		Phase: managerpb.Migration_MIGRATION_STARTING, Why: c.GetWhy(), Reason: c.GetReason(), Who: c.GetWho(), StartedAt: now,
	}
	next.Migrations = append(next.Migrations, m)
	ev := &managerpb.EventStreamEvent{Event: &managerpb.EventStreamEvent_MigrationStarted{MigrationStarted: &managerpb.MigrationStarted{
		JobId: jobIDpb(g.id), Migration: proto.Clone(m).(*managerpb.Migration)}}}
	if r := g.commit(reqID, next, updatedEvent(next.GetJob()), ev); r != nil {
		return r
	}
	g.log.Info("move begun", "role", role, "target_role", m.GetTargetRole(), "node_id", in.GetNodeId(),
		"requested_node_id", c.GetRequestedNodeId(), "why", c.GetWhy().String(), "reason", c.GetReason())
	return &internalpb.Reply{Payload: &internalpb.Reply_Job{Job: g.rec}}
}

// movedIndex returns, for a role that is not a move's ("primary"), the
// index in rec of an instance of it under a move's role ("primary~1":
// the role after a move), or -1. That instance runs the role: a second
// one under the plain name would run the job twice.
func movedIndex(rec *internalpb.JobRecord, role string) int {
	if roles.IsMoved(role) {
		return -1
	}
	return slices.IndexFunc(rec.GetInstances(), func(in *internalpb.Instance) bool {
		return in.GetRole() != role && roles.LogicalRole(in.GetRole()) == role
	})
}

// checkMoveStart answers whether a StartJob of role, a move's role
// ("primary~2"), may go ahead: only as the target of a move that is
// STARTING. Nil for any other role.
func (g *grain) checkMoveStart(role string) *internalpb.Reply {
	if !roles.IsMoved(role) {
		return nil
	}
	i := migrationByTarget(g.rec, role)
	if i < 0 || g.rec.GetMigrations()[i].GetPhase() != managerpb.Migration_MIGRATION_STARTING {
		return actors.Fail(errorpb.Code_FAILED_PRECONDITION, "job %q role %q is not the target of a move being started", g.id, role)
	}
	return nil
}

// moveTargetWanted reports whether an instance of role may be recorded in
// rec: any role that is not a move's, and a move's target while its move
// is STARTING. A target of a move aborted (or ended) meanwhile is not: the
// caller stops it.
func moveTargetWanted(rec *internalpb.JobRecord, role string) bool {
	if !roles.IsMoved(role) {
		return true
	}
	if i := migrationByTarget(rec, role); i >= 0 {
		return rec.GetMigrations()[i].GetPhase() == managerpb.Migration_MIGRATION_STARTING
	}
	// A role that runs after its move ended (primary~1, the source of no
	// move now) stays wanted if it is already recorded.
	return instanceIndex(rec, role) >= 0
}

// noteTargetStarted records in next, when in is the target of a STARTING
// move, the node it was started on and when.
func noteTargetStarted(next *internalpb.JobRecord, in *internalpb.Instance, now *timestamppb.Timestamp) {
	if i := migrationByTarget(next, in.GetRole()); i >= 0 {
		m := next.Migrations[i]
		m.TargetNodeId, m.TargetStartedAt = in.GetNodeId(), now
	}
}

// handOverMigration stops the source of a move whose target runs.
func (g *grain) handOverMigration(reqID string, c *internalpb.HandOverMigration) *internalpb.Reply {
	if g.rec == nil {
		return g.notFound()
	}
	mi := migrationByTarget(g.rec, c.GetTargetRole())
	if mi < 0 {
		return actors.Fail(errorpb.Code_FAILED_PRECONDITION, "job %q has no move to role %q", g.id, c.GetTargetRole())
	}
	m := g.rec.GetMigrations()[mi]
	if m.GetPhase() == managerpb.Migration_MIGRATION_HANDING_OVER {
		if si := instanceIndex(g.rec, m.GetSourceRole()); si >= 0 {
			in := g.rec.GetInstances()[si]
			g.sendStop(in.GetNodeId(), in.GetRole(), in.GetInstanceId()) // idempotent: ask again
		}
		return actors.OK()
	}
	ti := instanceIndex(g.rec, m.GetTargetRole())
	switch {
	case m.GetPhase() != managerpb.Migration_MIGRATION_STARTING:
		return actors.Fail(errorpb.Code_FAILED_PRECONDITION, "job %q move to role %q is %s", g.id, m.GetTargetRole(), phaseName(m.GetPhase()))
	case ti < 0 || g.rec.GetInstances()[ti].GetStatus() != internalpb.InstanceStatus_INSTANCE_RUNNING:
		return actors.Fail(errorpb.Code_FAILED_PRECONDITION, "job %q move to role %q: the target is not running", g.id, m.GetTargetRole())
	}
	next := g.next()
	nm := next.Migrations[mi]
	nm.Phase = managerpb.Migration_MIGRATION_HANDING_OVER
	nm.TargetRunningAt = next.Instances[ti].GetSince()
	si := instanceIndex(next, m.GetSourceRole())
	var src *internalpb.Instance
	if si >= 0 {
		src = next.Instances[si]
		if src.GetStatus() != internalpb.InstanceStatus_INSTANCE_STOPPING {
			g.markStopping(next, src.GetRole(), managerpb.JobHistoryJobStopping_JOB_STOPPED_MIGRATED)
		}
	}
	if r := g.commit(reqID, next, updatedEvent(next.GetJob())); r != nil {
		return r
	}
	if src != nil {
		g.sendStop(src.GetNodeId(), src.GetRole(), src.GetInstanceId())
	}
	g.log.Info("move handing over: target runs, source stopping", "role", m.GetSourceRole(), "target_role", m.GetTargetRole(),
		"node_id", m.GetSourceNodeId(), "target_node_id", m.GetTargetNodeId())
	return actors.OK()
}

// abortMigration backs a move out (see Manager.AbortMigration). A target
// role with another source than its move's (or that source's logical
// role, as MigrateJob accepts it) is INVALID_ARGUMENT naming source_role.
func (g *grain) abortMigration(reqID string, c *internalpb.AbortMigration) *internalpb.Reply {
	if g.rec == nil {
		return g.notFound()
	}
	mi := migrationByTarget(g.rec, c.GetTargetRole())
	if mi < 0 {
		return actors.OK() // ended already, or never was: nothing to do
	}
	m := g.rec.GetMigrations()[mi]
	if src := c.GetSourceRole(); src != m.GetSourceRole() && (roles.IsMoved(src) || src != roles.LogicalRole(m.GetSourceRole())) {
		// A target role names one move (the move counter): the pair is
		// wrong, and OK would say the move was stopped while it goes on.
		return actors.Fail(errorpb.Code_INVALID_ARGUMENT, "source_role: job %q move to role %q is from role %q, not %q",
			g.id, m.GetTargetRole(), m.GetSourceRole(), c.GetSourceRole())
	}
	switch m.GetPhase() {
	case managerpb.Migration_MIGRATION_BACKING_OUT:
		return actors.OK()
	case managerpb.Migration_MIGRATION_HANDING_OVER:
		return actors.Fail(errorpb.Code_FAILED_PRECONDITION,
			"job %q move %s → %s is too late to abort: its target runs on node %q and its source is being stopped",
			g.id, m.GetSourceRole(), m.GetTargetRole(), m.GetTargetNodeId())
	}
	reason := c.GetReason()
	if reason == "" {
		reason = "aborted"
	}
	next := g.next()
	nm := next.Migrations[mi]
	nm.Phase, nm.BackOutReason, nm.Failed = managerpb.Migration_MIGRATION_BACKING_OUT, reason, c.GetFailed()
	ti := instanceIndex(next, m.GetTargetRole())
	_, pending := g.pending[m.GetTargetRole()]
	var target *internalpb.Instance
	done := false
	switch {
	case ti >= 0:
		target = next.Instances[ti]
		if target.GetStatus() != internalpb.InstanceStatus_INSTANCE_STOPPING {
			g.markStopping(next, target.GetRole(), managerpb.JobHistoryJobStopping_JOB_STOPPED_USER_REQUESTED)
		}
	case !pending:
		// Nothing started: the move is over at once.
		next.Migrations = slices.Delete(next.Migrations, mi, mi+1)
		done = true
	}
	ev := abortedEvent(g.id, nm, reason, done)
	if r := g.commit(reqID, next, updatedEvent(next.GetJob()), ev); r != nil {
		return r
	}
	if target != nil {
		g.sendStop(target.GetNodeId(), target.GetRole(), target.GetInstanceId())
	}
	g.log.Info("move backed out", "role", m.GetSourceRole(), "target_role", m.GetTargetRole(), "reason", reason, "failed", c.GetFailed(), "done", done)
	return actors.OK()
}

// endMigration removes a move whose work is done: HANDING_OVER with the
// source gone (migration_completed), BACKING_OUT with the target gone and
// no start of it pending (migration_aborted, done).
func (g *grain) endMigration(reqID string, c *internalpb.EndMigration) *internalpb.Reply {
	if g.rec == nil {
		return g.notFound()
	}
	mi := migrationByTarget(g.rec, c.GetTargetRole())
	if mi < 0 {
		return actors.OK()
	}
	m := g.rec.GetMigrations()[mi]
	next := g.next()
	next.Migrations = slices.Delete(next.Migrations, mi, mi+1)
	now := g.now()
	var ev *managerpb.EventStreamEvent
	switch m.GetPhase() {
	case managerpb.Migration_MIGRATION_HANDING_OVER:
		if instanceIndex(g.rec, m.GetSourceRole()) >= 0 {
			return actors.Fail(errorpb.Code_FAILED_PRECONDITION, "job %q move to role %q: the source %q still runs", g.id, m.GetTargetRole(), m.GetSourceRole())
		}
		stopped := lastStopped(g.rec, m.GetSourceRole(), m.GetTargetRunningAt())
		if stopped == nil {
			stopped = now
		}
		ev = &managerpb.EventStreamEvent{Event: &managerpb.EventStreamEvent_MigrationCompleted{MigrationCompleted: &managerpb.MigrationCompleted{
			JobId: jobIDpb(g.id), Migration: m,
			HandoverMs: msBetween(m.GetTargetRunningAt(), stopped), OverlapMs: msBetween(m.GetTargetStartedAt(), stopped)}}}
	case managerpb.Migration_MIGRATION_BACKING_OUT:
		if _, pending := g.pending[m.GetTargetRole()]; pending || instanceIndex(g.rec, m.GetTargetRole()) >= 0 {
			return actors.Fail(errorpb.Code_FAILED_PRECONDITION, "job %q move to role %q: the target is still being stopped", g.id, m.GetTargetRole())
		}
		ev = abortedEvent(g.id, m, m.GetBackOutReason(), true)
	default:
		return actors.Fail(errorpb.Code_FAILED_PRECONDITION, "job %q move to role %q is %s: not done", g.id, m.GetTargetRole(), phaseName(m.GetPhase()))
	}
	if r := g.commit(reqID, next, updatedEvent(next.GetJob()), ev); r != nil {
		return r
	}
	g.log.Info("move ended", "role", m.GetSourceRole(), "target_role", m.GetTargetRole(), "phase", m.GetPhase().String())
	return actors.OK()
}

// lastStopped is the time of the newest job_stopped history entry of role
// at or after since; nil if none.
func lastStopped(rec *internalpb.JobRecord, role string, since *timestamppb.Timestamp) *timestamppb.Timestamp {
	h := rec.GetJob().GetHistoryEntry()
	for i := len(h) - 1; i >= 0; i-- {
		s := h[i].GetJobStopped()
		if s == nil || s.GetRole() != role {
			continue
		}
		if since != nil && s.GetTimestamp().AsTime().Before(since.AsTime()) {
			return nil
		}
		return s.GetTimestamp()
	}
	return nil
}

// msBetween is b - a in milliseconds; 0 when either is unset.
func msBetween(a, b *timestamppb.Timestamp) float64 {
	if a == nil || b == nil {
		return 0
	}
	return float64(b.AsTime().Sub(a.AsTime()).Microseconds()) / 1000
}

func abortedEvent(id string, m *managerpb.Migration, reason string, done bool) *managerpb.EventStreamEvent {
	return &managerpb.EventStreamEvent{Event: &managerpb.EventStreamEvent_MigrationAborted{MigrationAborted: &managerpb.MigrationAborted{
		JobId: jobIDpb(id), Migration: proto.Clone(m).(*managerpb.Migration), Reason: reason, Done: done}}}
}

func jobIDpb(id string) *commonpb.JobId { return &commonpb.JobId{JobId: id} }

// phaseName is a move's phase as operators read it ("starting").
func phaseName(p managerpb.Migration_Phase) string {
	switch p {
	case managerpb.Migration_MIGRATION_STARTING:
		return "starting its target"
	case managerpb.Migration_MIGRATION_HANDING_OVER:
		return "handing over (its source is being stopped)"
	case managerpb.Migration_MIGRATION_BACKING_OUT:
		return "backing out (its target is being stopped)"
	}
	return p.String()
}
