package placement

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/norsk-oss/norsk-manager/actors"

	"github.com/norsk-oss/norsk-manager/actors/placement/scheduler"
	"github.com/norsk-oss/norsk-manager/proto/errorpb"
	"github.com/norsk-oss/norsk-manager/proto/internalpb"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
)

// begin records an operator's move of job id's role, as the grain's
// BeginMigration does.
func (f *fixture) begin(id, role, node string) {
	f.t.Helper()
	r, err := f.router.Request(context.Background(), "job", id, &internalpb.JobCommand{RequestId: "op/" + id + "/" + role, JobId: id,
		Cmd: &internalpb.JobCommand_BeginMigration{BeginMigration: &internalpb.BeginMigration{Role: role, RequestedNodeId: node,
			Why: managerpb.Migration_MIGRATION_OPERATOR}}})
	require.NoError(f.t, err)
	require.Equal(f.t, "", r.GetMessage())
}

// The driver through every phase of an operator's move to a named node.
func TestEngine_Move_ToNamedNode(t *testing.T) {
	f := newFixture(t)
	f.putNode("a", 4, "z1", nil)
	f.putJob(autoJob("j", 1, nil))
	f.pass()
	require.Equal(t, "a", f.nodeOf("j", "primary"))
	f.putNode("b", 4, "z1", nil)
	f.putNode("c", 4, "z1", nil)
	f.router.provisioning = true

	f.begin("j", "primary", "c")
	f.pass()
	require.Equal(t, "c", f.nodeOf("j", "primary~1"), "the named node, though b fits as well")
	require.Equal(t, "c", f.moveOf("j").GetTargetNodeId())
	f.pass()
	require.Equal(t, managerpb.Migration_MIGRATION_STARTING, f.moveOf("j").GetPhase(), "waits for the target to run")
	require.Equal(t, 0, f.router.stopCount("j", "primary"))
	f.run("j", "primary~1")
	f.pass()
	require.Equal(t, 1, f.router.stopCount("j", "primary"))
	f.confirmStops()
	from := f.head()
	f.pass()
	require.Nil(t, f.moveOf("j"))
	require.Len(t, events[*managerpb.EventStreamEvent_MigrationCompleted](f, from), 1)
	require.Equal(t, "c", f.nodeOf("j", "primary~1"))
	require.Equal(t, 1, f.router.startCount("j", "primary"), "the logical role is never placed again meanwhile")
}

// A move the chain refuses (the named node lacks room) is backed out with
// the chain's explanation; the source keeps running.
func TestEngine_Move_RefusedByTheChain(t *testing.T) {
	f := newFixture(t)
	f.putNode("a", 4, "z1", nil)
	f.putJob(autoJob("j", 2, nil))
	f.pass()
	f.putNode("small", 1, "z1", nil)
	f.begin("j", "primary", "small")
	from := f.head()
	f.pass()
	f.pass()
	ab := events[*managerpb.EventStreamEvent_MigrationAborted](f, from)
	require.NotEmpty(t, ab)
	require.Contains(t, ab[0].MigrationAborted.GetReason(), "capacity")
	require.Nil(t, f.moveOf("j"))
	require.Equal(t, "a", f.nodeOf("j", "primary"), "the source keeps running")
	require.Empty(t, f.nodeOf("j", "primary~1"))
}

// "any" excludes the source node; a target that fails before it runs backs
// the move out, and the target role's failure does not count for the
// logical role ("primary") in the restart history: the source never
// stopped.
func TestEngine_Move_TargetFailsBacksOut(t *testing.T) {
	f := newFixture(t)
	f.putNode("a", 4, "z1", nil)
	f.putJob(autoJob("j", 1, nil))
	f.pass()
	f.putNode("b", 4, "z1", nil)
	f.router.provisioning = true
	f.begin("j", "primary", "")
	f.pass()
	require.Equal(t, "b", f.nodeOf("j", "primary~1"), "any node but the source's")
	f.fail("j", "primary~1", "exit 1")
	from := f.head()
	f.pass()
	ab := events[*managerpb.EventStreamEvent_MigrationAborted](f, from)
	require.Len(t, ab, 1)
	require.Contains(t, ab[0].MigrationAborted.GetReason(), "exit 1")
	require.True(t, ab[0].MigrationAborted.GetDone())
	require.Nil(t, f.moveOf("j"))
	require.Equal(t, "a", f.nodeOf("j", "primary"))
	h := failuresOf(f.job("j"), "primary")
	require.Empty(t, h.times, "a target that never took over: its failure is not the role's")
}

// A target that never runs is backed out after moveStartTimeout; a target
// node lost during the back-out ends it.
func TestEngine_Move_TimesOut(t *testing.T) {
	f := newFixture(t)
	f.putNode("a", 4, "z1", nil)
	f.putJob(autoJob("j", 1, nil))
	f.pass()
	f.putNode("b", 4, "z1", nil)
	f.router.provisioning = true
	f.begin("j", "primary", "")
	f.pass()
	require.Equal(t, "b", f.nodeOf("j", "primary~1"))
	f.now = f.now.Add(moveStartTimeout + time.Second)
	f.pass()
	require.Equal(t, managerpb.Migration_MIGRATION_BACKING_OUT, f.moveOf("j").GetPhase())
	require.Contains(t, f.moveOf("j").GetBackOutReason(), "not running")
	require.Equal(t, 1, f.router.stopCount("j", "primary~1"))
	f.stopNode("b")
	f.pass()
	require.Nil(t, f.moveOf("j"))
	require.Equal(t, "a", f.nodeOf("j", "primary"))
}

// After a move, the job's moved role is its logical role for the engine:
// not placed again, a bundle peer found by it.
func TestEngine_Move_LogicalRoleIsPlaced(t *testing.T) {
	f := newFixture(t)
	f.putNode("a", 4, "z1", nil)
	rec := autoJob("j", 1, nil)
	f.putJob(rec)
	f.manualStart("j", "primary~3", "a")
	f.pass()
	f.pass()
	require.Equal(t, 0, f.router.startCount("j", "primary"), "primary~3 is primary")
	require.Equal(t, "a", f.eng.mustWhere(t, "j", "primary"))
}

// mustWhere reads where a pass finds job id's role.
func (e *Engine) mustWhere(t *testing.T, id, role string) string {
	t.Helper()
	w, err := readWorld(e.cfg.Store, e.cfg.Clock())
	require.NoError(t, err)
	return w.where[key{scheduler.JobID(id), scheduler.Role(role)}]
}

// A drain move whose target fails is backed out and not begun again
// before drainMovePause: a target that fails at once does not churn.
func TestEngine_Move_DrainPausesAfterAFailedMove(t *testing.T) {
	f := newFixture(t)
	f.putNode("d", 4, "z1", nil)
	f.putJob(autoJob("j", 1, nil))
	f.pass()
	f.putNode("o", 4, "z1", nil)
	f.router.provisioning = true
	f.setScheduling("d", managerpb.NodeScheduling_NODE_SCHEDULING_DRAINING)
	f.pass() // begin
	f.pass() // start the target
	require.Equal(t, "o", f.nodeOf("j", "primary~1"))
	f.fail("j", "primary~1", "exit 1")
	f.pass() // backed out
	require.Nil(t, f.moveOf("j"))
	f.pass()
	f.pass()
	require.Equal(t, 1, f.router.beginCount("j", "primary"), "paused after the failure")
	f.now = f.now.Add(drainMovePause)
	f.pass()
	require.Equal(t, 2, f.router.beginCount("j", "primary"), "moved again once the pause is over")
	require.Equal(t, "primary~2", f.moveOf("j").GetTargetRole())
}

// The target's node is lost before the target runs: the move is backed out
// with a reason naming the node, the source keeps running.
func TestEngine_Move_TargetNodeLostBacksOut(t *testing.T) {
	f := newFixture(t)
	f.putNode("a", 4, "z1", nil)
	f.putJob(autoJob("j", 1, nil))
	f.pass()
	f.putNode("b", 4, "z1", nil)
	f.router.provisioning = true
	f.begin("j", "primary", "b")
	f.pass()
	require.Equal(t, "b", f.nodeOf("j", "primary~1"))
	f.stopNode("b")
	from := f.head()
	f.pass()
	ab := events[*managerpb.EventStreamEvent_MigrationAborted](f, from)
	require.Len(t, ab, 1)
	require.Contains(t, ab[0].MigrationAborted.GetReason(), "node b")
	require.Nil(t, f.moveOf("j"))
	require.Equal(t, "a", f.nodeOf("j", "primary"))
	f.pass()
	require.Equal(t, 1, f.router.startCount("j", "primary"), "the source was never off air: nothing placed again")
}

// CheckMove runs the driver's chain for MigrateJob: a named node without
// room, or "any" with no node but the source, is refused with the chain's
// explanation; a node with room, an unknown job or role answer nil.
func TestCheckMove(t *testing.T) {
	f := newFixture(t)
	f.putNode("a", 4, "z1", nil)
	f.putJob(autoJob("j", 2, nil))
	f.pass()
	check := func(role, node string) error { return CheckMove(f.store, f.now, "j", role, node) }
	err := check("primary", "")
	require.ErrorIs(t, err, ErrMoveDoesNotFit)
	require.Contains(t, err.Error(), "the move's source")
	f.putNode("small", 1, "z1", nil)
	err = check("primary", "small")
	require.ErrorIs(t, err, ErrMoveDoesNotFit)
	require.Contains(t, err.Error(), "capacity")
	f.putNode("big", 4, "z1", nil)
	require.NoError(t, check("primary", "big"))
	require.NoError(t, check("primary", ""))
	require.NoError(t, check("backup", "big"), "no such role: the grain's to answer")
	require.NoError(t, CheckMove(f.store, f.now, "nope", "primary", ""))
}

// startSends counts the StartJobs of job id's role the fake router was
// sent (answered or refused).
func (r *fakeRouter) startSends(id, role string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, c := range r.cmds {
		if s := c.GetStart(); s != nil && c.GetJobId() == id && s.GetRole() == role {
			n++
		}
	}
	return n
}

// A target StartJob the grain answers "already being started" (its own
// start still waits for the node, as during a failover) is in flight, not
// done: the driver does not send it again on every pass, only once the
// record changes or moveStartResend has passed.
func TestEngine_Move_TargetBeingStartedIsNotResent(t *testing.T) {
	f := newFixture(t)
	f.putNode("a", 4, "z1", nil)
	f.putJob(autoJob("j", 1, nil))
	f.pass()
	f.putNode("b", 4, "z1", nil)
	f.begin("j", "primary", "b")
	f.router.mu.Lock()
	f.router.refuse = actors.Fail(errorpb.Code_ALREADY_EXISTS, `job "j" role "primary~1" is already being started on node "b"`)
	f.router.mu.Unlock()
	for range 5 {
		f.pass()
	}
	require.Equal(t, 1, f.router.startSends("j", "primary~1"), "answered in flight: not sent again every pass")
	require.Equal(t, managerpb.Migration_MIGRATION_STARTING, f.moveOf("j").GetPhase(), "the move waits, it is not backed out")

	f.now = f.now.Add(moveStartResend)
	f.pass()
	f.pass()
	require.Equal(t, 2, f.router.startSends("j", "primary~1"), "asked again once moveStartResend passed")

	f.putJob(f.job("j")) // the record changed
	f.pass()
	f.pass()
	require.Equal(t, 3, f.router.startSends("j", "primary~1"), "asked again once the record changed")

	f.router.mu.Lock()
	f.router.refuse = nil
	f.router.mu.Unlock()
	f.now = f.now.Add(moveStartResend)
	f.pass()
	require.Equal(t, "b", f.nodeOf("j", "primary~1"), "started once the grain takes it")
}

// A drain whose target keeps failing (more times than the restart
// ceiling, retried after each pause) does not use up the job's restart
// budget: the source runs on, and one later crash of it is restarted, not
// given up with terminal_state.
func TestEngine_Move_FailingTargetsLeaveTheCeiling(t *testing.T) {
	f := newFixture(t)
	f.putNode("d", 4, "z1", nil)
	f.putJob(autoJob("j", 1, nil))
	f.pass()
	f.putNode("o", 4, "z1", nil)
	f.router.provisioning = true
	f.setScheduling("d", managerpb.NodeScheduling_NODE_SCHEDULING_DRAINING)
	ceiling := scheduler.DefaultRestartPolicy().Ceiling
	for n := 1; n <= ceiling+1; n++ {
		f.pass() // begin
		f.pass() // start the target
		target := fmt.Sprintf("primary~%d", n)
		require.Equal(t, "o", f.nodeOf("j", target), "move %d", n)
		f.fail("j", target, "bad image")
		f.pass() // backed out
		require.Nil(t, f.moveOf("j"))
		f.now = f.now.Add(drainMovePause)
	}
	require.Empty(t, failuresOf(f.job("j"), "primary").times)
	require.Equal(t, "d", f.nodeOf("j", "primary"), "the source runs on")

	f.setScheduling("d", managerpb.NodeScheduling_NODE_SCHEDULING_ELIGIBLE)
	f.fail("j", "primary", "crash")
	f.now = f.now.Add(time.Minute)
	f.pass()
	require.Nil(t, f.job("j").GetJob().GetJob().GetTerminalState(), "one crash of the source is not the ceiling")
	require.NotEmpty(t, f.runningRole("j", "primary"), "restarted")
	require.Len(t, failuresOf(f.job("j"), "primary").times, 1)
}

// After its move handed over, the target is the instance that runs: its
// failure counts towards the logical role's ceiling as before.
func TestEngine_Move_TargetThatTookOverCounts(t *testing.T) {
	f := newFixture(t)
	f.putNode("a", 4, "z1", nil)
	f.putJob(autoJob("j", 1, nil))
	f.pass()
	f.putNode("b", 4, "z1", nil)
	f.router.provisioning = true
	f.begin("j", "primary", "b")
	f.pass()
	f.run("j", "primary~1")
	f.pass() // hand over
	f.confirmStops()
	f.pass() // end
	require.Nil(t, f.moveOf("j"))
	require.Equal(t, "b", f.nodeOf("j", "primary~1"))
	f.fail("j", "primary~1", "crash")
	h := failuresOf(f.job("j"), "primary")
	require.Len(t, h.times, 1, "the instance that ran failed")
	require.Equal(t, "crash", h.last)
}
