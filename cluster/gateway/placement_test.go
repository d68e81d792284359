package gateway

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	"github.com/norsk-oss/norsk-manager/actors/placement"
	"github.com/norsk-oss/norsk-manager/persistence"
	"github.com/norsk-oss/norsk-manager/proto/commonpb"
	"github.com/norsk-oss/norsk-manager/proto/internalpb"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
)

// TestServer_GetPlacement_Follower: a manager that runs no placement
// engine answers from its replica: a placed job with the node, pool, tier
// and degradation of the engine's note on the instance; a job not placed
// with the failure the engine recorded on the job (a cleared one is not
// shown); a job with neither with no roles.
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
	attempt := &managerpb.PlacementAttempt{Reason: "job waiting role primary fits no node: 2 nodes evaluated: capacity exhausted on 2 nodes (needs 3 units)",
		NodesEvaluated: 2, Filters: []*managerpb.PlacementFilterCount{{Filter: "capacity", NodesRemoved: 2, Detail: "capacity exhausted on 2 nodes (needs 3 units)"}}}
	placed := job("placed")
	placed.Instances = []*internalpb.Instance{{Role: "backup", NodeId: "n1", Placement: &internalpb.PlacementNote{Pool: "p", Tier: "cheap",
		DegradedAtPlacement: []string{"zone"}, Degraded: []string{"zone"}, Degradation: managerpb.PlacementDegraded_FIX_AVAILABLE}}}
	placed.PlacementFailures = []*internalpb.PlacementFailureRecord{{Role: "backup", Attempt: attempt, Cleared: true}}
	put(placed)
	waiting := job("waiting")
	waiting.PlacementFailures = []*internalpb.PlacementFailureRecord{{Role: "primary", Attempt: attempt}}
	put(waiting)
	put(job("new"))
	s := New(Config{Store: store, Placement: func() PlacementExplainer { return nil }})
	get := func(id string) *managerpb.PlacementInfo {
		p, err := s.GetPlacement(context.Background(), &commonpb.JobId{JobId: id})
		require.NoError(t, err)
		return p
	}

	p := get("placed")
	require.Len(t, p.GetRoles(), 1)
	r := p.GetRoles()[0]
	require.Equal(t, "n1", r.GetNodeId())
	require.Equal(t, "p", r.GetPool())
	require.Equal(t, "cheap", r.GetTier())
	require.Equal(t, []string{"zone"}, r.GetDegradedDomains())
	require.Equal(t, managerpb.PlacementDegraded_FIX_AVAILABLE, r.GetDegradation())
	require.Nil(t, r.GetLastAttempt())

	p = get("waiting")
	require.Len(t, p.GetRoles(), 1)
	require.Empty(t, p.GetRoles()[0].GetNodeId())
	require.True(t, proto.Equal(attempt, p.GetRoles()[0].GetLastAttempt()), "got %v", p.GetRoles()[0].GetLastAttempt())

	require.Empty(t, get("new").GetRoles(), "no attempt recorded yet")
}

// stubExplainer is an engine's memory for GetPlacement tests.
type stubExplainer map[string][]placement.RoleExplanation

func (s stubExplainer) Explain(job string) []placement.RoleExplanation { return s[job] }

// TestServer_GetPlacement_LeaderMemoryWins: on the leader the engine's
// last failure (fresher than the rate-limited record) is answered.
func TestServer_GetPlacement_LeaderMemoryWins(t *testing.T) {
	store, log := persistence.TestStore(t)
	rec := &internalpb.JobRecord{Job: &managerpb.JobWithHistory{Job: &managerpb.Job{
		JobId: &commonpb.JobId{JobId: "j"}, State: managerpb.Job_ACTIVE, AutoPlacement: &managerpb.AutoPlacement{}}},
		PlacementFailures: []*internalpb.PlacementFailureRecord{{Role: "primary", Attempt: &managerpb.PlacementAttempt{Reason: "older"}}}}
	b, err := proto.Marshal(rec)
	require.NoError(t, err)
	_, err = log.Append(context.Background(), persistence.JobKey("j"), 0, persistence.Change{Record: b})
	require.NoError(t, err)
	eng := stubExplainer{"j": {{Role: "primary", Failure: &placement.Unplaced{Reason: "newer"}}}}
	s := New(Config{Store: store, Placement: func() PlacementExplainer { return eng }})
	p, err := s.GetPlacement(context.Background(), &commonpb.JobId{JobId: "j"})
	require.NoError(t, err)
	require.Len(t, p.GetRoles(), 1)
	require.Equal(t, "newer", p.GetRoles()[0].GetLastAttempt().GetReason())
}
