package gateway

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/norsk-oss/norsk-manager/persistence"
	"github.com/norsk-oss/norsk-manager/proto/commonpb"
	"github.com/norsk-oss/norsk-manager/proto/internalpb"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
)

// TestServer_GetPlacement_Follower: a manager that runs no placement
// engine answers a placed job from its replica and refuses a job not
// placed with FailedPrecondition naming the leader.
func TestServer_GetPlacement_Follower(t *testing.T) {
	store, log := persistence.TestStore(t)
	put := func(rec *internalpb.JobRecord) {
		k := persistence.JobKey(rec.GetJob().GetJob().GetJobId().GetJobId())
		seq, err := store.Seq(k)
		require.NoError(t, err)
		b, err := proto.Marshal(rec)
		require.NoError(t, err)
		_, err = log.Append(context.Background(), k, seq, persistence.Change{Record: b})
		require.NoError(t, err)
	}
	job := func(id string) *internalpb.JobRecord {
		return &internalpb.JobRecord{Job: &managerpb.JobWithHistory{Job: &managerpb.Job{
			JobId: &commonpb.JobId{JobId: id}, State: managerpb.Job_ACTIVE, AutoPlacement: &managerpb.AutoPlacement{}}}}
	}
	placed := job("placed")
	placed.Instances = []*internalpb.Instance{{Role: "primary", NodeId: "n1"}}
	put(placed)
	put(job("waiting"))
	cases := []struct {
		name, job, leader string
		want              codes.Code
		msg               string
	}{
		{"placed", "placed", "m1", codes.OK, ""},
		{"not placed, leader known", "waiting", "m1", codes.FailedPrecondition, "ask the leader, manager m1"},
		{"not placed, no leader", "waiting", "", codes.FailedPrecondition, "no leader known"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := New(Config{Store: store, Placement: func() PlacementExplainer { return nil }, Leader: func() string { return tc.leader }})
			p, err := s.GetPlacement(context.Background(), &commonpb.JobId{JobId: tc.job})
			require.Equal(t, tc.want, status.Code(err), "error %v", err)
			if tc.want != codes.OK {
				require.True(t, strings.Contains(status.Convert(err).Message(), tc.msg), "message %q", status.Convert(err).Message())
				return
			}
			require.Len(t, p.GetRoles(), 1)
			require.Equal(t, "n1", p.GetRoles()[0].GetNodeId())
			require.Empty(t, p.GetRoles()[0].GetTier(), "no engine here: the tier is not known")
		})
	}
}
