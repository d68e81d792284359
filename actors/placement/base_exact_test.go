package placement

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/norsk-oss/norsk-manager/actors/bundle"
	"github.com/norsk-oss/norsk-manager/actors/placement/scheduler"
	"github.com/norsk-oss/norsk-manager/persistence"
	"github.com/norsk-oss/norsk-manager/proto/commonpb"
	"github.com/norsk-oss/norsk-manager/proto/internalpb"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
)

// placedAuto is an auto-placed job of capacity units with a RUNNING
// primary on node.
func placedAuto(id string, capacity float64, node string) *internalpb.JobRecord {
	rec := autoJob(id, capacity, nil)
	rec.Instances = []*internalpb.Instance{{Role: "primary", NodeId: node,
		NodeMetadata: &commonpb.NodeMetadata{NodeId: &commonpb.NodeId{NodeId: node}},
		Status:       internalpb.InstanceStatus_INSTANCE_RUNNING}}
	return rec
}

// TestBase_RoomSummedInChangeOrderDecidesAsWholeRead: two nodes hold the
// same instances (0.1, 0.2 and 0.3 units each), so a whole read sums the
// same room on both and a tie in utilisation goes to the lower node id.
// The engine's base adds them as their records are written: on n1 in the
// order 0.3, 0.2, 0.1 (0.6 exactly), on n2 in 0.1, 0.2, 0.3
// (0.6000000000000001). Ranking compares utilisation exactly, so unless
// the base's room is the whole read's to the last bit, the next role goes
// to n2 where a new leader (reading whole) would put it on n1.
func TestBase_RoomSummedInChangeOrderDecidesAsWholeRead(t *testing.T) {
	f := newFixture(t)
	f.putNode("n1", 1, "z", nil)
	f.putNode("n2", 1, "z", nil)
	f.pass() // the engine's base is built: what follows arrives as changes
	for _, j := range []struct {
		id   string
		c    float64
		node string
	}{{"a3", 0.3, "n1"}, {"a2", 0.2, "n1"}, {"a1", 0.1, "n1"}, {"b1", 0.1, "n2"}, {"b2", 0.2, "n2"}, {"b3", 0.3, "n2"}} {
		f.putJob(placedAuto(j.id, j.c, j.node))
	}
	f.pass()
	f.putJob(autoJob("x", 0.1, nil))

	// What a whole read decides: a fresh base.
	whole := newBase()
	require.NoError(t, whole.update(f.store.World(), f.now))
	ask := f.eng.askOf(whole.world(f.now), &whole.world(f.now).candidates[0], nil)
	d, err := whole.view.Select(ask)
	require.NoError(t, err)
	require.Equal(t, "n1", string(d.Node), "a whole read breaks the tie by node id")

	f.pass()
	require.Equal(t, string(d.Node), f.nodeOf("x", "primary"), "the engine's base decides as a whole read")
}

// TestBase_OverlappingPinsFreedAsWholeRead: two instances on one node pin
// the same core (records that overlap: a job started by hand with a
// cpu_list, a node that re-registered with other cores). When one of them
// ends, a whole read still sees the core pinned by the other; so must the
// engine's base, which removes the ended instance from its view.
func TestBase_OverlappingPinsFreedAsWholeRead(t *testing.T) {
	f := newFixture(t)
	f.put(persistence.NodeKey("n1"), &internalpb.NodeRecord{NodeId: "n1", Provider: managerpb.NodeProvider_NODE_PROVIDER_CLUSTER,
		State:     managerpb.NodeLifecycle_NODE_LIFECYCLE_STARTED,
		Metadata:  &commonpb.NodeMetadata{NodeId: &commonpb.NodeId{NodeId: "n1"}},
		Resources: &commonpb.NodeResources{Capacity: 4, Cores: []uint32{0, 1}}})
	inc := newBase()
	require.NoError(t, inc.update(f.store.World(), f.now))
	for _, id := range []string{"a", "b"} {
		rec := placedAuto(id, 1, "n1")
		rec.Instances[0].CpuList = []uint32{0}
		f.putJob(rec)
	}
	require.NoError(t, inc.update(f.store.World(), f.now))
	f.endInstance(f.job("a"), "primary", managerpb.JobHistoryJobStopping_JOB_STOPPED_USER_REQUESTED, "")
	require.NoError(t, inc.update(f.store.World(), f.now))

	whole := newBase()
	require.NoError(t, whole.update(f.store.World(), f.now))
	_, _, want, _ := whole.view.Free("n1")
	require.Equal(t, 1, want, "b still pins core 0")
	_, _, got, _ := inc.view.Free("n1")
	require.Equal(t, want, got, "free cores in the engine's base")
}

// TestBase_RoleRecordedTwiceFreedAsWholeRead: a job record that shows one
// role twice (a fault the engine reports) holds the room of both
// instances; once the record is put right, a whole read holds one, and so
// must the engine's base (its view forgets only the latest of two adds of
// one role).
func TestBase_RoleRecordedTwiceFreedAsWholeRead(t *testing.T) {
	f := newFixture(t)
	f.putNode("n1", 4, "z", nil)
	f.putNode("n2", 4, "z", nil)
	inc := newBase()
	require.NoError(t, inc.update(f.store.World(), f.now))
	rec := placedAuto("a", 1, "n1")
	rec.Instances = append(rec.Instances, placedAuto("a", 1, "n2").Instances[0])
	f.putJob(rec)
	require.NoError(t, inc.update(f.store.World(), f.now))
	rec = f.job("a")
	rec.Instances = rec.Instances[:1]
	f.putJob(rec)
	require.NoError(t, inc.update(f.store.World(), f.now))

	whole := newBase()
	require.NoError(t, whole.update(f.store.World(), f.now))
	for _, n := range []scheduler.NodeID{"n1", "n2"} {
		want, _, _, _ := whole.view.Free(n)
		got, _, _, _ := inc.view.Free(n)
		require.Equal(t, want, got, "free units on %s", n)
	}
}

// TestBase_ForgetsBundlesNoJobReads: the base caches the bundle records
// its parts read; once no part reads one (its jobs deleted after its
// record, as a bundle delete does), the cache forgets it, so a long term
// holds the live bundles only.
func TestBase_ForgetsBundlesNoJobReads(t *testing.T) {
	f := newFixture(t)
	f.putNode("n1", 4, "z", nil)
	inc := newBase()
	require.NoError(t, inc.update(f.store.World(), f.now))
	b := &managerpb.Bundle{BundleId: &managerpb.BundleId{BundleId: "b"},
		Jobs: []*managerpb.BundleJobSpec{{JobName: "enc", Job: autoJob("x", 1, nil).GetJob().GetJob()}}}
	f.putBundle(b, nil)
	require.NoError(t, inc.update(f.store.World(), f.now))
	require.Contains(t, inc.bundles, "b")
	del := func(k persistence.EntityKey) {
		seq, err := f.store.Seq(k)
		require.NoError(t, err)
		_, err = f.log.Append(t.Context(), k, seq, persistence.Change{Delete: true})
		require.NoError(t, err)
		require.NoError(t, inc.update(f.store.World(), f.now))
	}
	del(persistence.BundleKey("b"))
	del(persistence.JobKey(bundle.JobID("b", 0, "enc")))
	require.Empty(t, inc.bundles)
	require.Empty(t, inc.bundleJobs)
}
