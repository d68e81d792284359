package placement

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/norsk-oss/norsk-manager/actors"
	"github.com/norsk-oss/norsk-manager/actors/bundle"
	"github.com/norsk-oss/norsk-manager/persistence"
	"github.com/norsk-oss/norsk-manager/proto/commonpb"
	"github.com/norsk-oss/norsk-manager/proto/errorpb"
	"github.com/norsk-oss/norsk-manager/proto/internalpb"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
)

func TestEngine_Pass_Placeable(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	cases := []struct {
		name   string
		edit   func(*internalpb.JobRecord)
		placed bool
	}{
		{"active auto-placed", func(*internalpb.JobRecord) {}, true},
		{"pre whose start passed", func(r *internalpb.JobRecord) {
			r.Job.Job.State, r.Job.Job.StartDateTime = managerpb.Job_PRE, timestamppb.New(now.Add(-time.Second))
		}, true},
		{"pre in the future", func(r *internalpb.JobRecord) {
			r.Job.Job.State, r.Job.Job.StartDateTime = managerpb.Job_PRE, timestamppb.New(now.Add(time.Hour))
		}, false},
		{"completed", func(r *internalpb.JobRecord) { r.Job.Job.State = managerpb.Job_POST }, false},
		{"manual (no auto_placement)", func(r *internalpb.JobRecord) { r.Job.Job.AutoPlacement = nil }, false},
		{"dormant", func(r *internalpb.JobRecord) { r.Job.Job.Tags = map[string]string{bundle.TagDormant: "true"} }, false},
		{"terminal", func(r *internalpb.JobRecord) {
			r.Job.Job.TerminalState = &managerpb.TerminalState{FailureReason: "restart ceiling exceeded"}
		}, false},
		{"bundle tag without a bundle record", func(r *internalpb.JobRecord) {
			r.Job.Job.Tags = map[string]string{bundle.TagBundleID: "nobundle", bundle.TagReplicaIndex: "0"}
		}, false},
		{"pool that does not exist", func(r *internalpb.JobRecord) {
			r.Job.Job.Tags = map[string]string{persistence.PoolTag: "nopool"}
		}, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			f.now = now
			f.putNode("n1", 4, "z1", nil)
			rec := autoJob("j", 1, nil)
			tc.edit(rec)
			f.putJob(rec)
			f.pass()
			if !tc.placed {
				// Nothing started; an unknown pool is a placement failure,
				// recorded (once) on the job.
				failures, _ := f.router.writes("j/primary")
				require.Equal(t, failures, f.router.sent(), "nothing but a failure record sent")
				require.Zero(t, f.router.startCount("j", "primary"))
				require.Empty(t, f.nodeOf("j", "primary"))
				return
			}
			require.Equal(t, "n1", f.nodeOf("j", "primary"))
			require.Equal(t, 1, f.router.startCount("j", "primary"))
			// Placed: the next pass leaves it alone.
			f.pass()
			require.Equal(t, 1, f.router.sent())
		})
	}
}

func TestEngine_Pass_NoOvercommitInOnePass(t *testing.T) {
	f := newFixture(t)
	f.putNode("n1", 2, "z1", nil)
	f.putNode("n2", 1, "z2", nil)
	for _, id := range []string{"a", "b", "c", "d"} {
		f.putJob(autoJob(id, 1, nil))
	}
	f.pass()
	count := map[string]int{}
	for _, id := range []string{"a", "b", "c", "d"} {
		count[f.nodeOf(id, "primary")]++
	}
	require.Equal(t, map[string]int{"n1": 2, "n2": 1, "": 1}, count, "3 units of room, 4 jobs of 1 unit")
	u, ok := f.eng.LastFailure("d", "primary")
	require.True(t, ok, "the unplaced job's failure is kept")
	require.Contains(t, u.Reason, "capacity")
	require.NotNil(t, u.Metrics)
	require.Equal(t, 2, u.Metrics.NodesEvaluated)
	require.Equal(t, 0, u.Metrics.NodesFeasible)
	// A node appears: the last job is placed and its failure forgotten.
	f.putNode("n3", 1, "z1", nil)
	f.pass()
	require.Equal(t, "n3", f.nodeOf("d", "primary"))
	_, ok = f.eng.LastFailure("d", "primary")
	require.False(t, ok)
}

func TestEngine_Pass_BundleRoles(t *testing.T) {
	f := newFixture(t)
	f.putNode("a1", 4, "z1", nil)
	f.putNode("a2", 4, "z1", nil)
	f.putNode("b1", 1, "z2", nil)
	f.putPool("cheap", 5, 600, &managerpb.PoolTier{Name: "all"})
	svc := &managerpb.Job{Services: []*commonpb.Service{{Name: "s"}}}
	b := &managerpb.Bundle{BundleId: &managerpb.BundleId{BundleId: "bd"}, Pool: "cheap",
		Jobs: []*managerpb.BundleJobSpec{
			{JobName: "web", Requirements: &managerpb.JobRequirements{RequiredCapacity: 1}, Job: svc},
			{JobName: "manual", Requirements: &managerpb.JobRequirements{RequiredCapacity: 1}, Job: svc, StartMode: bundle.StartModeManual},
		},
		ResiliencePolicy: &managerpb.ResiliencePolicy{SameNode: managerpb.AntiAffinity_ANTI_AFFINITY_FORBID, SameAz: managerpb.AntiAffinity_ANTI_AFFINITY_FORBID}}
	f.putBundle(b, map[string]bool{"manual": true})
	f.pass()
	primary, backup := f.nodeOf("bd.0.web", "primary"), f.nodeOf("bd.1.web", "backup")
	require.NotEmpty(t, primary)
	require.NotEmpty(t, backup)
	require.Empty(t, f.nodeOf("bd.0.web", "backup"), "replica 0 runs only as primary")
	zone := map[string]string{"a1": "z1", "a2": "z1", "b1": "z2"}
	require.NotEqual(t, zone[primary], zone[backup], "the policy forbids the same zone: primary %s, backup %s", primary, backup)
	require.Empty(t, f.nodeOf("bd.0.manual", "primary"), "a dormant job is not placed")
	require.Empty(t, f.nodeOf("bd.1.manual", "backup"))
}

func TestEngine_Pass_RestartBackoffAndCeiling(t *testing.T) {
	f := newFixture(t)
	f.putNode("n1", 4, "z1", nil)
	f.putNode("n2", 4, "z1", nil)
	f.putPool("small", 3, 60)
	f.putJob(autoJob("j", 1, map[string]string{persistence.PoolTag: "small"}))
	f.pass()
	first := f.nodeOf("j", "primary")
	require.NotEmpty(t, first)

	// First failure: restarted after 1 s, on the same node first.
	f.fail("j", "primary", "exit status 1")
	f.pass()
	require.Empty(t, f.nodeOf("j", "primary"), "within the backoff nothing restarts")
	f.now = f.now.Add(time.Second)
	f.pass()
	require.Equal(t, first, f.nodeOf("j", "primary"), "the first restart goes to the same node")

	// Second failure: 2 s backoff, then elsewhere.
	f.now = f.now.Add(time.Second)
	f.fail("j", "primary", "exit status 1")
	f.now = f.now.Add(1500 * time.Millisecond)
	f.pass()
	require.Empty(t, f.nodeOf("j", "primary"))
	f.now = f.now.Add(time.Second)
	f.pass()
	second := f.nodeOf("j", "primary")
	require.NotEmpty(t, second)
	require.NotEqual(t, first, second, "after the second failure the restart avoids the failed node")

	// Third failure within 60 s: the ceiling; terminal_state through UpdateJob.
	f.fail("j", "primary", "exit status 1: port taken")
	f.pass()
	j := f.job("j").GetJob().GetJob()
	require.NotNil(t, j.GetTerminalState())
	require.Equal(t, "restart ceiling exceeded: 3 failures in 1m0s, last: exit status 1: port taken", j.GetTerminalState().GetFailureReason())
	require.Equal(t, 3, f.router.startCount("j", "primary"))
	// Never placed again.
	f.now = f.now.Add(time.Hour)
	f.pass()
	require.Empty(t, f.nodeOf("j", "primary"))
	require.Equal(t, 3, f.router.startCount("j", "primary"))
}

// TestEngine_Pass_FailuresSurviveLeaderChange: a new engine (a new
// leader) counts the failures the old one saw, from the record.
func TestEngine_Pass_FailuresSurviveLeaderChange(t *testing.T) {
	f := newFixture(t)
	f.putNode("n1", 4, "z1", nil)
	f.putPool("small", 2, 60)
	f.putJob(autoJob("j", 1, map[string]string{persistence.PoolTag: "small"}))
	f.pass()
	f.fail("j", "primary", "boom")
	f.now = f.now.Add(time.Second)
	f.pass()
	require.Equal(t, "n1", f.nodeOf("j", "primary"))
	f.fail("j", "primary", "boom again")

	cfg := DefaultConfig()
	cfg.Store, cfg.Router, cfg.Clock = f.store, f.router, func() time.Time { return f.now }
	next, err := New(cfg)
	require.NoError(t, err)
	f.eng = next
	f.pass()
	require.Contains(t, f.job("j").GetJob().GetJob().GetTerminalState().GetFailureReason(), "2 failures in 1m0s, last: boom again")
}

func TestEngine_Pass_NodeLostReplacedElsewhere(t *testing.T) {
	f := newFixture(t)
	f.putNode("n1", 1, "z1", nil)
	f.putJob(autoJob("j", 1, nil))
	f.pass()
	require.Equal(t, "n1", f.nodeOf("j", "primary"))
	f.putNode("n2", 1, "z2", nil)
	f.stopNode("n1")
	f.pass()
	require.Equal(t, "n2", f.nodeOf("j", "primary"), "re-placed at once: a node loss is not a failure")
	require.Nil(t, f.job("j").GetJob().GetJob().GetTerminalState())
}

func TestEngine_Pass_NoDoubleStartInFlight(t *testing.T) {
	f := newFixture(t)
	f.putNode("n1", 4, "z1", nil)
	f.putJob(autoJob("j", 1, nil))
	hold := make(chan struct{})
	f.router.hold = hold
	ctx := context.Background()
	require.NoError(t, f.eng.Pass(ctx))
	// The StartJob is sent in the background: wait until the router holds it.
	require.Eventually(t, func() bool { return f.router.sent() == 1 }, 10*time.Second, time.Millisecond)
	require.NoError(t, f.eng.Pass(ctx))
	require.NoError(t, f.eng.Pass(ctx))
	require.Equal(t, 1, f.eng.InFlight())
	close(hold)
	// After settle every send has reached the router: exactly one.
	f.eng.settle()
	require.Equal(t, 1, f.router.sent(), "no second StartJob while the first is in flight")
	f.eng.settle()
	f.router.hold = nil
	f.pass()
	require.Equal(t, 1, f.router.startCount("j", "primary"))
	require.Equal(t, 1, f.router.sent())
}

// TestEngine_Pass_DuplicateDecisionDeduplicated: two engines (an old and a
// new leader) decide on the same record: both send the same request id,
// and the role starts once.
func TestEngine_Pass_DuplicateDecisionDeduplicated(t *testing.T) {
	f := newFixture(t)
	f.putNode("n1", 4, "z1", nil)
	f.putJob(autoJob("j", 1, nil))
	hold := make(chan struct{})
	f.router.hold = hold
	cfg := DefaultConfig()
	cfg.Store, cfg.Router, cfg.Clock = f.store, f.router, func() time.Time { return f.now }
	other, err := New(cfg)
	require.NoError(t, err)
	ctx := context.Background()
	require.NoError(t, f.eng.Pass(ctx))
	require.NoError(t, other.Pass(ctx))
	close(hold)
	f.eng.settle()
	other.settle()
	require.Equal(t, 2, f.router.sent())
	require.Equal(t, f.router.cmds[0].GetRequestId(), f.router.cmds[1].GetRequestId())
	require.Equal(t, 1, f.router.startCount("j", "primary"))
}

func TestEngine_Pass_StartRefusedKeptAsFailure(t *testing.T) {
	f := newFixture(t)
	f.putNode("n1", 4, "z1", nil)
	f.putJob(autoJob("j", 1, nil))
	f.router.refuse = actors.Fail(errorpb.Code_FAILED_PRECONDITION, "job has no services")
	f.pass()
	u, ok := f.eng.LastFailure("j", "primary")
	require.True(t, ok)
	require.True(t, strings.Contains(u.Reason, "start on node n1") && strings.Contains(u.Reason, "no services"), u.Reason)
	// Paced: not asked again at once, but after startRetry.
	f.pass()
	require.Equal(t, 1, f.router.sent())
	f.now = f.now.Add(startRetry)
	f.router.refuse = nil
	f.pass()
	require.Equal(t, 2, f.router.sent())
	require.Equal(t, "n1", f.nodeOf("j", "primary"))
	_, ok = f.eng.LastFailure("j", "primary")
	require.False(t, ok)
}

func TestNew_RequiresStoreAndRouter(t *testing.T) {
	_, err := New(Config{})
	require.ErrorIs(t, err, ErrInvalidConfig)
	store, _ := persistence.TestStore(t)
	_, err = New(Config{Store: store})
	require.ErrorContains(t, err, "router")
}

// TestEngine_Pass_BundleStartStop: StartBundleJob (the bundle record and
// the job's tag no longer dormant) gets the job placed by the next pass;
// StopBundleJob (dormant again) keeps the engine from placing it again.
func TestEngine_Pass_BundleStartStop(t *testing.T) {
	f := newFixture(t)
	f.putNode("n1", 4, "z1", nil)
	b := &managerpb.Bundle{BundleId: &managerpb.BundleId{BundleId: "bd"}, Jobs: []*managerpb.BundleJobSpec{
		{JobName: "pkg", StartMode: bundle.StartModeManual, Job: &managerpb.Job{Services: []*commonpb.Service{{Name: "s"}}}}}}
	f.putBundle(b, map[string]bool{"pkg": true})
	f.pass()
	require.Equal(t, 0, f.router.sent())

	setDormant := func(dormant bool) {
		rec := f.job("bd.0.pkg")
		rec.Job.Job = bundle.DerivedJob(b, b.GetJobs()[0], 0, dormant)
		rec.Job.Job.State = managerpb.Job_ACTIVE
		f.putJob(rec)
		var br *internalpb.BundleRecord
		require.NoError(t, f.store.View(func(r *persistence.Reader) error {
			var err error
			br, _, err = r.Bundle("bd")
			return err
		}))
		br.Jobs[0].Dormant = dormant
		f.put(persistence.BundleKey("bd"), br)
	}
	setDormant(false)
	f.pass()
	require.Equal(t, "n1", f.nodeOf("bd.0.pkg", "primary"))

	// Stopped: dormant again, and its instance ends; nothing re-places it.
	setDormant(true)
	rec := f.job("bd.0.pkg")
	f.endInstance(rec, "primary", managerpb.JobHistoryJobStopping_JOB_STOPPED_USER_REQUESTED, "")
	f.pass()
	require.Empty(t, f.nodeOf("bd.0.pkg", "primary"))
	require.Equal(t, 1, f.router.startCount("bd.0.pkg", "primary"))
}

// TestEngine_Pass_TerminalClearedByOperator: once an operator clears the
// terminal state (an UpdateJob), the failures before it no longer count
// and the job is placed again.
func TestEngine_Pass_TerminalClearedByOperator(t *testing.T) {
	f := newFixture(t)
	f.putNode("n1", 4, "z1", nil)
	f.putPool("one", 1, 600)
	f.putJob(autoJob("j", 1, map[string]string{persistence.PoolTag: "one"}))
	f.pass()
	f.fail("j", "primary", "boom")
	f.pass()
	rec := f.job("j")
	require.NotNil(t, rec.GetJob().GetJob().GetTerminalState())

	prev := rec.GetJob().GetJob()
	cleared := autoJob("j", 1, map[string]string{persistence.PoolTag: "one"}).GetJob().GetJob()
	rec.Job.Job = cleared
	rec.Job.HistoryEntry = append(rec.Job.HistoryEntry, &managerpb.JobHistoryEntry{HistoryEntry: &managerpb.JobHistoryEntry_JobUpdated{
		JobUpdated: &managerpb.JobHistoryJobUpdated{Timestamp: timestamppb.New(f.now), PreviousJob: prev}}})
	f.putJob(rec)
	f.now = f.now.Add(time.Second)
	f.pass()
	require.Equal(t, "n1", f.nodeOf("j", "primary"))
	require.Nil(t, f.job("j").GetJob().GetJob().GetTerminalState())
}

// TestEngine_Pass_CoLocateGroupInOneDecision: a co_locate_with group goes
// to one node that has room for the whole group, though the more
// allocated node (which packing prefers) has room for one member;
// separate_from keeps the third job off the group's node.
func TestEngine_Pass_CoLocateGroupInOneDecision(t *testing.T) {
	f := newFixture(t)
	f.putNode("n1", 1.5, "z1", nil)
	f.putNode("n2", 4, "z1", nil)
	busy := autoJob("busy", 0.5, nil)
	busy.Instances = []*internalpb.Instance{{Role: "primary", NodeId: "n1", Status: internalpb.InstanceStatus_INSTANCE_RUNNING}}
	f.putJob(busy)
	svc := &managerpb.Job{Services: []*commonpb.Service{{Name: "s"}}}
	one := &managerpb.JobRequirements{RequiredCapacity: 1}
	b := &managerpb.Bundle{BundleId: &managerpb.BundleId{BundleId: "bd"}, Jobs: []*managerpb.BundleJobSpec{
		{JobName: "enc", Requirements: one, Job: svc},
		{JobName: "pkg", Requirements: one, Job: svc, CoLocateWith: []string{"enc"}},
		{JobName: "mon", Requirements: one, Job: svc, SeparateFrom: []string{"pkg"}},
	}}
	f.putBundle(b, nil)
	f.pass()
	require.Equal(t, "n2", f.nodeOf("bd.0.enc", "primary"))
	require.Equal(t, "n2", f.nodeOf("bd.0.pkg", "primary"))
	require.Equal(t, "n1", f.nodeOf("bd.0.mon", "primary"), "separate from the group, and packed onto the busier node")
	require.Equal(t, 1, f.router.startCount("bd.0.pkg", "primary"))
}

// TestEngine_Pass_CordonedAndDraining: nothing new goes to a cordoned or
// draining node (docs/design/nodes-capacity.md "Cordon and drain"); the
// explanation names it, and an uncordoned node takes work again.
func TestEngine_Pass_CordonedAndDraining(t *testing.T) {
	for _, st := range []managerpb.NodeScheduling{managerpb.NodeScheduling_NODE_SCHEDULING_CORDONED, managerpb.NodeScheduling_NODE_SCHEDULING_DRAINING} {
		t.Run(st.String(), func(t *testing.T) {
			f := newFixture(t)
			f.putNode("n1", 4, "z1", nil)
			f.setScheduling("n1", st)
			f.putJob(autoJob("a", 1, nil))
			f.pass()
			require.Equal(t, "", f.nodeOf("a", "primary"), "placed on a %s node", st)
			u, ok := f.eng.LastFailure("a", "primary")
			require.True(t, ok)
			require.Contains(t, u.Reason, "schedulable")
			f.setScheduling("n1", managerpb.NodeScheduling_NODE_SCHEDULING_ELIGIBLE)
			f.pass()
			require.Equal(t, "n1", f.nodeOf("a", "primary"))
		})
	}
}

func TestPassGap(t *testing.T) {
	cfg := Config{Interval: 500 * time.Millisecond, MinGap: 50 * time.Millisecond}
	for _, tc := range []struct {
		took, want time.Duration
	}{
		{0, 50 * time.Millisecond},
		{10 * time.Millisecond, 50 * time.Millisecond},
		{40 * time.Millisecond, 120 * time.Millisecond},
		{time.Second, 500 * time.Millisecond},
	} {
		if got := passGap(cfg, tc.took); got != tc.want {
			t.Errorf("passGap(%v) = %v, want %v", tc.took, got, tc.want)
		}
	}
}
