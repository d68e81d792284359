package gateway

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	"github.com/norsk-oss/norsk-manager/actors/bundle"
	"github.com/norsk-oss/norsk-manager/persistence"
	"github.com/norsk-oss/norsk-manager/proto/commonpb"
	"github.com/norsk-oss/norsk-manager/proto/internalpb"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
)

// TestServer_MigrateJob_DormantJob: a move of a dormant bundle job (a
// standby whose instance the engine is stopping) is FailedPrecondition
// naming job_id, before any grain is asked: it would start a target the
// engine stops again.
func TestServer_MigrateJob_DormantJob(t *testing.T) {
	store, log := persistence.TestStore(t)
	put := func(k persistence.EntityKey, m proto.Message) {
		b, err := proto.Marshal(m)
		require.NoError(t, err)
		_, err = log.Append(context.Background(), k, 0, persistence.Change{Record: b})
		require.NoError(t, err)
	}
	for _, id := range []string{"a", "b"} {
		put(persistence.NodeKey(id), &internalpb.NodeRecord{NodeId: id, State: managerpb.NodeLifecycle_NODE_LIFECYCLE_STARTED,
			Resources: &commonpb.NodeResources{Capacity: 10}})
	}
	put(persistence.JobKey("j"), &internalpb.JobRecord{
		Job: &managerpb.JobWithHistory{Job: &managerpb.Job{JobId: &commonpb.JobId{JobId: "j"}, State: managerpb.Job_ACTIVE,
			Tags:          map[string]string{bundle.TagDormant: "true"},
			AutoPlacement: &managerpb.AutoPlacement{Requirements: &managerpb.JobRequirements{RequiredCapacity: 1}}}},
		Instances: []*internalpb.Instance{{Role: "primary", NodeId: "a", Status: internalpb.InstanceStatus_INSTANCE_RUNNING}},
	})
	router := &countingRouter{}
	s := New(Config{Store: store, Router: router})
	_, err := s.MigrateJob(context.Background(), &managerpb.MigrateJobRequest{JobId: &commonpb.JobId{JobId: "j"}, Role: "primary", TargetNodeId: "b"})
	requireCode(t, err, codes.FailedPrecondition, "job_id: ")
	require.Contains(t, err.Error(), "dormant")
	require.Zero(t, router.calls.Load(), "nothing recorded")
}
