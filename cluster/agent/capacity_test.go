package agent

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	"github.com/norsk-oss/norsk-manager/proto/commonpb"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
)

func nodeInfo(t *testing.T, c managerpb.ManagerClient, id string) *managerpb.NodeInfo {
	t.Helper()
	r, err := c.ListNodes(context.Background(), &managerpb.ListNodesRequest{})
	require.NoError(t, err)
	for _, n := range r.GetNodes() {
		if n.GetMetadata().GetNodeId().GetNodeId() == id {
			return n
		}
	}
	t.Fatalf("node %s not listed", id)
	return nil
}

// placedJob is a job whose auto_placement requires capacity units
// (manual when capacity < 0).
func placedJob(id string, capacity float64) *managerpb.Job {
	j := &managerpb.Job{JobId: &commonpb.JobId{JobId: id}, Services: oneService()}
	if capacity >= 0 {
		j.AutoPlacement = &managerpb.AutoPlacement{Requirements: &managerpb.JobRequirements{RequiredCapacity: capacity}}
	}
	return j
}

// TestNodeResources_RegistrationHelloAndListNodes: what a worker reports
// at registration is stored with its node and shown by ListNodes with the
// zone (the worker's, else the slot's zone tag), the cloud, and the units
// its job instances take; every hello replaces it; an invalid report is
// refused at registration and changes nothing.
func TestNodeResources_RegistrationHelloAndListNodes(t *testing.T) {
	ctx := context.Background()
	_, c := startAgent(t, t.TempDir())
	reg, err := c.RegisterClusterNode(ctx, &managerpb.RegisterClusterNodeRequest{NodeName: "rack-1", Tags: map[string]string{"zone": "from-tag"}})
	require.NoError(t, err)
	id := reg.GetNodeId().GetNodeId()
	require.Nil(t, nodeInfo(t, c, id).GetResources(), "no worker yet: capacity unknown")

	w := newFakeWorker(t)
	res := &commonpb.NodeResources{Capacity: 4, GpuCapacity: 1, GpuModel: "nvidia-l4", Capabilities: map[string]string{"nvenc": "true"}}
	w.setResources(res)
	_, err = c.ClusterMemberRegister(ctx, &managerpb.ClusterMemberRegisterRequest{Token: reg.GetToken(), Address: "127.0.0.1", Port: w.port,
		Resources: &commonpb.NodeResources{Capacity: 0}})
	requireCode(t, err, codes.InvalidArgument, "resources.capacity", "greater than 0")
	require.False(t, slots(t, c)[id].GetTokenUsed(), "a refused registration binds nothing")

	first, err := c.ClusterMemberRegister(ctx, &managerpb.ClusterMemberRegisterRequest{Token: reg.GetToken(), Address: "127.0.0.1", Port: w.port, Resources: res})
	require.NoError(t, err)
	w.setCredential(id, first.GetNodeCredential())
	eventually(t, "online", func() bool { return slots(t, c)[id].GetActive() })
	n := nodeInfo(t, c, id)
	require.True(t, proto.Equal(res, n.GetResources()), "resources %v", n.GetResources())
	require.Equal(t, "from-tag", n.GetZone(), "no --zone: the slot's zone tag")
	require.Equal(t, managerpb.Cloud_CLOUD_CLUSTER, n.GetCloud())
	require.Equal(t, 4.0, n.GetFreeCapacity())

	// Two instances of an auto-placed job (1.5 each), one of another
	// (0.25 and 0.5 GPU) and a manual job (no requirements: 0).
	b := placedJob("b", 0.25)
	b.AutoPlacement.Requirements.RequiredGpuCapacity = &commonpb.OptionalFloat{Value: 0.5}
	for _, j := range []*managerpb.Job{placedJob("a", 1.5), b, placedJob("manual", -1)} {
		_, err := c.CreateJob(ctx, j)
		require.NoError(t, err)
	}
	// The placement engine starts the auto-placed jobs' primaries on the
	// only node; the rest are started by hand.
	for _, s := range []struct{ job, role string }{{"a", "backup"}, {"manual", "primary"}} {
		_, err := c.StartJob(ctx, &managerpb.StartJobRequest{JobId: &commonpb.JobId{JobId: s.job}, Role: s.role, NodeId: &commonpb.NodeId{NodeId: id}})
		require.NoError(t, err)
	}
	eventually(t, "the engine placed both primaries", func() bool { return nodeInfo(t, c, id).GetAllocatedCapacity() == 3.25 })
	n = nodeInfo(t, c, id)
	require.Equal(t, 3.25, n.GetAllocatedCapacity())
	require.Equal(t, 0.75, n.GetFreeCapacity())
	require.Equal(t, 0.5, n.GetAllocatedGpuCapacity())
	require.Equal(t, 0.5, n.GetFreeGpuCapacity())

	// The worker restarts with other flags and registers again without
	// resources (as an older worker would): the stored value stays until
	// the new session's hello replaces it.
	res2 := &commonpb.NodeResources{Capacity: 8, Zone: "z2"}
	w.setResources(res2)
	_, err = c.ClusterMemberRegister(ctx, &managerpb.ClusterMemberRegisterRequest{NodeCredential: first.GetNodeCredential(), Address: "127.0.0.1", Port: w.port})
	require.NoError(t, err)
	eventually(t, "hello replaced the resources", func() bool { return proto.Equal(res2, nodeInfo(t, c, id).GetResources()) })
	n = nodeInfo(t, c, id)
	require.Equal(t, "z2", n.GetZone(), "the worker's --zone wins over the tag")
	require.Equal(t, 8-3.25, n.GetFreeCapacity())
	require.Equal(t, -0.5, n.GetFreeGpuCapacity(), "overcommitted: the new flags offer no GPU")

	// A hello without resources keeps them; one with invalid resources is
	// ignored (the session still comes up).
	for _, r := range []*commonpb.NodeResources{nil, {Capacity: -1}} {
		w.setResources(r)
		sessions := w.sessionCount()
		_, err = c.ClusterMemberRegister(ctx, &managerpb.ClusterMemberRegisterRequest{NodeCredential: first.GetNodeCredential(), Address: "127.0.0.1", Port: w.port})
		require.NoError(t, err)
		eventually(t, "a new session", func() bool { return w.sessionCount() > sessions && slots(t, c)[id].GetActive() })
		require.True(t, proto.Equal(res2, nodeInfo(t, c, id).GetResources()), "hello with %v: %v", r, nodeInfo(t, c, id).GetResources())
	}

	// Stopping an instance frees its units.
	_, err = c.StopJob(ctx, &managerpb.StopJobRequest{JobId: &commonpb.JobId{JobId: "a"}, Role: "backup", NodeId: &commonpb.NodeId{NodeId: id}})
	require.NoError(t, err)
	eventually(t, "the backup's units freed", func() bool { return nodeInfo(t, c, id).GetAllocatedCapacity() == 1.75 })
}
