package placement

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/norsk-oss/norsk-manager/persistence"
	"github.com/norsk-oss/norsk-manager/proto/commonpb"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
)

type (
	evPlaced   = *managerpb.EventStreamEvent_JobPlaced
	evFailed   = *managerpb.EventStreamEvent_PlacementFailed
	evDegraded = *managerpb.EventStreamEvent_PlacementDegraded
)

// TestEngine_Events_JobPlaced: a placement's StartJob carries the note;
// its commit raises job_placed naming the node, pool and tier, and the
// instance keeps the note (GetPlacement on any manager, after failover).
func TestEngine_Events_JobPlaced(t *testing.T) {
	f := newFixture(t)
	f.putNode("n1", 4, "z1", map[string]string{"tier": "cheap"})
	f.putPool("p", 5, 600, &managerpb.PoolTier{Name: "cheap", NodeSelector: map[string]string{"tier": "cheap"}})
	f.putJob(autoJob("j", 1, map[string]string{persistence.PoolTag: "p"}))
	h := f.head()
	f.pass()
	placed := events[evPlaced](f, h)
	require.Len(t, placed, 1)
	p := placed[0].JobPlaced
	require.Equal(t, "j", p.GetJobId().GetJobId())
	require.Equal(t, "primary", p.GetRole())
	require.Equal(t, "n1", p.GetNodeId().GetNodeId())
	require.Equal(t, "p", p.GetPool())
	require.Equal(t, "cheap", p.GetTier())
	require.Empty(t, p.GetDegradedDomains())
	require.Contains(t, p.GetDecision(), "job j role primary on node n1 (tier cheap")
	require.Empty(t, events[evDegraded](f, h))
	note := f.job("j").GetInstances()[0].GetPlacement()
	require.Equal(t, "cheap", note.GetTier())
	require.Equal(t, "p", note.GetPool())
}

// TestEngine_Events_PlacementFailedRateLimited: a role no node fits is
// written to its record once, with the filter counts, and raises
// placement_failed; the same reason is never written again, a new reason
// not before FailureWriteGap, and a placement clears it, with no failure
// write of its own.
func TestEngine_Events_PlacementFailedRateLimited(t *testing.T) {
	f := newFixture(t)
	f.putNode("n1", 1, "z1", nil)
	f.putJob(autoJob("j", 2, nil))
	h := f.head()
	f.pass()
	failed := events[evFailed](f, h)
	require.Len(t, failed, 1)
	a := failed[0].PlacementFailed.GetAttempt()
	require.Equal(t, "job j role primary fits no node: 1 node evaluated: capacity exhausted on 1 node (needs 2 units)", a.GetReason())
	require.Equal(t, uint32(1), a.GetNodesEvaluated())
	require.Equal(t, "capacity", a.GetFilters()[0].GetFilter())
	rf := recordedFailure(f.job("j"), "primary")
	require.NotNil(t, rf)
	require.Equal(t, a.GetReason(), rf.GetAttempt().GetReason())

	// The same reason, pass after pass: nothing more is written.
	for range 50 {
		f.now = f.now.Add(time.Second)
		f.pass()
	}
	n, _ := f.router.writes("j/primary")
	require.Equal(t, 1, n)

	// A new reason is written, but not within FailureWriteGap of the last.
	f.putNode("n2", 1, "z1", nil)
	f.now = f.now.Add(time.Second)
	start := f.now
	rf = recordedFailure(f.job("j"), "primary")
	f.putNode("n2", 1, "z1", nil)
	for f.now.Sub(rf.GetRecordedAt().AsTime()) < FailureWriteGap {
		f.pass()
		n, _ := f.router.writes("j/primary")
		require.Equal(t, 1, n, "a new reason %s after the last write", f.now.Sub(rf.GetRecordedAt().AsTime()))
		f.now = f.now.Add(time.Second)
	}
	f.pass()
	n, _ = f.router.writes("j/primary")
	require.Equal(t, 2, n, "written once the gap passed (started %s)", start)
	require.Contains(t, recordedFailure(f.job("j"), "primary").GetAttempt().GetReason(), "2 nodes evaluated")

	// Room appears: placed, the failure cleared by the start's commit.
	f.putNode("n3", 4, "z1", nil)
	h = f.head()
	f.pass()
	require.Equal(t, "n3", f.nodeOf("j", "primary"))
	require.Len(t, events[evPlaced](f, h), 1)
	require.Empty(t, events[evFailed](f, h))
	require.True(t, recordedFailure(f.job("j"), "primary").GetCleared())
	_, ok := f.eng.LastFailure("j", "primary")
	require.False(t, ok)
}

// TestEngine_Events_FullClusterBoundedWrites: with many jobs that fit
// nowhere, the failure writes are spread by the engine-wide budget, each
// job is written once, and a further minute of passes writes nothing.
func TestEngine_Events_FullClusterBoundedWrites(t *testing.T) {
	f := newFixture(t)
	f.putNode("n1", 1, "z1", nil)
	const jobs = 2*failureBudget + 10
	for i := range jobs {
		f.putJob(autoJob(fmt.Sprintf("j%03d", i), 2, nil))
	}
	total := func() int {
		f.router.mu.Lock()
		defer f.router.mu.Unlock()
		n := 0
		for _, c := range f.router.failureWrites {
			n += c
		}
		return n
	}
	f.pass()
	require.Equal(t, failureBudget, total(), "one second's budget in the first pass")
	f.now = f.now.Add(100 * time.Millisecond)
	f.pass()
	require.Equal(t, failureBudget, total(), "no more within the same second")
	for range 60 {
		f.now = f.now.Add(time.Second)
		f.pass()
	}
	require.Equal(t, jobs, total(), "every job written once")
	for i := range jobs {
		n, _ := f.router.writes(fmt.Sprintf("j%03d/primary", i))
		require.Equal(t, 1, n)
	}
}

// TestEngine_Events_CrashLoopWritesNoFailures: a crash-looping job up to
// its restart ceiling is placed again and again (each placement's
// job_placed in its StartJob's commit) and never writes a placement
// failure: it always fits.
func TestEngine_Events_CrashLoopWritesNoFailures(t *testing.T) {
	f := newFixture(t)
	f.putNode("n1", 4, "z1", nil)
	f.putPool("small", 3, 600)
	f.putJob(autoJob("j", 1, map[string]string{persistence.PoolTag: "small"}))
	h := f.head()
	for f.job("j").GetJob().GetJob().GetTerminalState() == nil {
		f.pass()
		if f.nodeOf("j", "primary") != "" {
			f.fail("j", "primary", "exit status 1")
		}
		f.now = f.now.Add(10 * time.Second)
	}
	require.Len(t, events[evPlaced](f, h), 3)
	require.Empty(t, events[evFailed](f, h))
	n, _ := f.router.writes("j/primary")
	require.Zero(t, n)
}

// TestEngine_Events_DegradedRechecked: a backup placed in its primary's
// zone (the only room) raises placement_degraded DEGRADED; when a node in
// another zone gets room the re-check says FIX_AVAILABLE without moving
// the backup; when the primary moves out of the zone, RESOLVED. Each
// state is written once.
func TestEngine_Events_DegradedRechecked(t *testing.T) {
	f := newFixture(t)
	f.putNode("a1", 1, "z1", nil)
	f.putNode("a2", 1, "z1", nil)
	svc := &managerpb.Job{Services: []*commonpb.Service{{Name: "s"}}}
	b := &managerpb.Bundle{BundleId: &managerpb.BundleId{BundleId: "bd"},
		Jobs:             []*managerpb.BundleJobSpec{{JobName: "web", Requirements: &managerpb.JobRequirements{RequiredCapacity: 1}, Job: svc}},
		ResiliencePolicy: &managerpb.ResiliencePolicy{SameNode: managerpb.AntiAffinity_ANTI_AFFINITY_FORBID, SameAz: managerpb.AntiAffinity_ANTI_AFFINITY_FORBID}}
	f.putBundle(b, nil)
	h := f.head()
	f.pass()
	primary, backup := f.nodeOf("bd.0.web", "primary"), f.nodeOf("bd.1.web", "backup")
	require.NotEmpty(t, primary)
	require.NotEmpty(t, backup)
	deg := events[evDegraded](f, h)
	require.Len(t, deg, 1, "one of the pair is placed second, sharing the zone")
	d := deg[0].PlacementDegraded
	require.Equal(t, managerpb.PlacementDegraded_DEGRADED, d.GetState())
	require.Equal(t, []string{"zone"}, d.GetDomains())
	second := d.GetJobId().GetJobId()
	role := d.GetRole()
	require.Equal(t, []string{"zone"}, f.job(second).GetInstances()[0].GetPlacement().GetDegraded())

	// Room in another zone: FIX_AVAILABLE once the write gap passed, not moved.
	f.putNode("b1", 1, "z2", nil)
	h = f.head()
	f.pass()
	require.Empty(t, events[evDegraded](f, h), "not within RecheckWriteGap of the placement")
	f.now = f.now.Add(RecheckWriteGap)
	f.pass()
	deg = events[evDegraded](f, h)
	require.Len(t, deg, 1)
	require.Equal(t, managerpb.PlacementDegraded_FIX_AVAILABLE, deg[0].PlacementDegraded.GetState())
	require.Contains(t, deg[0].PlacementDegraded.GetMessage(), "node b1 shares less and has room now: the job is not moved")
	require.Equal(t, 1, f.router.startCount(second, role), "the running job is not moved")
	for range 5 {
		f.now = f.now.Add(RecheckWriteGap)
		f.pass()
	}
	require.Len(t, events[evDegraded](f, h), 1, "an unchanged state is not written again")

	// The other replica moves to z2 (its node is lost): RESOLVED, in the
	// pass that re-places it.
	other := primary
	if second == "bd.0.web" {
		other = backup
	}
	h = f.head()
	f.stopNode(other)
	f.pass()
	f.now = f.now.Add(RecheckWriteGap)
	f.pass()
	deg = events[evDegraded](f, h)
	require.Len(t, deg, 1)
	require.Equal(t, managerpb.PlacementDegraded_RESOLVED, deg[0].PlacementDegraded.GetState())
	require.Empty(t, deg[0].PlacementDegraded.GetDomains())
	note := f.job(second).GetInstances()[0].GetPlacement()
	require.Equal(t, managerpb.PlacementDegraded_RESOLVED, note.GetDegradation())
	require.Equal(t, []string{"zone"}, note.GetDegradedAtPlacement(), "what the placement was is kept")
}

// TestEngine_Events_NewLeaderDoesNotRewrite: a new leader's engine finds
// the failure in the record: the same reason is not written again, and the
// record's recorded_at holds a new reason back as it held the old leader.
func TestEngine_Events_NewLeaderDoesNotRewrite(t *testing.T) {
	f := newFixture(t)
	f.putNode("n1", 1, "z1", nil)
	f.putJob(autoJob("j", 2, nil))
	f.pass()
	cfg := DefaultConfig()
	cfg.Store, cfg.Router, cfg.Clock = f.store, f.router, func() time.Time { return f.now }
	next, err := New(cfg)
	require.NoError(t, err)
	f.eng = next
	f.now = f.now.Add(time.Second)
	f.pass()
	f.putNode("n2", 1, "z1", nil) // a new reason
	f.now = f.now.Add(time.Second)
	f.pass()
	n, _ := f.router.writes("j/primary")
	require.Equal(t, 1, n)
	f.now = f.now.Add(FailureWriteGap)
	f.pass()
	n, _ = f.router.writes("j/primary")
	require.Equal(t, 2, n)
}
