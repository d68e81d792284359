package gateway

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	"github.com/norsk-oss/norsk-manager/persistence"
	"github.com/norsk-oss/norsk-manager/proto/commonpb"
	"github.com/norsk-oss/norsk-manager/proto/internalpb"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
)

// TestServer_MigrateAndAbort_Validation: bad input is refused naming the
// field, before any grain is asked; a target node that is unknown or takes
// no placements is FailedPrecondition naming target_node_id; an operator's
// StartJob of a move's role is InvalidArgument.
func TestServer_MigrateAndAbort_Validation(t *testing.T) {
	store, log := persistence.TestStore(t)
	putNode := func(id string, st managerpb.NodeLifecycle, sched managerpb.NodeScheduling) {
		b, err := proto.Marshal(&internalpb.NodeRecord{NodeId: id, State: st, Scheduling: &managerpb.NodeSchedulingState{State: sched}})
		require.NoError(t, err)
		_, err = log.Append(context.Background(), persistence.NodeKey(id), 0, persistence.Change{Record: b})
		require.NoError(t, err)
	}
	putNode("stopped", managerpb.NodeLifecycle_NODE_LIFECYCLE_STOPPED, managerpb.NodeScheduling_NODE_SCHEDULING_ELIGIBLE)
	putNode("cordoned", managerpb.NodeLifecycle_NODE_LIFECYCLE_STARTED, managerpb.NodeScheduling_NODE_SCHEDULING_CORDONED)
	putNode("draining", managerpb.NodeLifecycle_NODE_LIFECYCLE_STARTED, managerpb.NodeScheduling_NODE_SCHEDULING_DRAINING)
	router := &countingRouter{}
	s := New(Config{Store: store, Router: router})
	ctx := context.Background()
	job := &commonpb.JobId{JobId: "j"}
	migrate := func(role, node string) error {
		_, err := s.MigrateJob(ctx, &managerpb.MigrateJobRequest{JobId: job, Role: role, TargetNodeId: node})
		return err
	}
	for _, tc := range []struct {
		name       string
		err        error
		code       codes.Code
		field      string
		wantGrains int
	}{
		{"empty role", migrate("", "any"), codes.InvalidArgument, "role", 0},
		{"bad node id", migrate("primary", "a/b"), codes.InvalidArgument, "target_node_id", 0},
		{"unknown node", migrate("primary", "n9"), codes.FailedPrecondition, "target_node_id: node \"n9\" is not known", 0},
		{"stopped node", migrate("primary", "stopped"), codes.FailedPrecondition, "not started", 0},
		{"cordoned node", migrate("primary", "cordoned"), codes.FailedPrecondition, "cordoned", 0},
		{"draining node", migrate("primary", "draining"), codes.FailedPrecondition, "draining", 0},
		{"start of a move's role", func() error {
			_, err := s.StartJob(ctx, &managerpb.StartJobRequest{JobId: job, Role: "primary~1", NodeId: &commonpb.NodeId{NodeId: "n"}})
			return err
		}(), codes.InvalidArgument, "role", 0},
		{"abort: target not a move of the source", func() error {
			_, err := s.AbortMigration(ctx, &managerpb.AbortMigrationRequest{JobId: job, SourceRole: "primary", TargetRole: "backup~1"})
			return err
		}(), codes.InvalidArgument, "target_role", 0},
		{"abort: empty source", func() error {
			_, err := s.AbortMigration(ctx, &managerpb.AbortMigrationRequest{JobId: job, TargetRole: "primary~1"})
			return err
		}(), codes.InvalidArgument, "source_role", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			requireCode(t, tc.err, tc.code, tc.field)
		})
	}
	require.Zero(t, router.calls.Load(), "no grain asked for a refused request")
	// "any" and a good request reach the grain.
	_ = migrate("primary", "any")
	_, _ = s.AbortMigration(ctx, &managerpb.AbortMigrationRequest{JobId: job, SourceRole: "primary", TargetRole: "primary~1"})
	require.EqualValues(t, 2, router.calls.Load())
}

// TestServer_GetPlacement_MovedRole: a role that runs as "primary~2" after
// two moves is placed "primary" for GetPlacement: its recorded failure of
// the logical role is not shown as unplaced.
func TestServer_GetPlacement_MovedRole(t *testing.T) {
	store, log := persistence.TestStore(t)
	rec := &internalpb.JobRecord{Job: &managerpb.JobWithHistory{Job: &managerpb.Job{JobId: &commonpb.JobId{JobId: "j"}, AutoPlacement: &managerpb.AutoPlacement{}}},
		Instances:         []*internalpb.Instance{{Role: "primary~2", NodeId: "n1"}},
		PlacementFailures: []*internalpb.PlacementFailureRecord{{Role: "primary", Attempt: &managerpb.PlacementAttempt{Reason: "old"}}}}
	b, err := proto.Marshal(rec)
	require.NoError(t, err)
	_, err = log.Append(context.Background(), persistence.JobKey("j"), 0, persistence.Change{Record: b})
	require.NoError(t, err)
	s := New(Config{Store: store, Placement: func() PlacementExplainer { return nil }})
	p, err := s.GetPlacement(context.Background(), &commonpb.JobId{JobId: "j"})
	require.NoError(t, err)
	require.Len(t, p.GetRoles(), 1, "%v", p.GetRoles())
	require.Equal(t, "primary~2", p.GetRoles()[0].GetRole())
	require.Equal(t, "n1", p.GetRoles()[0].GetNodeId())
}
