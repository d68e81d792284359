package placement

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/norsk-oss/norsk-manager/persistence"
	"github.com/norsk-oss/norsk-manager/proto/internalpb"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
)

// TestEngine_Preempt_WaitsForOwnProvisioning: a HIGH job of a pool whose
// mock tier can create a node for it, with a LOW job filling the pool's
// one hand-made node. With the pool's wait at least the boot time the
// HIGH job never preempts: not on the first pass (the plan has not run
// yet), not while its node is coming; it runs on the new node. With a
// wait shorter than any boot, or max_nodes reached, it preempts at once
// and no node is created for it (its victim is planned for instead).
func TestEngine_Preempt_WaitsForOwnProvisioning(t *testing.T) {
	cases := []struct {
		name     string
		waitSecs uint32
		maxNodes uint32
		// preempts is whether the HIGH job preempts on its first pass.
		preempts bool
	}{
		{"node in time", 300, 2, false},
		{"wait shorter than a boot", 60, 2, true},
		{"at max_nodes", 300, 1, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f, n := newProvisionFixture(t)
			t0 := f.now
			tier := &managerpb.PoolTier{Name: "mock", MaxNodes: tc.maxNodes, LingerSeconds: 60,
				Provisioner: &managerpb.PoolTier_Mock{Mock: &managerpb.MockTierProvisioner{Offering: &managerpb.TierInstanceType{Capacity: 8}}}}
			f.put(persistence.PlacementPoolKey("elastic"), &internalpb.PoolRecord{Pool: &managerpb.Pool{Name: "elastic",
				Tiers: []*managerpb.PoolTier{tier}, HighPriorityProvisionWaitSeconds: tc.waitSecs}})
			f.putNode("slot-1", 10, "", nil)
			f.bandJob("l", 10, low, "elastic")
			f.pass()
			require.Equal(t, "slot-1", f.nodeOf("l", "primary"))
			if tc.maxNodes == 1 {
				// The tier's one node, started and full.
				f.bandJob("s", 8, standard, "elastic")
				f.pass()
				n.start("elastic-mock-1", 8)
				f.pass()
				require.Equal(t, "elastic-mock-1", f.nodeOf("s", "primary"))
			}
			created := len(n.creates)

			f.bandJob("h", 5, high, "elastic")
			f.pass()
			if tc.preempts {
				require.Equal(t, 1, f.router.preemptCount(), "preempts at once")
				require.Len(t, n.creates, created, "no node created for a HIGH job that preempts")
				return
			}
			require.Equal(t, 0, f.router.preemptCount(), "first pass: the plan decides")
			require.Equal(t, map[string]int{"elastic-mock-1": 1}, n.creates)
			by, ok := f.eng.NodeComing("h", "primary")
			require.True(t, ok)
			require.Equal(t, t0.Add(DefaultNodeBootTime), by, "the create's start plus the boot time")

			f.now = t0.Add(DefaultNodeBootTime + 10*time.Second) // slower than expected, within the wait
			f.pass()
			require.Equal(t, 0, f.router.preemptCount(), "waits for the node coming")
			n.start("elastic-mock-1", 8)
			f.pass()
			require.Equal(t, "elastic-mock-1", f.nodeOf("h", "primary"))
			require.Equal(t, "slot-1", f.nodeOf("l", "primary"))
			require.Equal(t, 0, f.router.preemptCount())
		})
	}
}

// TestEngine_Preempt_NodeTooLate: a node being created for a HIGH job
// that does not come up within the pool's wait no longer holds the
// preemption back.
func TestEngine_Preempt_NodeTooLate(t *testing.T) {
	f, n := newProvisionFixture(t)
	t0 := f.now
	f.put(persistence.PlacementPoolKey("elastic"), &internalpb.PoolRecord{Pool: &managerpb.Pool{Name: "elastic",
		Tiers: []*managerpb.PoolTier{{Name: "mock", MaxNodes: 2, LingerSeconds: 60,
			Provisioner: &managerpb.PoolTier_Mock{Mock: &managerpb.MockTierProvisioner{Offering: &managerpb.TierInstanceType{Capacity: 8}}}}},
		HighPriorityProvisionWaitSeconds: 180}})
	f.putNode("slot-1", 10, "", nil)
	f.bandJob("l", 10, low, "elastic")
	f.pass()
	f.bandJob("h", 5, high, "elastic")
	f.pass()
	f.pass()
	require.Equal(t, 0, f.router.preemptCount())
	require.Equal(t, map[string]int{"elastic-mock-1": 1}, n.creates)
	f.now = t0.Add(179 * time.Second)
	f.pass()
	require.Equal(t, 0, f.router.preemptCount())
	f.now = t0.Add(180 * time.Second)
	f.pass()
	require.Equal(t, 1, f.router.preemptCount(), "the wait is over")
	require.Equal(t, map[string]int{"elastic-mock-1": 1}, n.creates, "no second node")
}
