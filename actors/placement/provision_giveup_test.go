package placement

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/norsk-oss/norsk-manager/actors/provisioner"
	"github.com/norsk-oss/norsk-manager/persistence"
	"github.com/norsk-oss/norsk-manager/proto/internalpb"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
)

// TestEngine_Provision_GivesUpStuckNode: a node the engine created whose
// worker never comes up (a mock URL that never answers) holds its room
// and the tier's one place under max_nodes until the create timeout;
// then it is terminated and a new node is created for the waiting job.
// Without the give-up the job waited for good.
func TestEngine_Provision_GivesUpStuckNode(t *testing.T) {
	f, n := newProvisionFixture(t)
	t0 := f.now
	f.putPool("elastic", 5, 600, &managerpb.PoolTier{Name: "mock", MaxNodes: 1, LingerSeconds: 60,
		Provisioner: &managerpb.PoolTier_Mock{Mock: &managerpb.MockTierProvisioner{Offering: &managerpb.TierInstanceType{Capacity: 8}}}})
	f.putJob(autoJob("a", 2, map[string]string{persistence.PoolTag: "elastic"}))
	f.pass()
	require.Equal(t, map[string]int{"elastic-mock-1": 1}, n.creates)

	f.now = t0.Add(provisioner.CreateTimeout - time.Second)
	f.pass()
	require.Empty(t, n.released, "given up before its timeout")
	require.Equal(t, map[string]int{"elastic-mock-1": 1}, n.creates)

	f.now = t0.Add(provisioner.CreateTimeout)
	f.pass()
	require.Equal(t, []string{"elastic-mock-1"}, n.released)
	require.Equal(t, managerpb.NodeLifecycle_NODE_LIFECYCLE_STOPPED, n.node("elastic-mock-1").GetState())
	f.pass()
	require.Equal(t, map[string]int{"elastic-mock-1": 1, "elastic-mock-2": 1}, n.creates, "a new node for the waiting job")
	n.start("elastic-mock-2", 8)
	f.pass()
	require.Equal(t, "elastic-mock-2", f.nodeOf("a", "primary"))
	require.Equal(t, []string{"elastic-mock-1"}, n.released, "the running node is kept")
}

// TestEngine_BronzeDrop_NoNodeCreated: a LOW job dropped for waiting past
// its pool's limit gets no node created for it in the pass that drops it
// (before the fix the plan, run after the decisions, created one, which
// then ran nothing and lingered until released).
func TestEngine_BronzeDrop_NoNodeCreated(t *testing.T) {
	f, n := newProvisionFixture(t)
	t0 := f.now
	f.put(persistence.PlacementPoolKey("elastic"), &internalpb.PoolRecord{Pool: &managerpb.Pool{Name: "elastic", LowPriorityMaxWaitSeconds: 60,
		Tiers: []*managerpb.PoolTier{{Name: "mock", MaxNodes: 2, LingerSeconds: 60,
			Provisioner: &managerpb.PoolTier_Mock{Mock: &managerpb.MockTierProvisioner{Offering: &managerpb.TierInstanceType{Capacity: 8}}}}}}})
	f.bandJob("l", 2, low, "elastic")
	f.now = t0.Add(61 * time.Second) // e.g. the manager was down, or the pool was just made elastic
	f.pass()
	require.NotNil(t, f.job("l").GetJob().GetJob().GetTerminalState(), "dropped")
	require.Empty(t, n.creates, "no node for a job given up")
	f.pass()
	require.Empty(t, n.creates)
}
