package persistence

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	"github.com/norsk-oss/norsk-manager/proto/commonpb"
	"github.com/norsk-oss/norsk-manager/proto/internalpb"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
)

// placedJob is a job record requiring capacity and gpu units (none when
// both are negative: not auto-placed) with an instance per role→node.
func placedJob(t *testing.T, id string, capacity, gpu float64, roles map[string]string) []byte {
	t.Helper()
	job := &managerpb.Job{JobId: &commonpb.JobId{JobId: id}}
	if capacity >= 0 {
		req := &managerpb.JobRequirements{RequiredCapacity: capacity}
		if gpu > 0 {
			req.RequiredGpuCapacity = &commonpb.OptionalFloat{Value: float32(gpu)}
		}
		job.AutoPlacement = &managerpb.AutoPlacement{Requirements: req}
	}
	rec := &internalpb.JobRecord{Job: &managerpb.JobWithHistory{Job: job}}
	for _, role := range []string{"backup", "primary"} { // sorted by role
		if node, ok := roles[role]; ok {
			rec.Instances = append(rec.Instances, &internalpb.Instance{Role: role, NodeId: node, Status: internalpb.InstanceStatus_INSTANCE_RUNNING})
		}
	}
	b, err := proto.Marshal(rec)
	require.NoError(t, err)
	return b
}

func TestReader_NodeAllocations(t *testing.T) {
	ctx := context.Background()
	store, log := TestStore(t)
	put := func(id string, seq Seq, rec []byte) {
		t.Helper()
		_, err := log.Append(ctx, JobKey(id), seq, Change{Record: rec})
		require.NoError(t, err)
	}
	put("a", 0, placedJob(t, "a", 1.5, 0, map[string]string{"primary": "n1"}))
	put("b", 0, placedJob(t, "b", 2, 1, map[string]string{"primary": "n1", "backup": "n2"}))
	put("manual", 0, placedJob(t, "manual", -1, -1, map[string]string{"primary": "n1"}))
	put("unplaced", 0, placedJob(t, "unplaced", 8, 0, nil))
	// Moving a job's instance moves its units: n3 loses them.
	put("c", 0, placedJob(t, "c", 0.5, 0, map[string]string{"primary": "n3"}))
	put("c", 1, placedJob(t, "c", 0.5, 0, map[string]string{"primary": "n2"}))

	var got map[string]Allocation
	require.NoError(t, store.View(func(r *Reader) error {
		var err error
		got, err = r.NodeAllocations()
		return err
	}))
	require.Equal(t, map[string]Allocation{
		"n1": {Capacity: 3.5, GPUCapacity: 1, Instances: 3},
		"n2": {Capacity: 2.5, GPUCapacity: 1, Instances: 2},
	}, got)

	// Deleting a job frees what it took.
	_, err := log.Append(ctx, JobKey("b"), 1, Change{Delete: true})
	require.NoError(t, err)
	require.NoError(t, store.View(func(r *Reader) error {
		var err error
		got, err = r.NodeAllocations()
		return err
	}))
	require.Equal(t, map[string]Allocation{"n1": {Capacity: 1.5, Instances: 2}, "n2": {Capacity: 0.5, Instances: 1}}, got)
}

// The cores pinned to a node's instances (Instance.cpu_list) are listed
// per node, ascending, once each; another node's pins do not count.
func TestReader_NodeAllocations_PinnedCores(t *testing.T) {
	ctx := context.Background()
	store, log := TestStore(t)
	rec := &internalpb.JobRecord{Job: &managerpb.JobWithHistory{Job: &managerpb.Job{JobId: &commonpb.JobId{JobId: "p"}}},
		Instances: []*internalpb.Instance{
			{Role: "backup", NodeId: "n2", CpuList: []uint32{0, 1}},
			{Role: "primary", NodeId: "n1", CpuList: []uint32{5, 4}},
		}}
	other := &internalpb.JobRecord{Job: &managerpb.JobWithHistory{Job: &managerpb.Job{JobId: &commonpb.JobId{JobId: "q"}}},
		Instances: []*internalpb.Instance{{Role: "primary", NodeId: "n1", CpuList: []uint32{2}}}}
	for _, r := range []*internalpb.JobRecord{rec, other} {
		b, err := proto.Marshal(r)
		require.NoError(t, err)
		_, err = log.Append(ctx, JobKey(r.GetJob().GetJob().GetJobId().GetJobId()), 0, Change{Record: b})
		require.NoError(t, err)
	}
	var got map[string]Allocation
	require.NoError(t, store.View(func(r *Reader) error {
		var err error
		got, err = r.NodeAllocations()
		return err
	}))
	require.Equal(t, []uint32{2, 4, 5}, got["n1"].PinnedCores)
	require.Equal(t, []uint32{0, 1}, got["n2"].PinnedCores)
}
