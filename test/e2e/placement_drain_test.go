package e2e

import (
	"context"
	"fmt"
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/norsk-oss/norsk-manager/client"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
	"github.com/norsk-oss/norsk-manager/test/testproc"
)

// TestE2E_PlacementDrainCordon (issue 11 §4, §5) with real processes.
// Pool "a" is the nodes tagged side=a, pool "b" those tagged side=b. On
// a-1 (z1, pool a): the primaries of a bundle's jobs x and y (backups in
// pool b, on b-1 in z2), an auto-placed job p, and a job m started by
// hand; a-2 (z1, pool a) joins empty. `norsk-ctl node drain a-1`: x, y
// and p are moved make-before-break (placement.md, "Moves"): they run on
// a-2 with new processes under the role primary~1 and their processes on
// a-1 are gone; the bundle moves one job at a time (the moves of x and y,
// target started to source stopped, do not overlap) and no job is ever
// off air, while the backups' processes never stop; m keeps its
// process on a-1; the engine logs the node drained. Then a-2 is cordoned:
// a new job of pool a fits only there and is not placed (the engine's
// explanation counts the cordoned and draining nodes), and nothing on a-2
// stops; uncordoned, the job runs on a-2.
func TestE2E_PlacementDrainCordon(t *testing.T) {
	ctx := context.Background()
	f := newFleet(t,
		slotSpec{name: "a-1", zone: "z1", capacity: 4, tags: map[string]string{"side": "a"}},
		slotSpec{name: "b-1", zone: "z2", capacity: 4, tags: map[string]string{"side": "b"}},
	)
	a1 := f.byName["a-1"].id
	for _, side := range []string{"a", "b"} {
		require.NoError(t, f.mc.CreatePool(ctx, &managerpb.Pool{Name: side,
			Tiers: []*managerpb.PoolTier{{Name: "all", NodeSelector: map[string]string{"side": side}}}}))
	}
	unit := &managerpb.JobRequirements{RequiredCapacity: 1}
	bid, err := f.mc.CreateBundle(ctx, &managerpb.Bundle{
		Pool: "a",
		Jobs: []*managerpb.BundleJobSpec{
			{JobName: "x", Requirements: unit, Job: f.sleepJob("")},
			{JobName: "y", Requirements: unit, Job: f.sleepJob("")},
		},
		ResiliencePolicy: &managerpb.ResiliencePolicy{Pool: "b",
			SameNode: managerpb.AntiAffinity_ANTI_AFFINITY_FORBID, SameAz: managerpb.AntiAffinity_ANTI_AFFINITY_FORBID},
	})
	require.NoError(t, err)
	_, err = f.mc.CreateJob(ctx, f.autoJob("p", 1, "a"))
	require.NoError(t, err)
	_, err = f.mc.CreateJob(ctx, f.sleepJob("m"))
	require.NoError(t, err)
	require.NoError(t, f.mc.StartJob(ctx, "m", "primary", client.NodeID(a1)))

	// role is one (job, role) of the scenario; pid is its process.
	type role struct{ job, role string }
	x, y := role{bundleJob(bid, 0, "x"), "primary"}, role{bundleJob(bid, 0, "y"), "primary"}
	backups := []role{{bundleJob(bid, 1, "x"), "backup"}, {bundleJob(bid, 1, "y"), "backup"}}
	movers := []role{x, y, {"p", "primary"}}
	// pids and starts are each role's process and job_provisioned count
	// when last seen running.
	pids, starts := map[role]int{}, map[role]int{}
	await := func(r role, want string, not ...string) int {
		t.Helper()
		n, pid := f.awaitRunning(30*time.Second, r.job, r.role, not...)
		require.Equal(t, want, f.name(n), "%s/%s", r.job, r.role)
		starts[r] = f.provisioned(r.job, r.role)
		return pid
	}
	for _, r := range append(movers, role{"m", "primary"}) {
		pids[r] = await(r, "a-1")
	}
	for _, r := range backups {
		pids[r] = await(r, "b-1")
	}
	a2 := f.add(slotSpec{name: "a-2", zone: "z1", capacity: 4, tags: map[string]string{"side": "a"}}).id

	out, code := ctl(t, f.m.addr, "node", "drain", a1, "--reason", "kernel update")
	require.Equal(t, 0, code, out)
	moved := make([]role, len(movers))
	for i, r := range movers {
		moved[i] = role{r.job, r.role + "~1"}
		pids[moved[i]] = await(moved[i], "a-2", a1)
		testproc.Eventually(t, 30*time.Second, r.job+": its process on a-1 is gone", func() bool { return !testproc.PIDAlive(pids[r]) })
	}
	drained := regexp.MustCompile(`msg="node drained" .*node_id=` + regexp.QuoteMeta(a1))
	testproc.Eventually(t, 20*time.Second, "the engine logs a-1 drained", func() bool { return drained.MatchString(f.m.Output()) })
	_, pid, err := f.runsOn("m", "primary")
	require.NoError(t, err, "a job started by hand stays on the draining node")
	require.Equal(t, pids[role{"m", "primary"}], pid)
	keeps := func(when string, rs ...role) {
		t.Helper()
		for _, r := range rs {
			_, pid, err := f.runsOn(r.job, r.role)
			require.NoError(t, err, when)
			require.Equal(t, pids[r], pid, "%s: %s/%s keeps its process", when, r.job, r.role)
			require.Equal(t, starts[r], f.provisioned(r.job, r.role), "%s: %s/%s not started again", when, r.job, r.role)
		}
	}
	keeps("the drain of a-1", backups...)
	xMove, yMove := moveSpan(t, f, x.job, x.role), moveSpan(t, f, y.job, y.role)
	require.True(t, !xMove[1].After(yMove[0]) || !yMove[1].After(xMove[0]),
		"one bundle job moved at a time: x moving %v, y moving %v", xMove, yMove)
	movers = moved

	// Cordoned, a-2 (the only schedulable node of pool a) gets nothing new.
	require.NoError(t, f.mc.CordonNode(ctx, client.NodeID(a2), "test"))
	_, err = f.mc.CreateJob(ctx, f.autoJob("q", 1, "a"))
	require.NoError(t, err)
	testproc.Await(t, 20*time.Second, "q explained as unplaceable: a-1 draining, a-2 cordoned", func() error {
		return unschedulable(ctx, f.mc, "q", 2)
	})
	keeps("cordoning a-2", movers...)
	require.Zero(t, f.provisioned("q", "primary"), "nothing is placed on a cordoned node")

	require.NoError(t, f.mc.UncordonNode(ctx, client.NodeID(a2)))
	await(role{"q", "primary"}, "a-2")
	keeps("uncordoning a-2", movers...)
}

// moveSpan returns the span of (job, role)'s move: when its target
// (role~1) was provisioned and when the source (role) stopped, from the manager's history; the test fails if either is missing
// or the source stopped before the target ran (the job off air).
func moveSpan(t *testing.T, f *fleet, job, role string) [2]time.Time {
	t.Helper()
	r, err := f.mc.JobByID(context.Background(), client.JobID(job))
	require.NoError(t, err)
	var span [2]time.Time
	var running time.Time
	for _, e := range r.GetJob().GetHistoryEntry() {
		switch {
		case e.GetJobProvisioned().GetRole() == role+"~1":
			span[0] = e.GetJobProvisioned().GetTimestamp().AsTime()
		case e.GetJobRunning().GetRole() == role+"~1":
			running = e.GetJobRunning().GetTimestamp().AsTime()
		case e.GetJobStopped().GetRole() == role:
			span[1] = e.GetJobStopped().GetTimestamp().AsTime()
		}
	}
	require.False(t, span[0].IsZero() || span[1].IsZero() || running.IsZero(), "%s/%s: no move in its history %v", job, role, r.GetJob().GetHistoryEntry())
	require.False(t, span[1].Before(running), "%s/%s: the source stopped (%v) before the target ran (%v)", job, role, span[1], running)
	return span
}

// unschedulable returns nil once GetPlacement explains job's primary as
// not placed because the schedulable filter removed n nodes.
func unschedulable(ctx context.Context, mc *client.NorskManager, job string, n uint32) error {
	p, err := mc.GetPlacement(ctx, client.JobID(job))
	if err != nil {
		return err
	}
	for _, rp := range p.GetRoles() {
		if rp.GetRole() != "primary" {
			continue
		}
		if rp.GetNodeId() != "" {
			return fmt.Errorf("placed on %s", rp.GetNodeId())
		}
		for _, fc := range rp.GetLastAttempt().GetFilters() {
			if fc.GetFilter() == "schedulable" && fc.GetNodesRemoved() == n {
				return nil
			}
		}
		return fmt.Errorf("last attempt: %v", rp.GetLastAttempt())
	}
	return fmt.Errorf("no primary in %v", p)
}
