package placement

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/norsk-oss/norsk-manager/proto/commonpb"
	"github.com/norsk-oss/norsk-manager/proto/internalpb"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
)

// moveTo moves job id's role to node ("": any) (the fixture's fake grain
// and the engine's driver, every phase) and returns the role it runs
// under after.
func (f *fixture) moveTo(id, role, node string) string {
	f.t.Helper()
	f.begin(id, role, node)
	f.pass()
	target := f.moveOf(id).GetTargetRole()
	f.run(id, target)
	f.pass()
	f.confirmStops()
	f.pass()
	require.Nil(f.t, f.moveOf(id), "the move ended")
	if node != "" {
		require.Equal(f.t, node, f.nodeOf(id, target))
	}
	return target
}

// A LOW job that was moved once runs as "primary~1"; preempted, its
// bronze-drop wait counts from its preemption (the stop of primary~1 is a
// stop of the logical role primary), not from its creation long before,
// and the verdict names the HIGH job that preempted it.
func TestEngine_BronzeDrop_MovedRole(t *testing.T) {
	f := newFixture(t)
	t0 := f.now
	f.router.provisioning = true
	f.putPriorityPool("live", &managerpb.Pool{LowPriorityMaxWaitSeconds: 60})
	f.putNode("n1", 10, "", nil)
	f.bandJob("l", 10, low, "live")
	f.pass()
	f.run("l", "primary")
	require.Equal(t, "n1", f.nodeOf("l", "primary"))
	f.putNode("n2", 10, "", nil)
	moved := f.moveTo("l", "primary", "n2")
	require.Equal(t, "primary~1", moved)
	f.stopNode("n1")

	f.now = t0.Add(10 * time.Minute)
	f.bandJob("h", 10, high, "live")
	f.pass() // h preempts l's primary~1 on n2
	require.Equal(t, 1, f.router.preemptCount())
	f.now = t0.Add(10*time.Minute + 5*time.Second)
	f.endStopping()
	f.pass()
	require.Equal(t, "n2", f.nodeOf("h", "primary"))
	require.Nil(t, f.job("l").GetJob().GetJob().GetTerminalState(), "unplaced for 0s, not since its creation 10m ago")

	f.eng = newEngineOn(t, f)
	f.now = t0.Add(10*time.Minute + 66*time.Second)
	f.pass()
	ts := f.job("l").GetJob().GetJob().GetTerminalState()
	require.NotNil(t, ts)
	require.Contains(t, ts.GetFailureReason(), "had no instance for 1m1s")
	require.Contains(t, ts.GetFailureReason(), "preempted by job h role primary on node n2")
}

// The record helpers that answer by role compare logical roles: a moved
// role's preemption and stop are its logical role's.
func TestPreemptionOf_LogicalRole(t *testing.T) {
	at := func(s int64) *timestamppb.Timestamp { return timestamppb.New(time.Unix(1000+s, 0)) }
	rec := &internalpb.JobRecord{
		Job: &managerpb.JobWithHistory{Job: &managerpb.Job{}, HistoryEntry: []*managerpb.JobHistoryEntry{
			{HistoryEntry: &managerpb.JobHistoryEntry_JobStopping{JobStopping: &managerpb.JobHistoryJobStopping{Timestamp: at(1), Role: "primary",
				Reason: managerpb.JobHistoryJobStopping_JOB_STOPPED_MIGRATED}}},
			{HistoryEntry: &managerpb.JobHistoryEntry_JobStopping{JobStopping: &managerpb.JobHistoryJobStopping{Timestamp: at(9), Role: "primary~1",
				Reason: managerpb.JobHistoryJobStopping_JOB_STOPPED_PREEMPTED}}},
		}},
		Preemptions: []*internalpb.PreemptionRecord{
			{Role: "primary", ForJobId: "old", At: at(0)},
			{Role: "primary~1", ForJobId: "h", At: at(9)},
		},
	}
	require.Equal(t, managerpb.JobHistoryJobStopping_JOB_STOPPED_PREEMPTED, lastStopReason(rec, "primary"))
	require.Equal(t, "h", preemptionOf(rec, "primary").GetForJobId(), "the newest preemption of the logical role")
	require.Equal(t, "h", preemptionOf(rec, "primary~1").GetForJobId())
	since, ok := unplacedSince(rec, "primary")
	require.True(t, ok)
	require.Equal(t, at(9).AsTime(), since)
}

// A move's repeated stop of its source names the source's instance id, so
// that one sent late (by a leader frozen between its read and its send)
// cannot stop another instance of that role on that node.
func TestEngine_Move_ResentStopNamesTheInstance(t *testing.T) {
	f := newFixture(t)
	f.putNode("a", 4, "z1", nil)
	f.putJob(autoJob("j", 1, nil))
	f.pass()
	f.putNode("b", 4, "z1", nil)
	f.router.provisioning = true
	f.run("j", "primary")
	f.begin("j", "primary", "b")
	f.pass()
	f.run("j", "primary~1")
	f.pass() // the hand-over: the source STOPPING, its stop not confirmed
	require.Equal(t, managerpb.Migration_MIGRATION_HANDING_OVER, f.moveOf("j").GetPhase())
	rec := f.job("j")
	instanceOf(rec, "primary").InstanceId = "j-primary-1"
	f.putJob(rec)
	f.pass() // first sight in this term
	f.now = f.now.Add(moveResend + time.Second)
	f.pass()
	var stops []*internalpb.StopJob
	f.router.mu.Lock()
	for _, c := range f.router.cmds {
		if s := c.GetStop(); s != nil && s.GetRole() == "primary" {
			stops = append(stops, s)
		}
	}
	f.router.mu.Unlock()
	require.NotEmpty(t, stops, "the source's stop sent again")
	require.Equal(t, "j-primary-1", stops[len(stops)-1].GetInstanceId())
}

// The engine's stop of a dormant bundle job (and of a drain's co-located
// group) names the instance it read, as a move's repeated stop does.
func TestEngine_Dormant_StopNamesTheInstance(t *testing.T) {
	f := newFixture(t)
	f.putNode("n1", 4, "z1", nil)
	svc := &managerpb.Job{Services: []*commonpb.Service{{Name: "s"}}}
	b := &managerpb.Bundle{BundleId: &managerpb.BundleId{BundleId: "bd"},
		Jobs: []*managerpb.BundleJobSpec{{JobName: "web", Requirements: &managerpb.JobRequirements{RequiredCapacity: 1}, Job: svc}}}
	f.putBundle(b, nil)
	f.pass()
	rec := f.job("bd.0.web")
	instanceOf(rec, "primary").InstanceId = "bd.0.web-primary-1"
	f.putJob(rec)
	setDormant(f, "bd", "web", true)
	f.pass()
	require.Equal(t, 1, f.router.stopCount("bd.0.web", "primary"))
	f.router.mu.Lock()
	defer f.router.mu.Unlock()
	for _, c := range f.router.cmds {
		if s := c.GetStop(); s != nil {
			require.Equal(t, "bd.0.web-primary-1", s.GetInstanceId())
		}
	}
}

// A node drained while a move's target starts on it: the move is backed
// out before the hand-over (the source keeps running), instead of handing
// over onto the draining node and moving the job off it again at once.
func TestEngine_Move_TargetNodeDrainedBacksOut(t *testing.T) {
	f := newFixture(t)
	f.putNode("a", 4, "z1", nil)
	f.putJob(autoJob("j", 1, nil))
	f.pass()
	f.run("j", "primary")
	f.putNode("b", 4, "z1", nil)
	f.router.provisioning = true
	f.begin("j", "primary", "b")
	f.pass()
	require.Equal(t, "b", f.nodeOf("j", "primary~1"))
	f.setScheduling("b", managerpb.NodeScheduling_NODE_SCHEDULING_DRAINING)
	f.run("j", "primary~1")
	from := f.head()
	f.pass()
	require.Equal(t, 0, f.router.stopCount("j", "primary"), "no hand-over onto a draining node")
	require.Equal(t, managerpb.Migration_MIGRATION_BACKING_OUT, f.moveOf("j").GetPhase())
	f.confirmStops()
	f.pass()
	require.Nil(t, f.moveOf("j"))
	ab := events[*managerpb.EventStreamEvent_MigrationAborted](f, from)
	require.NotEmpty(t, ab)
	require.Contains(t, ab[0].MigrationAborted.GetReason(), "node b is draining")
	require.Equal(t, "a", f.nodeOf("j", "primary"), "the source kept running")
}

// A LOW job mid-move whose source is chosen as a preemption victim: the
// HIGH job gets the source's node, the move goes on (the hand-over finds
// its source already stopping) and ends with the LOW job running on the
// target, one instance, no move left behind.
func TestEngine_Preempt_SourceOfAMove(t *testing.T) {
	f := newFixture(t)
	f.router.provisioning = true
	f.putNode("n1", 4, "", nil)
	f.bandJob("l", 4, low, "")
	f.pass()
	f.run("l", "primary")
	f.putNode("n2", 4, "", nil)
	f.begin("l", "primary", "n2")
	f.pass()
	require.Equal(t, "n2", f.nodeOf("l", "primary~1"), "the target provisioning")
	f.bandJob("h", 4, high, "")
	f.pass()
	require.Equal(t, 1, f.router.preemptCount())
	require.Equal(t, internalpb.InstanceStatus_INSTANCE_STOPPING, instanceOf(f.job("l"), "primary").GetStatus())
	f.endStopping()
	f.pass()
	require.Equal(t, "n1", f.nodeOf("h", "primary"))
	f.run("l", "primary~1")
	f.pass()
	f.pass()
	require.Nil(t, f.moveOf("l"), "the move ended")
	require.Len(t, f.job("l").GetInstances(), 1)
	require.Equal(t, "n2", f.nodeOf("l", "primary~1"))
	require.Nil(t, f.job("l").GetJob().GetJob().GetTerminalState())
}
