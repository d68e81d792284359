package gateway

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	"github.com/norsk-oss/norsk-manager/actors/bundle"
	"github.com/norsk-oss/norsk-manager/persistence"
	"github.com/norsk-oss/norsk-manager/proto/commonpb"
	"github.com/norsk-oss/norsk-manager/proto/internalpb"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
)

// TestServer_GetBundle_Placement: GetBundle (and ListBundles) show per
// derived job the node of its role, the degraded domains and their state
// from the instance's placement note, the recorded failure of a job
// not placed, and whether the instance runs a stale definition.
func TestServer_GetBundle_Placement(t *testing.T) {
	store, log := persistence.TestStore(t)
	put := func(k persistence.EntityKey, rec proto.Message) {
		seq, err := store.Seq(k)
		require.NoError(t, err)
		b, err := proto.Marshal(rec)
		require.NoError(t, err)
		_, err = log.Append(context.Background(), k, seq, persistence.Change{Record: b})
		require.NoError(t, err)
	}
	b := &managerpb.Bundle{BundleId: &managerpb.BundleId{BundleId: "bd"}, State: managerpb.BundleState_BUNDLE_STATE_LIVE,
		Jobs:             []*managerpb.BundleJobSpec{{JobName: "web"}, {JobName: "enc"}},
		ResiliencePolicy: &managerpb.ResiliencePolicy{SameAz: managerpb.AntiAffinity_ANTI_AFFINITY_FORBID}}
	put(persistence.BundleKey("bd"), &internalpb.BundleRecord{Bundle: b, Generation: 1, Jobs: bundle.Expand(b, 1)})
	job := func(id string) *internalpb.JobRecord {
		return &internalpb.JobRecord{Job: &managerpb.JobWithHistory{Job: &managerpb.Job{JobId: &commonpb.JobId{JobId: id}}}}
	}
	web0 := job("bd.0.web")
	// web0's instance runs an older definition (run hash 99 is not its
	// current one's); web1's is unknown (recorded before the field).
	web0.Job.Job.CurrentHash = 2
	web0.Instances = []*internalpb.Instance{{Role: "primary", NodeId: "a1", DefinitionHash: 1, RunHash: 99}}
	put(persistence.JobKey("bd.0.web"), web0)
	web1 := job("bd.1.web")
	web1.Instances = []*internalpb.Instance{{Role: "backup", NodeId: "a2", Placement: &internalpb.PlacementNote{
		DegradedAtPlacement: []string{"zone"}, Degraded: []string{"zone"}, Degradation: managerpb.PlacementDegraded_DEGRADED}}}
	put(persistence.JobKey("bd.1.web"), web1)
	enc1 := job("bd.1.enc")
	enc1.PlacementFailures = []*internalpb.PlacementFailureRecord{{Role: "backup", Attempt: &managerpb.PlacementAttempt{Reason: "fits no node"}}}
	put(persistence.JobKey("bd.1.enc"), enc1)
	// bd.0.enc has no record yet.

	s := New(Config{Store: store})
	info, err := s.GetBundle(context.Background(), &managerpb.BundleId{BundleId: "bd"})
	require.NoError(t, err)
	byID := map[string]*managerpb.BundleJobStatus{}
	for _, js := range info.GetJobs() {
		byID[js.GetJobId().GetJobId()] = js
	}
	require.Equal(t, "a1", byID["bd.0.web"].GetNodeId())
	require.Empty(t, byID["bd.0.web"].GetDegradedDomains())
	require.Equal(t, "a2", byID["bd.1.web"].GetNodeId())
	require.Equal(t, []string{"zone"}, byID["bd.1.web"].GetDegradedDomains())
	require.Equal(t, managerpb.PlacementDegraded_DEGRADED, byID["bd.1.web"].GetDegradation())
	require.Equal(t, "fits no node", byID["bd.1.enc"].GetLastAttempt().GetReason())
	require.True(t, byID["bd.0.web"].GetDefinitionStale())
	require.False(t, byID["bd.1.web"].GetDefinitionStale())
	require.Empty(t, byID["bd.0.enc"].GetNodeId())

	list, err := s.ListBundles(context.Background(), &managerpb.ListBundlesRequest{})
	require.NoError(t, err)
	require.Len(t, list.GetBundles(), 1)
	require.True(t, proto.Equal(info, list.GetBundles()[0]))
}
