package placement

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/norsk-oss/norsk-manager/persistence"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
)

// A drain in an elastic pool whose job fits no other node waits for room
// the pool's provisioner can create: the engine creates a node for the
// job's move (a drain of the pool's only node used to wait for good), and
// the move goes to it once it runs.
func TestEngine_Drain_ProvisionsRoomForTheMove(t *testing.T) {
	f, n := newProvisionFixture(t)
	f.putJob(autoJob("a", 6, map[string]string{persistence.PoolTag: "elastic"}))
	f.pass()
	n.start("elastic-mock-1", 8)
	f.pass()
	require.Equal(t, "elastic-mock-1", f.nodeOf("a", "primary"))
	f.run("a", "primary")
	f.router.provisioning = true

	f.setScheduling("elastic-mock-1", managerpb.NodeScheduling_NODE_SCHEDULING_DRAINING)
	f.pass()
	f.pass()
	require.Equal(t, 1, n.creates["elastic-mock-2"], "a node created for the drain's move")
	require.Equal(t, 0, f.router.beginCount("a", "primary"), "no move before its room exists")
	n.start("elastic-mock-2", 8)
	f.pass()
	require.Equal(t, 1, f.router.beginCount("a", "primary"))
	f.pass()
	require.Equal(t, "elastic-mock-2", f.nodeOf("a", "primary~1"))
	require.Equal(t, "elastic-mock-1", f.nodeOf("a", "primary"), "make before break")
	require.Len(t, n.creates, 2, "one node for the move, not one per pass")
}
