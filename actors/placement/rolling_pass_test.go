package placement

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/norsk-oss/norsk-manager/actors/job"
	"github.com/norsk-oss/norsk-manager/proto/commonpb"
	"github.com/norsk-oss/norsk-manager/proto/internalpb"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
)

// redefine changes what job id's worker runs (its launch config) and its
// current hash, as an UpdateJob does; its instances keep what they run.
func (f *fixture) redefine(id string) {
	f.t.Helper()
	rec := f.job(id)
	j := rec.GetJob().GetJob()
	if j.CurrentHash == 0 {
		j.CurrentHash = 7
	}
	j.CurrentHash++
	cfg := fmt.Sprintf(`{"v":%d}`, j.CurrentHash)
	j.LaunchConfigJson = &cfg
	f.putJob(rec)
}

// setStrategy sets job id's update strategy (and a current hash, so that
// its instances record a known definition).
func (f *fixture) setStrategy(id string, s managerpb.UpdateStrategy) {
	rec := f.job(id)
	rec.Job.Job.UpdateStrategy = s
	if rec.Job.Job.CurrentHash == 0 {
		rec.Job.Job.CurrentHash = 7
	}
	f.putJob(rec)
}

// staleRoles lists the roles of job id whose instance runs a stale
// definition.
func (f *fixture) staleRoles(id string) []string {
	rec := f.job(id)
	var out []string
	for _, in := range rec.GetInstances() {
		if job.Stale(rec.GetJob().GetJob(), in) {
			out = append(out, in.GetRole())
		}
	}
	return out
}

// migrateJob is autoJob under UPDATE_STRATEGY_MIGRATE.
func migrateJob(id string, capacity float64) *internalpb.JobRecord {
	rec := autoJob(id, capacity, nil)
	rec.Job.Job.UpdateStrategy = managerpb.UpdateStrategy_UPDATE_STRATEGY_MIGRATE
	return rec
}

// A MIGRATE job updated moves once, make-before-break, to a node with room
// (its own, which has room for both), and then runs the current definition:
// nothing more to move.
func TestEngine_Rolling_PlainJob(t *testing.T) {
	f := newFixture(t)
	f.putNode("a", 4, "z1", nil)
	f.putJob(migrateJob("j", 1))
	f.pass()
	require.Equal(t, "a", f.nodeOf("j", "primary"))
	require.Empty(t, f.staleRoles("j"))
	f.pass()
	require.Equal(t, 0, f.router.beginCount("j", "primary"), "nothing stale, nothing moves")

	f.redefine("j")
	require.Equal(t, []string{"primary"}, f.staleRoles("j"))
	f.router.provisioning = true
	f.pass() // begin
	require.Equal(t, 1, f.router.beginCount("j", "primary"))
	mv := f.moveOf("j")
	require.Equal(t, managerpb.Migration_MIGRATION_UPDATE, mv.GetWhy())
	require.Contains(t, mv.GetReason(), "rolling update")
	f.pass() // the target starts
	require.Equal(t, "a", f.nodeOf("j", "primary~1"), "the source's node has room for both")
	require.Equal(t, 0, f.router.stopCount("j", "primary"), "the source runs until the target does")
	f.run("j", "primary~1")
	f.pass() // hand-over
	require.Equal(t, 1, f.router.stopCount("j", "primary"))
	f.confirmStops()
	f.pass() // ended
	require.Nil(t, f.moveOf("j"))
	require.Empty(t, f.staleRoles("j"), "the target ran the current definition")
	require.Equal(t, f.job("j").GetJob().GetJob().GetCurrentHash(), instanceOf(f.job("j"), "primary~1").GetDefinitionHash())
	f.pass()
	f.pass()
	require.Equal(t, 1, f.router.beginCount("j", "primary"), "one move")
	require.Equal(t, 0, f.router.beginCount("j", "primary~1"))
	require.Equal(t, 1, f.router.startCount("j", "primary"), "the logical role is never placed again")
}

// The source's node has no room for both: the target goes to another node.
func TestEngine_Rolling_OtherNodeWhenFull(t *testing.T) {
	f := newFixture(t)
	f.putNode("a", 1, "z1", nil)
	f.putJob(migrateJob("j", 1))
	f.pass()
	f.putNode("b", 4, "z1", nil)
	f.redefine("j")
	f.pass() // begin
	f.pass() // target (RUNNING at once)
	require.Equal(t, "b", f.nodeOf("j", "primary~1"))
	f.pass() // hand-over
	f.confirmStops()
	f.pass()
	require.Nil(t, f.moveOf("j"))
	require.Empty(t, f.staleRoles("j"))
}

// Under IN_PLACE (the default, 0) an update leaves the running instance as
// it is: stale, never moved, never stopped.
func TestEngine_Rolling_InPlaceUntouched(t *testing.T) {
	{
		s := managerpb.UpdateStrategy_UPDATE_STRATEGY_IN_PLACE
		t.Run(s.String(), func(t *testing.T) {
			f := newFixture(t)
			f.putNode("a", 4, "z1", nil)
			f.putNode("b", 4, "z1", nil)
			rec := autoJob("j", 1, nil)
			rec.Job.Job.UpdateStrategy = s
			f.putJob(rec)
			f.pass()
			node := f.nodeOf("j", "primary")
			f.redefine("j")
			sent := f.router.sent()
			for range 3 {
				f.pass()
			}
			require.Equal(t, sent, f.router.sent(), "no command at all")
			require.Equal(t, 0, f.router.beginCount("j", "primary"))
			require.Equal(t, 0, f.router.stopCount("j", "primary"))
			require.Equal(t, node, f.nodeOf("j", "primary"))
			require.Equal(t, []string{"primary"}, f.staleRoles("j"), "the drift stays, for job get")
		})
	}
}

// A bundle under MIGRATE: the backup moves first; the primary only once
// the backup's move has ended (never both replicas moving).
func TestEngine_Rolling_BundleBackupFirst(t *testing.T) {
	f := newFixture(t)
	f.putNode("a", 4, "z1", nil)
	f.putNode("b", 4, "z2", nil)
	svc := &managerpb.Job{Services: []*commonpb.Service{{Name: "s"}}}
	bd := &managerpb.Bundle{BundleId: &managerpb.BundleId{BundleId: "bd"}, UpdateStrategy: managerpb.UpdateStrategy_UPDATE_STRATEGY_MIGRATE,
		Jobs:             []*managerpb.BundleJobSpec{{JobName: "web", Requirements: &managerpb.JobRequirements{RequiredCapacity: 1}, Job: svc}},
		ResiliencePolicy: &managerpb.ResiliencePolicy{SameNode: managerpb.AntiAffinity_ANTI_AFFINITY_FORBID}}
	f.putBundle(bd, nil)
	p, b := "bd.0.web", "bd.1.web"
	f.setStrategy(p, managerpb.UpdateStrategy_UPDATE_STRATEGY_MIGRATE)
	f.setStrategy(b, managerpb.UpdateStrategy_UPDATE_STRATEGY_MIGRATE)
	f.pass()
	require.NotEmpty(t, f.nodeOf(p, "primary"))
	require.NotEmpty(t, f.nodeOf(b, "backup"))
	f.redefine(p)
	f.redefine(b)
	f.router.provisioning = true

	f.pass()
	require.Equal(t, 1, f.router.beginCount(b, "backup"), "the backup first")
	require.Equal(t, 0, f.router.beginCount(p, "primary"))
	f.pass() // the backup's target starts
	require.NotEmpty(t, f.nodeOf(b, "backup~1"))
	require.NotEqual(t, f.nodeOf(p, "primary"), f.nodeOf(b, "backup~1"), "anti-affinity holds for the target")
	f.run(b, "backup~1")
	f.pass() // hand-over
	require.Equal(t, 0, f.router.beginCount(p, "primary"), "the primary waits while the backup's source stops")
	f.confirmStops()
	f.pass() // the backup's move ends
	require.Nil(t, f.moveOf(b))
	require.Equal(t, 0, f.router.beginCount(p, "primary"), "not in the pass that ended the backup's move")
	f.pass()
	require.Equal(t, 1, f.router.beginCount(p, "primary"), "then the primary")
	f.pass()
	f.run(p, "primary~1")
	f.pass()
	f.confirmStops()
	f.pass()
	require.Nil(t, f.moveOf(p))
	require.Empty(t, f.staleRoles(p))
	require.Empty(t, f.staleRoles(b))
	require.NotEqual(t, f.nodeOf(p, "primary~1"), f.nodeOf(b, "backup~1"))
	f.pass()
	require.Equal(t, 1, f.router.beginCount(b, "backup"))
	require.Equal(t, 1, f.router.beginCount(p, "primary"))
}

// A target that fails backs the move out; the source keeps running, the
// drift stays, and the move is not begun again before the pause and the
// restart backoff are over; then it is.
func TestEngine_Rolling_FailedTargetBacksOut(t *testing.T) {
	f := newFixture(t)
	f.putNode("a", 4, "z1", nil)
	f.putJob(migrateJob("j", 1))
	f.pass()
	f.redefine("j")
	f.router.provisioning = true
	f.pass() // begin
	f.pass() // target
	require.Equal(t, "a", f.nodeOf("j", "primary~1"))
	f.fail("j", "primary~1", "exit 1: bad new config")
	from := f.head()
	f.pass() // backed out
	ab := events[*managerpb.EventStreamEvent_MigrationAborted](f, from)
	require.Len(t, ab, 1)
	require.Contains(t, ab[0].MigrationAborted.GetReason(), "bad new config")
	require.Nil(t, f.moveOf("j"))
	require.Equal(t, "a", f.nodeOf("j", "primary"), "the source runs")
	require.Equal(t, []string{"primary"}, f.staleRoles("j"), "the drift stays visible")
	for range 3 {
		f.pass()
	}
	require.Equal(t, 1, f.router.beginCount("j", "primary"), "no retry loop")
	f.now = f.now.Add(drainMovePause + time.Minute)
	f.pass()
	require.Equal(t, 2, f.router.beginCount("j", "primary"), "tried again after the pause and the backoff")
	require.Equal(t, "primary~2", f.moveOf("j").GetTargetRole())
}

// A failed target's record is what holds the next move (its failure,
// within drainMovePause; it does not count towards the restart ceiling): a
// new engine (a new leader, no memory of the pause) does not begin it at
// once either.
func TestEngine_Rolling_NewLeaderKeepsTheBackoff(t *testing.T) {
	f := newFixture(t)
	f.putNode("a", 4, "z1", nil)
	f.putJob(migrateJob("j", 1))
	f.pass()
	f.redefine("j")
	f.router.provisioning = true
	f.pass()
	f.pass()
	f.fail("j", "primary~1", "exit 1")
	f.pass()
	require.Nil(t, f.moveOf("j"))
	cfg := f.eng.cfg
	e, err := New(cfg)
	require.NoError(t, err)
	f.eng = e
	f.pass()
	require.Equal(t, 1, f.router.beginCount("j", "primary"), "the pause is in the record")
	f.now = f.now.Add(time.Minute)
	f.pass()
	require.Equal(t, 2, f.router.beginCount("j", "primary"))
}

// A move no node fits (the source's node has no room for both, no other
// node) is not begun: it waits, with the chain's explanation, rather than
// being begun and backed out every pass; once a node with room joins, it
// moves there.
func TestEngine_Rolling_NoRoomWaits(t *testing.T) {
	f := newFixture(t)
	f.putNode("a", 1, "z1", nil)
	f.putJob(migrateJob("j", 1))
	f.pass()
	f.redefine("j")
	from := f.head()
	for range 3 {
		f.pass()
	}
	require.Equal(t, 0, f.router.beginCount("j", "primary"))
	require.Empty(t, events[*managerpb.EventStreamEvent_MigrationStarted](f, from), "nothing begun, nothing backed out")
	f.eng.moves.mu.Lock()
	why := f.eng.moves.rollHeld[key{"j", "primary"}]
	f.eng.moves.mu.Unlock()
	require.Contains(t, why, "no node fits")
	require.Equal(t, "a", f.nodeOf("j", "primary"))
	require.Equal(t, []string{"primary"}, f.staleRoles("j"))
	f.putNode("b", 4, "z1", nil)
	f.pass() // begin
	f.pass() // target
	require.Equal(t, "b", f.nodeOf("j", "primary~1"))
}

// A bundle whose backup's new instance fails holds its primary on the old
// definition: the backup is the canary, the primary is never begun.
func TestEngine_Rolling_BundleCanaryHoldsPrimary(t *testing.T) {
	f := newFixture(t)
	f.putNode("a", 4, "z1", nil)
	f.putNode("b", 4, "z2", nil)
	svc := &managerpb.Job{Services: []*commonpb.Service{{Name: "s"}}}
	bd := &managerpb.Bundle{BundleId: &managerpb.BundleId{BundleId: "bd"}, UpdateStrategy: managerpb.UpdateStrategy_UPDATE_STRATEGY_MIGRATE,
		Jobs:             []*managerpb.BundleJobSpec{{JobName: "web", Requirements: &managerpb.JobRequirements{RequiredCapacity: 1}, Job: svc}},
		ResiliencePolicy: &managerpb.ResiliencePolicy{SameNode: managerpb.AntiAffinity_ANTI_AFFINITY_FORBID}}
	f.putBundle(bd, nil)
	p, b := "bd.0.web", "bd.1.web"
	f.setStrategy(p, managerpb.UpdateStrategy_UPDATE_STRATEGY_MIGRATE)
	f.setStrategy(b, managerpb.UpdateStrategy_UPDATE_STRATEGY_MIGRATE)
	f.pass()
	f.redefine(p)
	f.redefine(b)
	f.router.provisioning = true
	f.pass() // the backup's move begins
	f.pass() // its target starts
	f.fail(b, "backup~1", "exit 1")
	f.pass() // backed out
	require.Nil(t, f.moveOf(b))
	for range 3 {
		f.pass()
	}
	require.Equal(t, 1, f.router.beginCount(b, "backup"))
	require.Equal(t, 0, f.router.beginCount(p, "primary"), "the primary waits for its backup")
	require.Equal(t, []string{"primary"}, f.staleRoles(p))
	require.Equal(t, []string{"backup"}, f.staleRoles(b))
}

// A new leader (a new engine on the same records) goes on with a rolling
// update begun by the old one: the move is begun once and completes.
func TestEngine_Rolling_NewLeaderGoesOn(t *testing.T) {
	f := newFixture(t)
	f.putNode("a", 4, "z1", nil)
	f.putJob(migrateJob("j", 1))
	f.pass()
	f.redefine("j")
	f.router.provisioning = true
	f.pass() // begun by the first leader
	require.NotNil(t, f.moveOf("j"))
	e, err := New(f.eng.cfg)
	require.NoError(t, err)
	f.eng = e
	f.pass() // the new leader starts the target
	f.run("j", "primary~1")
	f.pass()
	f.confirmStops()
	f.pass()
	require.Nil(t, f.moveOf("j"))
	require.Empty(t, f.staleRoles("j"))
	require.Equal(t, 1, f.router.beginCount("j", "primary"))
	require.Equal(t, 1, f.router.startCount("j", "primary~1"))
}

// rollingBusy holds a bundle with a move in any of its job records, even
// when every instance runs (a move STARTING whose target runs, before its
// hand-over): never both replicas moving.
func TestRollingBusy_MoveInRecord(t *testing.T) {
	f := newFixture(t)
	bp, bb := derived("bd", 0, "enc", "stale"), derived("bd", 1, "enc", "stale")
	bb.Instances = append(bb.Instances, &internalpb.Instance{Role: "backup~1", NodeId: "n2", Status: internalpb.InstanceStatus_INSTANCE_RUNNING})
	bb.Migrations = []*managerpb.Migration{{SourceRole: "backup", TargetRole: "backup~1", Phase: managerpb.Migration_MIGRATION_STARTING}}
	plain := rollingJob("p", "primary", "stale", nil)
	w := &world{base: &base{jobs: map[string]*internalpb.JobRecord{bp.GetJob().GetJob().GetJobId().GetJobId(): bp,
		bb.GetJob().GetJob().GetJobId().GetJobId(): bb, "p": plain},
		bundles: map[string]*internalpb.BundleRecord{"bd": liveBundle("bd", "enc")}}}
	busy := f.eng.rollingBusy(w)
	require.True(t, busy["bd"], "the bundle is moving")
	require.False(t, busy["p"], "a plain job is its own group")
}
