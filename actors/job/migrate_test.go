package job_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/norsk-oss/norsk-manager/proto/commonpb"
	"github.com/norsk-oss/norsk-manager/proto/errorpb"
	"github.com/norsk-oss/norsk-manager/proto/internalpb"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
)

func beginMove(role, node string) *internalpb.JobCommand {
	return &internalpb.JobCommand{Cmd: &internalpb.JobCommand_BeginMigration{BeginMigration: &internalpb.BeginMigration{
		Role: role, RequestedNodeId: node, Why: managerpb.Migration_MIGRATION_OPERATOR, Reason: "test", Who: "tester"}}}
}

func handOver(target string) *internalpb.JobCommand {
	return &internalpb.JobCommand{Cmd: &internalpb.JobCommand_HandOverMigration{HandOverMigration: &internalpb.HandOverMigration{TargetRole: target}}}
}

func abortMove(source, target string) *internalpb.JobCommand {
	return &internalpb.JobCommand{Cmd: &internalpb.JobCommand_AbortMigration{AbortMigration: &internalpb.AbortMigration{
		SourceRole: source, TargetRole: target, Reason: "operator says no"}}}
}

func endMove(target string) *internalpb.JobCommand {
	return &internalpb.JobCommand{Cmd: &internalpb.JobCommand_EndMigration{EndMigration: &internalpb.EndMigration{TargetRole: target}}}
}

// runningJob creates job id running as primary on n1.
func runningJob(t *testing.T, e *env, id string) {
	t.Helper()
	require.Equal(t, errorpb.Code_OK, e.do(t, id, create(runnable(&managerpb.Job{JobId: &commonpb.JobId{JobId: id}}))).GetCode())
	require.Equal(t, errorpb.Code_OK, e.do(t, id, start("primary", "n1")).GetCode())
	require.Equal(t, errorpb.Code_OK, e.do(t, id, report(internalpb.InstanceReport_STARTED, "primary", "n1")).GetCode())
}

func code(t *testing.T, r *internalpb.Reply) errorpb.Code {
	t.Helper()
	return r.GetCode()
}

// A move through every phase: begin, the target started and running, the
// hand-over stops the source with reason MIGRATED, the end removes the
// move; the role that runs afterwards is the target role.
func TestJob_MigrationPhases(t *testing.T) {
	e := newEnv(t)
	runningJob(t, e, "j")

	r := e.do(t, "j", beginMove("primary", ""))
	require.Equal(t, errorpb.Code_OK, r.GetCode(), r.GetMessage())
	m := r.GetJob().GetMigrations()[0]
	require.Equal(t, "primary~1", m.GetTargetRole())
	require.Equal(t, "n1", m.GetSourceNodeId())
	require.Equal(t, managerpb.Migration_MIGRATION_STARTING, m.GetPhase())

	// A second move of the same logical role is refused.
	r = e.do(t, "j", beginMove("primary", ""))
	require.Equal(t, errorpb.Code_FAILED_PRECONDITION, r.GetCode())
	require.Contains(t, r.GetMessage(), "already moving")

	// Hand-over before the target runs is refused.
	require.Equal(t, errorpb.Code_FAILED_PRECONDITION, code(t, e.do(t, "j", handOver("primary~1"))))
	// A start of a role with "~" that is no move's target is refused.
	require.Equal(t, errorpb.Code_FAILED_PRECONDITION, code(t, e.do(t, "j", start("primary~9", "n2"))))

	require.Equal(t, errorpb.Code_OK, code(t, e.do(t, "j", start("primary~1", "n2"))))
	rec := e.record(t, "j")
	require.Equal(t, "n2", rec.GetMigrations()[0].GetTargetNodeId(), "the target's node is recorded with it")
	require.NotNil(t, rec.GetMigrations()[0].GetTargetStartedAt())
	require.Equal(t, errorpb.Code_OK, code(t, e.do(t, "j", report(internalpb.InstanceReport_STARTED, "primary~1", "n2"))))

	require.Equal(t, errorpb.Code_OK, code(t, e.do(t, "j", handOver("primary~1"))))
	e.nodes.waitStop(t, "n1/j/primary")
	rec = e.record(t, "j")
	require.Equal(t, managerpb.Migration_MIGRATION_HANDING_OVER, rec.GetMigrations()[0].GetPhase())
	require.Contains(t, history(rec), "stopping:JOB_STOPPED_MIGRATED")
	// Too late to abort now.
	require.Equal(t, errorpb.Code_FAILED_PRECONDITION, code(t, e.do(t, "j", abortMove("primary", "primary~1"))))
	// Not ended while the source runs.
	require.Equal(t, errorpb.Code_FAILED_PRECONDITION, code(t, e.do(t, "j", endMove("primary~1"))))

	e.advance(200 * time.Millisecond)
	require.Equal(t, errorpb.Code_OK, code(t, e.do(t, "j", report(internalpb.InstanceReport_STOPPED, "primary", "n1"))))
	require.Equal(t, errorpb.Code_OK, code(t, e.do(t, "j", endMove("primary~1"))))
	rec = e.record(t, "j")
	require.Empty(t, rec.GetMigrations())
	require.Len(t, rec.GetInstances(), 1)
	require.Equal(t, "primary~1", rec.GetInstances()[0].GetRole())
	require.Equal(t, uint32(1), rec.GetMoveCount())
	// Ending again is a no-op; a move of the moved role counts on.
	require.Equal(t, errorpb.Code_OK, code(t, e.do(t, "j", endMove("primary~1"))))
	r = e.do(t, "j", beginMove("primary~1", ""))
	require.Equal(t, errorpb.Code_OK, r.GetCode(), r.GetMessage())
	require.Equal(t, "primary~2", r.GetJob().GetMigrations()[0].GetTargetRole())
}

// Begin refuses what cannot move, naming the field.
func TestJob_MigrationBeginRefusals(t *testing.T) {
	e := newEnv(t)
	runningJob(t, e, "j")
	for _, tc := range []struct {
		name, role, node, want string
	}{
		{"no such role", "backup", "", "role:"},
		{"already on the node", "primary", "n1", "target_node_id:"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := e.do(t, "j", beginMove(tc.role, tc.node))
			require.Equal(t, errorpb.Code_FAILED_PRECONDITION, r.GetCode())
			require.Contains(t, r.GetMessage(), tc.want)
		})
	}
	// A provisioning (not running) instance is not moved.
	require.Equal(t, errorpb.Code_OK, e.do(t, "k", create(runnable(&managerpb.Job{JobId: &commonpb.JobId{JobId: "k"}}))).GetCode())
	require.Equal(t, errorpb.Code_OK, e.do(t, "k", start("primary", "n1")).GetCode())
	r := e.do(t, "k", beginMove("primary", ""))
	require.Equal(t, errorpb.Code_FAILED_PRECONDITION, r.GetCode())
	require.Contains(t, r.GetMessage(), "not running")
	require.Empty(t, e.record(t, "j").GetMigrations(), "a refusal changes nothing")
}

// An abort backs the move out: the target is stopped, the source keeps
// running; a second abort answers OK and changes nothing; the end removes
// the move once the target is gone.
func TestJob_MigrationAbortIsIdempotent(t *testing.T) {
	e := newEnv(t)
	runningJob(t, e, "j")
	require.Equal(t, errorpb.Code_OK, code(t, e.do(t, "j", beginMove("primary", ""))))
	require.Equal(t, errorpb.Code_OK, code(t, e.do(t, "j", start("primary~1", "n2"))))

	require.Equal(t, errorpb.Code_OK, code(t, e.do(t, "j", abortMove("primary", "primary~1"))))
	e.nodes.waitStop(t, "n2/j/primary~1")
	rec := e.record(t, "j")
	require.Equal(t, managerpb.Migration_MIGRATION_BACKING_OUT, rec.GetMigrations()[0].GetPhase())
	require.Equal(t, "operator says no", rec.GetMigrations()[0].GetBackOutReason())
	seq := len(rec.GetJob().GetHistoryEntry())

	require.Equal(t, errorpb.Code_OK, code(t, e.do(t, "j", abortMove("primary", "primary~1"))), "a second abort is OK")
	require.Len(t, e.record(t, "j").GetJob().GetHistoryEntry(), seq, "and changes nothing")
	// A start of the target now is refused (a late retry of the engine's).
	require.Equal(t, errorpb.Code_FAILED_PRECONDITION, code(t, e.do(t, "j", endMove("primary~1"))), "target still stopping")

	require.Equal(t, errorpb.Code_OK, code(t, e.do(t, "j", report(internalpb.InstanceReport_STOPPED, "primary~1", "n2"))))
	require.Equal(t, errorpb.Code_OK, code(t, e.do(t, "j", endMove("primary~1"))))
	rec = e.record(t, "j")
	require.Empty(t, rec.GetMigrations())
	require.Len(t, rec.GetInstances(), 1)
	require.Equal(t, "primary", rec.GetInstances()[0].GetRole(), "the source keeps running")
	require.Equal(t, internalpb.InstanceStatus_INSTANCE_RUNNING, rec.GetInstances()[0].GetStatus())
	require.Equal(t, errorpb.Code_OK, code(t, e.do(t, "j", abortMove("primary", "primary~1"))), "an abort of an ended move is OK")

	// An abort before anything started ends the move at once, and a late
	// report of the target running is stopped, not adopted.
	require.Equal(t, errorpb.Code_OK, code(t, e.do(t, "j", beginMove("primary", ""))))
	require.Equal(t, errorpb.Code_OK, code(t, e.do(t, "j", abortMove("primary", "primary~2"))))
	require.Empty(t, e.record(t, "j").GetMigrations())
	require.Equal(t, errorpb.Code_FAILED_PRECONDITION, code(t, e.do(t, "j", start("primary~2", "n2"))))
	require.Equal(t, errorpb.Code_OK, code(t, e.do(t, "j", report(internalpb.InstanceReport_STARTED, "primary~2", "n2"))))
	e.nodes.waitStop(t, "n2/j/primary~2")
	require.Len(t, e.record(t, "j").GetInstances(), 1)
}

// Completing a job ends its moves.
func TestJob_CompleteEndsMigrations(t *testing.T) {
	e := newEnv(t)
	runningJob(t, e, "j")
	require.Equal(t, errorpb.Code_OK, code(t, e.do(t, "j", beginMove("primary", ""))))
	require.Equal(t, errorpb.Code_OK, code(t, e.do(t, "j", &internalpb.JobCommand{Cmd: &internalpb.JobCommand_Complete{Complete: &internalpb.CompleteJob{}}})))
	require.Empty(t, e.record(t, "j").GetMigrations())
}

// An abort that lands while the target's provision is at its node backs
// the move out; when the node answers, the target is stopped there and
// not recorded, and the move ends once nothing of it is pending. A late
// job_started of it is stopped too.
func TestJob_MigrationAbortWhileTargetProvisioning(t *testing.T) {
	e := newEnv(t)
	runningJob(t, e, "j")
	require.Equal(t, errorpb.Code_OK, code(t, e.do(t, "j", beginMove("primary", ""))))
	gate := make(chan struct{})
	e.nodes.gate.Store(&gate)
	t.Cleanup(func() { e.nodes.gate.Store(nil) })
	started := make(chan *internalpb.Reply, 1)
	go func() { started <- e.do(t, "j", start("primary~1", "n2")) }()
	require.Eventually(t, func() bool { return e.nodes.held.Load() == 1 }, 5*time.Second, time.Millisecond)

	require.Equal(t, errorpb.Code_OK, code(t, e.do(t, "j", abortMove("primary", "primary~1"))))
	require.Equal(t, managerpb.Migration_MIGRATION_BACKING_OUT, e.record(t, "j").GetMigrations()[0].GetPhase())
	require.Equal(t, errorpb.Code_FAILED_PRECONDITION, code(t, e.do(t, "j", endMove("primary~1"))), "its start is pending")
	e.nodes.gate.Store(nil)
	close(gate)
	r := <-started
	require.Equal(t, errorpb.Code_FAILED_PRECONDITION, r.GetCode(), r.GetMessage())
	e.nodes.waitStop(t, "n2/j/primary~1")
	rec := e.record(t, "j")
	require.Len(t, rec.GetInstances(), 1, "the target is not recorded")
	require.Equal(t, errorpb.Code_OK, code(t, e.do(t, "j", endMove("primary~1"))))
	require.Empty(t, e.record(t, "j").GetMigrations())
	require.Equal(t, "primary", e.record(t, "j").GetInstances()[0].GetRole())
}

// An abort that names a move in progress by its target role with another
// source role is a wrong pair: InvalidArgument naming source_role (and the
// move's real source), the move unchanged — not OK as for a move that
// ended, which would tell the operator the move was stopped while it goes
// on.
func TestJob_MigrationAbortWrongPair(t *testing.T) {
	e := newEnv(t)
	runningJob(t, e, "j")
	require.Equal(t, errorpb.Code_OK, code(t, e.do(t, "j", beginMove("primary", ""))))
	before := e.record(t, "j")
	r := e.do(t, "j", abortMove("primary~7", "primary~1"))
	require.Equal(t, errorpb.Code_INVALID_ARGUMENT, r.GetCode(), r.GetMessage())
	require.Contains(t, r.GetMessage(), "source_role:")
	require.Contains(t, r.GetMessage(), `"primary"`)
	after := e.record(t, "j")
	require.Equal(t, managerpb.Migration_MIGRATION_STARTING, after.GetMigrations()[0].GetPhase())
	require.Len(t, after.GetJob().GetHistoryEntry(), len(before.GetJob().GetHistoryEntry()))
}

// After a move the role runs as primary~1. A StartJob of the logical role
// ("primary", an operator's habit or script) is ALREADY_EXISTS naming the
// instance that runs it, not a second instance of the job; and a worker
// reporting the logical role running while the moved role runs elsewhere
// is stopped, not adopted as a second running instance.
func TestJob_MovedRoleIsTheLogicalRole(t *testing.T) {
	e := newEnv(t)
	runningJob(t, e, "j")
	require.Equal(t, errorpb.Code_OK, code(t, e.do(t, "j", beginMove("primary", "n2"))))
	require.Equal(t, errorpb.Code_OK, code(t, e.do(t, "j", start("primary~1", "n2"))))
	require.Equal(t, errorpb.Code_OK, code(t, e.do(t, "j", report(internalpb.InstanceReport_STARTED, "primary~1", "n2"))))
	require.Equal(t, errorpb.Code_OK, code(t, e.do(t, "j", handOver("primary~1"))))
	require.Equal(t, errorpb.Code_OK, code(t, e.do(t, "j", report(internalpb.InstanceReport_STOPPED, "primary", "n1"))))
	require.Equal(t, errorpb.Code_OK, code(t, e.do(t, "j", endMove("primary~1"))))

	r := e.do(t, "j", start("primary", "n1"))
	require.Equal(t, errorpb.Code_ALREADY_EXISTS, r.GetCode(), r.GetMessage())
	require.Contains(t, r.GetMessage(), "primary~1")
	require.Contains(t, r.GetMessage(), `"n2"`)

	// A move of the logical role moves the instance that runs it.
	r = e.do(t, "j", beginMove("primary", "n1"))
	require.Equal(t, errorpb.Code_OK, r.GetCode(), r.GetMessage())
	require.Equal(t, "primary~1", r.GetJob().GetMigrations()[0].GetSourceRole())
	require.Equal(t, "primary~2", r.GetJob().GetMigrations()[0].GetTargetRole())
	require.Equal(t, errorpb.Code_INVALID_ARGUMENT, code(t, e.do(t, "j", abortMove("primary~5", "primary~2"))))
	require.Equal(t, errorpb.Code_OK, code(t, e.do(t, "j", abortMove("primary", "primary~2"))), "the logical source names it too")
	require.Empty(t, e.record(t, "j").GetMigrations(), "aborted: nothing had started")

	// A StopJob of the logical role says which role to stop.
	r = e.do(t, "j", &internalpb.JobCommand{Cmd: &internalpb.JobCommand_Stop{Stop: &internalpb.StopJob{Role: "primary", NodeId: "n2"}}})
	require.Equal(t, errorpb.Code_FAILED_PRECONDITION, r.GetCode())
	require.Contains(t, r.GetMessage(), `runs as role "primary~1" on node "n2"`)

	require.Equal(t, errorpb.Code_OK, code(t, e.do(t, "j", report(internalpb.InstanceReport_STARTED, "primary", "n1"))))
	e.nodes.waitStop(t, "n1/j/primary")
	rec := e.record(t, "j")
	require.Len(t, rec.GetInstances(), 1, "one instance of the logical role")
	require.Equal(t, "primary~1", rec.GetInstances()[0].GetRole())
}

// A StopJob naming an instance id stops only that instance: a stop decided
// on an older read (a move's repeated stop, sent late by a leader that was
// frozen) finds another instance of the role on the node and changes
// nothing.
func TestJob_StopOfAnotherInstanceIsStale(t *testing.T) {
	e := newEnv(t)
	runningJob(t, e, "j")
	in := e.record(t, "j").GetInstances()[0]
	require.NotEmpty(t, in.GetInstanceId())
	stop := func(id string) *internalpb.Reply {
		return e.do(t, "j", &internalpb.JobCommand{Cmd: &internalpb.JobCommand_Stop{Stop: &internalpb.StopJob{Role: "primary", NodeId: "n1", InstanceId: id}}})
	}
	r := stop("j-primary-earlier")
	require.Equal(t, errorpb.Code_FAILED_PRECONDITION, r.GetCode())
	require.Contains(t, r.GetMessage(), "stale stop")
	require.Equal(t, internalpb.InstanceStatus_INSTANCE_RUNNING, e.record(t, "j").GetInstances()[0].GetStatus(), "nothing changed")
	require.Equal(t, errorpb.Code_OK, stop(in.GetInstanceId()).GetCode())
	require.Equal(t, internalpb.InstanceStatus_INSTANCE_STOPPING, e.record(t, "j").GetInstances()[0].GetStatus())
}
