package placement

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/norsk-oss/norsk-manager/persistence"
	"github.com/norsk-oss/norsk-manager/proto/internalpb"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
)

// TestEngine_PoolDisconnect (issue 21 §10): the engine's starts carry the
// fence of the job's pool (on by default, for a pool stored without the
// setting and for a job outside any pool; off where the pool says so);
// when the node is lost, the jobs of replace-at-once pools are placed
// elsewhere at once, and those of a replace-wait pool only once their
// node is back.
func TestEngine_PoolDisconnect(t *testing.T) {
	f := newFixture(t)
	tier := &managerpb.PoolTier{Name: "any"}
	f.putPool("live", 5, 600, tier) // stored before the setting existed: defaults
	for name, d := range map[string]*managerpb.PoolDisconnect{
		"nofence": {Fence: managerpb.PoolDisconnect_FENCE_OFF, Replace: managerpb.PoolDisconnect_REPLACE_IMMEDIATELY},
		"wait":    {Fence: managerpb.PoolDisconnect_FENCE_ON, Replace: managerpb.PoolDisconnect_REPLACE_WAIT},
	} {
		f.put(persistence.PlacementPoolKey(name), &internalpb.PoolRecord{Pool: &managerpb.Pool{Name: name, Tiers: []*managerpb.PoolTier{tier},
			RestartCeiling: &managerpb.RestartCeiling{MaxFailures: 5, WindowSeconds: 600}, Disconnect: d}})
	}
	f.putNode("n1", 10, "", nil)
	pools := map[string]string{"a": "live", "b": "nofence", "c": "wait", "d": ""}
	for id, pool := range pools {
		tags := map[string]string{}
		if pool != "" {
			tags[persistence.PoolTag] = pool
		}
		f.putJob(autoJob(id, 1, tags))
	}
	f.pass()
	fenced := map[string]bool{}
	for _, c := range f.router.cmds {
		if s := c.GetStart(); s != nil {
			fenced[c.GetJobId()] = s.GetPlacement().GetFence()
		}
	}
	require.Equal(t, map[string]bool{"a": true, "b": false, "c": true, "d": true}, fenced, "fence of each start")
	for id := range pools {
		require.Equal(t, "n1", f.nodeOf(id, "primary"), "job %s", id)
	}

	f.putNode("n2", 10, "", nil)
	f.stopNode("n1") // declared lost: STOPPED, instances ended NODE_STOPPED
	f.pass()
	for _, id := range []string{"a", "b", "d"} {
		require.Equal(t, "n2", f.nodeOf(id, "primary"), "job %s of a replace-at-once pool", id)
	}
	require.Equal(t, "", f.nodeOf("c", "primary"), "the replace-wait job was placed while its node was lost")
	require.Zero(t, f.router.startCount("c", "primary")-1, "no second start of c while n1 is lost")

	f.putNode("n1", 10, "", nil) // back (STARTED), without the job
	f.pass()
	require.NotEqual(t, "", f.nodeOf("c", "primary"), "the replace-wait job is placed once its node is back")
}
