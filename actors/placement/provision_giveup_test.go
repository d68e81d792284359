package placement

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/norsk-oss/norsk-manager/actors/provisioner"
	"github.com/norsk-oss/norsk-manager/persistence"
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
