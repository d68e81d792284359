package agent

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"

	"github.com/norsk-oss/norsk-manager/proto/commonpb"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
)

// GetPlacement on a single manager (its own engine): a placed job answers
// its node, a job no node fits answers the engine's last attempt with the
// filter counts; a bad or unknown job id is refused.
func TestAgent_GetPlacement(t *testing.T) {
	ctx := context.Background()
	_, c := startAgent(t, t.TempDir())
	reg, err := c.RegisterClusterNode(ctx, &managerpb.RegisterClusterNodeRequest{NodeName: "rack-1"})
	require.NoError(t, err)
	id := reg.GetNodeId().GetNodeId()
	w := newFakeWorker(t)
	res := &commonpb.NodeResources{Capacity: 2}
	w.setResources(res)
	first, err := c.ClusterMemberRegister(ctx, &managerpb.ClusterMemberRegisterRequest{Token: reg.GetToken(), Address: "127.0.0.1", Port: w.port, Resources: res})
	require.NoError(t, err)
	w.setCredential(id, first.GetNodeCredential())
	eventually(t, "online", func() bool { return slots(t, c)[id].GetActive() })

	for _, j := range []*managerpb.Job{placedJob("fits", 1), placedJob("toobig", 5)} {
		_, err := c.CreateJob(ctx, j)
		require.NoError(t, err)
	}
	get := func(job string) (*managerpb.PlacementInfo, error) {
		return c.GetPlacement(ctx, &commonpb.JobId{JobId: job})
	}
	eventually(t, "fits placed", func() bool {
		p, err := get("fits")
		return err == nil && len(p.GetRoles()) == 1 && p.GetRoles()[0].GetNodeId() == id
	})
	p, err := get("fits")
	require.NoError(t, err)
	require.True(t, p.GetAutoPlaced())
	require.Equal(t, "primary", p.GetRoles()[0].GetRole())
	require.Nil(t, p.GetRoles()[0].GetLastAttempt())

	eventually(t, "toobig attempted", func() bool {
		p, err := get("toobig")
		return err == nil && len(p.GetRoles()) == 1
	})
	p, err = get("toobig")
	require.NoError(t, err)
	r := p.GetRoles()[0]
	require.Equal(t, "primary", r.GetRole())
	require.Empty(t, r.GetNodeId())
	a := r.GetLastAttempt()
	require.NotNil(t, a)
	require.Contains(t, a.GetReason(), "capacity exhausted on 1 node")
	require.Equal(t, uint32(1), a.GetNodesEvaluated())
	require.Len(t, a.GetFilters(), 1)
	require.Equal(t, "capacity", a.GetFilters()[0].GetFilter())
	require.Equal(t, uint32(1), a.GetFilters()[0].GetNodesRemoved())
	require.NotNil(t, a.GetSince())

	_, err = get("")
	requireCode(t, err, codes.InvalidArgument, "job_id")
	_, err = get("nosuchjob")
	requireCode(t, err, codes.NotFound, "nosuchjob")
}
