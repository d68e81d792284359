package placement

import (
	"slices"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/norsk-oss/norsk-manager/actors"
	"github.com/norsk-oss/norsk-manager/actors/roles"
	"github.com/norsk-oss/norsk-manager/proto/errorpb"
	"github.com/norsk-oss/norsk-manager/proto/internalpb"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
)

// The fake router's moves: the job grain's rules (actors/job migrate.go,
// tested there) as far as the engine's tests need them.

func fakeMigration(rec *internalpb.JobRecord, target string) int {
	return slices.IndexFunc(rec.GetMigrations(), func(m *managerpb.Migration) bool { return m.GetTargetRole() == target })
}

// fakeMoveStart refuses a start of a move's role that is no STARTING
// move's target, as checkMoveStart does.
func fakeMoveStart(rec *internalpb.JobRecord, role string) *internalpb.Reply {
	if !roles.IsMoved(role) {
		return nil
	}
	if i := fakeMigration(rec, role); i < 0 || rec.Migrations[i].GetPhase() != managerpb.Migration_MIGRATION_STARTING {
		return actors.Fail(errorpb.Code_FAILED_PRECONDITION, "role %q is not a move's target being started", role)
	}
	return nil
}

func fakeTargetStarted(rec *internalpb.JobRecord, in *internalpb.Instance, at *timestamppb.Timestamp) {
	if i := fakeMigration(rec, in.GetRole()); i >= 0 {
		rec.Migrations[i].TargetNodeId, rec.Migrations[i].TargetStartedAt = in.GetNodeId(), at
	}
}

// fakeMove applies the move commands to rec.
func (r *fakeRouter) fakeMove(rec *internalpb.JobRecord, c *internalpb.JobCommand, at *timestamppb.Timestamp) (*managerpb.EventStreamEvent, *internalpb.Reply) {
	inst := func(role string) *internalpb.Instance { return instanceOf(rec, role) }
	switch x := c.GetCmd().(type) {
	case *internalpb.JobCommand_BeginMigration:
		src := inst(x.BeginMigration.GetRole())
		if src == nil || src.GetStatus() != internalpb.InstanceStatus_INSTANCE_RUNNING {
			return nil, actors.Fail(errorpb.Code_FAILED_PRECONDITION, "role not running")
		}
		for _, m := range rec.GetMigrations() {
			if roles.LogicalRole(m.GetSourceRole()) == roles.LogicalRole(src.GetRole()) {
				return nil, actors.Fail(errorpb.Code_FAILED_PRECONDITION, "already moving")
			}
		}
		rec.MoveCount++
		m := &managerpb.Migration{SourceRole: src.GetRole(), TargetRole: roles.TargetRole(src.GetRole(), rec.MoveCount), Move: rec.MoveCount,
			SourceNodeId: src.GetNodeId(), RequestedNodeId: x.BeginMigration.GetRequestedNodeId(), Phase: managerpb.Migration_MIGRATION_STARTING,
			Why: x.BeginMigration.GetWhy(), Reason: x.BeginMigration.GetReason(), StartedAt: at}
		rec.Migrations = append(rec.Migrations, m)
		r.count(&r.begins, c.GetJobId()+"/"+src.GetRole())
		return &managerpb.EventStreamEvent{Event: &managerpb.EventStreamEvent_MigrationStarted{MigrationStarted: &managerpb.MigrationStarted{Migration: m}}}, nil
	case *internalpb.JobCommand_HandOverMigration:
		i := fakeMigration(rec, x.HandOverMigration.GetTargetRole())
		if i < 0 || rec.Migrations[i].GetPhase() != managerpb.Migration_MIGRATION_STARTING ||
			inst(rec.Migrations[i].GetTargetRole()).GetStatus() != internalpb.InstanceStatus_INSTANCE_RUNNING {
			return nil, actors.Fail(errorpb.Code_FAILED_PRECONDITION, "not ready to hand over")
		}
		m := rec.Migrations[i]
		m.Phase = managerpb.Migration_MIGRATION_HANDING_OVER
		if src := inst(m.GetSourceRole()); src != nil {
			src.Status = internalpb.InstanceStatus_INSTANCE_STOPPING
			rec.Job.HistoryEntry = append(rec.Job.HistoryEntry, &managerpb.JobHistoryEntry{HistoryEntry: &managerpb.JobHistoryEntry_JobStopping{
				JobStopping: &managerpb.JobHistoryJobStopping{Timestamp: at, Role: src.GetRole(), NodeMetadata: src.GetNodeMetadata(),
					Reason: managerpb.JobHistoryJobStopping_JOB_STOPPED_MIGRATED}}})
			r.count(&r.stops, c.GetJobId()+"/"+src.GetRole())
		}
	case *internalpb.JobCommand_AbortMigration:
		i := fakeMigration(rec, x.AbortMigration.GetTargetRole())
		if i < 0 || rec.Migrations[i].GetPhase() == managerpb.Migration_MIGRATION_BACKING_OUT {
			return nil, nil
		}
		m := rec.Migrations[i]
		if m.GetPhase() == managerpb.Migration_MIGRATION_HANDING_OVER {
			return nil, actors.Fail(errorpb.Code_FAILED_PRECONDITION, "too late")
		}
		m.Phase, m.BackOutReason, m.Failed = managerpb.Migration_MIGRATION_BACKING_OUT, x.AbortMigration.GetReason(), x.AbortMigration.GetFailed()
		done := false
		if t := inst(m.GetTargetRole()); t != nil {
			t.Status = internalpb.InstanceStatus_INSTANCE_STOPPING
			r.count(&r.stops, c.GetJobId()+"/"+t.GetRole())
		} else {
			rec.Migrations = slices.Delete(rec.Migrations, i, i+1)
			done = true
		}
		return &managerpb.EventStreamEvent{Event: &managerpb.EventStreamEvent_MigrationAborted{MigrationAborted: &managerpb.MigrationAborted{
			Migration: m, Reason: m.GetBackOutReason(), Done: done}}}, nil
	case *internalpb.JobCommand_EndMigration:
		i := fakeMigration(rec, x.EndMigration.GetTargetRole())
		if i < 0 {
			return nil, nil
		}
		m := rec.Migrations[i]
		gone := m.GetSourceRole()
		if m.GetPhase() == managerpb.Migration_MIGRATION_BACKING_OUT {
			gone = m.GetTargetRole()
		}
		if inst(gone) != nil || m.GetPhase() == managerpb.Migration_MIGRATION_STARTING {
			return nil, actors.Fail(errorpb.Code_FAILED_PRECONDITION, "not done")
		}
		rec.Migrations = slices.Delete(rec.Migrations, i, i+1)
		if m.GetPhase() == managerpb.Migration_MIGRATION_BACKING_OUT {
			return &managerpb.EventStreamEvent{Event: &managerpb.EventStreamEvent_MigrationAborted{MigrationAborted: &managerpb.MigrationAborted{
				Migration: m, Reason: m.GetBackOutReason(), Done: true}}}, nil
		}
		return &managerpb.EventStreamEvent{Event: &managerpb.EventStreamEvent_MigrationCompleted{MigrationCompleted: &managerpb.MigrationCompleted{Migration: m}}}, nil
	default:
		return nil, actors.Fail(errorpb.Code_INVALID_ARGUMENT, "fake router: unexpected command %T", c.GetCmd())
	}
	return nil, nil
}

// beginCount is how many moves of "job/role" were begun.
func (r *fakeRouter) beginCount(id, role string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.begins[id+"/"+role]
}

// run reports job id's role running, as the grain does on job_started.
func (f *fixture) run(id, role string) {
	rec := f.job(id)
	in := instanceOf(rec, role)
	in.Status = internalpb.InstanceStatus_INSTANCE_RUNNING
	f.putJob(rec)
}

// moveOf is job id's move in progress (nil: none).
func (f *fixture) moveOf(id string) *managerpb.Migration {
	if ms := f.job(id).GetMigrations(); len(ms) > 0 {
		return ms[0]
	}
	return nil
}

// runningRole is the role job id runs under whose logical role is logical
// ("" if none): "primary~2" after two moves.
func (f *fixture) runningRole(id, logical string) string {
	for _, in := range f.job(id).GetInstances() {
		if roles.LogicalRole(in.GetRole()) == logical {
			return in.GetRole()
		}
	}
	return ""
}
