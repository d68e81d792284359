package e2e

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/norsk-oss/norsk-manager/client"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
)

// TestE2E_PlacementBundle_TiersZonesDeregister (issue 11 §5): four
// cluster-slot workers in zones z1 and z2, a cheap tier of two nodes with
// 3 units each and an expensive tier of two with 8; a bundle of a, b
// (co_locate_with a) and c (separate_from a), 1 unit each, whose
// resilience policy forbids the same node and zone. All six derived jobs
// run, on the cheap tier only (3 + 3 units: it is filled before the
// expensive one is touched), each backup in the other zone from its
// primary, a and b together, c apart from a. Then the node of a's primary
// is deregistered: every role it ran runs again, in the same zone (the
// only way to keep the policy) on the expensive node, a and b still
// together, and every role elsewhere keeps its process. The time from the
// call to all of them running again is logged (issue 11 says within 2 s;
// not asserted: the suite runs beside other builds).
func TestE2E_PlacementBundle_TiersZonesDeregister(t *testing.T) {
	ctx := context.Background()
	f := newFleet(t,
		slotSpec{name: "cheap-z1", zone: "z1", capacity: 3, tags: map[string]string{"tier": "cheap"}},
		slotSpec{name: "cheap-z2", zone: "z2", capacity: 3, tags: map[string]string{"tier": "cheap"}},
		slotSpec{name: "dear-z1", zone: "z1", capacity: 8, tags: map[string]string{"tier": "dear"}},
		slotSpec{name: "dear-z2", zone: "z2", capacity: 8, tags: map[string]string{"tier": "dear"}},
	)
	require.NoError(t, f.mc.CreatePool(ctx, &managerpb.Pool{Name: "live", Tiers: []*managerpb.PoolTier{
		{Name: "cheap", NodeSelector: map[string]string{"tier": "cheap"}},
		{Name: "dear", NodeSelector: map[string]string{"tier": "dear"}},
	}}))
	unit := func() *managerpb.JobRequirements { return &managerpb.JobRequirements{RequiredCapacity: 1} }
	bid, err := f.mc.CreateBundle(ctx, &managerpb.Bundle{
		Pool: "live",
		Jobs: []*managerpb.BundleJobSpec{
			{JobName: "a", Requirements: unit(), Job: f.sleepJob("")},
			{JobName: "b", Requirements: unit(), Job: f.sleepJob(""), CoLocateWith: []string{"a"}},
			{JobName: "c", Requirements: unit(), Job: f.sleepJob(""), SeparateFrom: []string{"a"}},
		},
		ResiliencePolicy: &managerpb.ResiliencePolicy{
			SameNode: managerpb.AntiAffinity_ANTI_AFFINITY_FORBID, SameAz: managerpb.AntiAffinity_ANTI_AFFINITY_FORBID},
	})
	require.NoError(t, err)

	// where[replica][name] is the node; pids[replica][name] the process.
	type at struct {
		node string
		pid  int
	}
	read := func(not ...string) [2]map[string]at {
		var out [2]map[string]at
		for r := range 2 {
			out[r] = map[string]at{}
			for _, name := range []string{"a", "b", "c"} {
				n, pid := f.awaitRunning(60*time.Second, bundleJob(bid, r, name), roleOf(r), not...)
				out[r][name] = at{n, pid}
			}
		}
		return out
	}
	checkRules := func(when string, w [2]map[string]at) {
		t.Helper()
		for _, name := range []string{"a", "b", "c"} {
			p, b := w[0][name].node, w[1][name].node
			require.NotEqual(t, p, b, "%s: %s primary and backup on one node", when, name)
			require.NotEqual(t, f.zone(p), f.zone(b), "%s: %s primary on %s, backup on %s: same zone", when, name, f.name(p), f.name(b))
		}
		for r := range 2 {
			require.Equal(t, w[r]["a"].node, w[r]["b"].node, "%s: replica %d: b co-located with a", when, r)
			require.NotEqual(t, w[r]["a"].node, w[r]["c"].node, "%s: replica %d: c separate from a", when, r)
		}
	}

	before := read()
	checkRules("placed", before)
	for r := range 2 {
		for name, a := range before[r] {
			require.Equal(t, "cheap", f.byID[a.node].tags["tier"], "replica %d %s on %s: the cheap tier has room for all six", r, name, f.name(a.node))
		}
	}

	// The node of a's primary leaves.
	gone := before[0]["a"].node
	start := time.Now()
	require.NoError(t, f.mc.DeregisterClusterNode(ctx, client.NodeID(gone)))
	after := read(gone)
	t.Logf("deregistered %s: its roles ran again elsewhere after %s (issue 11: within 2 s)", f.name(gone), time.Since(start).Round(time.Millisecond))
	checkRules("after the deregister", after)
	moved := 0
	for r := range 2 {
		for name, was := range before[r] {
			now := after[r][name]
			if was.node != gone {
				require.Equal(t, was, now, "replica %d %s was not on %s: it keeps its node and process", r, name, f.name(gone))
				continue
			}
			moved++
			require.NotEqual(t, was.pid, now.pid, "replica %d %s moved: a new process", r, name)
			require.Equal(t, "dear-"+f.zone(gone), f.name(now.node),
				"replica %d %s: the policy keeps it in %s, where only the expensive node is left", r, name, f.zone(gone))
		}
	}
	require.Equal(t, 3, moved, "a and b primaries and one c on the deregistered node")
}
