package agent

import (
	"context"
	"io"
	"sort"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"

	"github.com/norsk-oss/norsk-manager/client"
	"github.com/norsk-oss/norsk-manager/proto/commonpb"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
)

// searchByTag returns the ids of the jobs whose tag key equals value.
func searchByTag(t *testing.T, c managerpb.ManagerClient, key, value string) []string {
	t.Helper()
	s, err := c.JobSearch(context.Background(), &managerpb.JobSearchRequest{JobFilter: []*managerpb.JobFilter{client.TagEq(key, value)}})
	require.NoError(t, err)
	var ids []string
	for {
		cj, err := s.Recv()
		if err == io.EOF {
			break
		}
		require.NoError(t, err)
		ids = append(ids, cj.GetJob().GetJobId().GetJobId())
	}
	sort.Strings(ids)
	return ids
}

func jobTags(t *testing.T, c managerpb.ManagerClient, id string) map[string]string {
	t.Helper()
	r, err := c.JobById(context.Background(), &commonpb.JobId{JobId: id})
	require.NoError(t, err)
	return r.GetJob().GetJob().GetTags()
}

func bundleSpec(name, mode string) *managerpb.BundleJobSpec {
	return &managerpb.BundleJobSpec{JobName: name, StartMode: mode,
		Job: &managerpb.Job{Description: name, Tags: map[string]string{"app": "live"}}}
}

func TestAgent_BundleLifecycle(t *testing.T) {
	ctx := context.Background()
	_, c := startAgent(t, t.TempDir())
	ch, _ := collect(t, c, &managerpb.EventStreamRequest{})
	require.Equal(t, "initial_data_complete", eventKind(nextOf(t, ch)))

	// Bad input changes nothing.
	for _, bad := range []*managerpb.Bundle{
		{BundleId: &managerpb.BundleId{BundleId: "b1"}},
		{BundleId: &managerpb.BundleId{BundleId: "b1"}, Jobs: []*managerpb.BundleJobSpec{bundleSpec("enc", "sometimes")}},
		{BundleId: &managerpb.BundleId{BundleId: "b/1"}, Jobs: []*managerpb.BundleJobSpec{bundleSpec("enc", "")}},
		{BundleId: &managerpb.BundleId{BundleId: "b1"}, Jobs: []*managerpb.BundleJobSpec{{JobName: "enc", Job: &managerpb.Job{Tags: map[string]string{"jobName": "x"}}}}},
	} {
		_, err := c.CreateBundle(ctx, bad)
		requireCode(t, err, codes.InvalidArgument)
	}
	list, err := c.ListBundles(ctx, &managerpb.ListBundlesRequest{})
	require.NoError(t, err)
	require.Empty(t, list.GetBundles())
	require.Empty(t, searchByTag(t, c, "app", "live"))

	// Create: the derived jobs exist when it answers.
	b := &managerpb.Bundle{BundleId: &managerpb.BundleId{BundleId: "b1"}, Pool: "eu",
		ResiliencePolicy: &managerpb.ResiliencePolicy{},
		Jobs:             []*managerpb.BundleJobSpec{bundleSpec("enc", ""), bundleSpec("pkg", "manual")}}
	resp, err := c.CreateBundle(ctx, b)
	require.NoError(t, err)
	require.Equal(t, "b1", resp.GetBundleId().GetBundleId())
	require.Equal(t, []string{"b1.0.enc", "b1.0.pkg", "b1.1.enc", "b1.1.pkg"}, searchByTag(t, c, "bundleId", "b1"))
	require.Equal(t, map[string]string{"app": "live", "bundleId": "b1", "replicaIndex": "1", "jobName": "enc"}, jobTags(t, c, "b1.1.enc"))
	require.Equal(t, "true", jobTags(t, c, "b1.0.pkg")["dormant"])
	require.Equal(t, []string{"b1.0.pkg", "b1.1.pkg"}, searchByTag(t, c, "dormant", "true"))
	_, err = c.CreateBundle(ctx, b)
	requireCode(t, err, codes.AlreadyExists, "b1")
	info, err := c.GetBundle(ctx, &managerpb.BundleId{BundleId: "b1"})
	require.NoError(t, err)
	require.True(t, info.GetConverged())
	require.Len(t, info.GetJobs(), 4)

	// Manual start and stop toggle the dormant tag.
	_, err = c.StartBundleJob(ctx, &managerpb.StartBundleJobRequest{BundleId: b.BundleId, ReplicaIndex: 0, JobName: "pkg"})
	require.NoError(t, err)
	require.NotContains(t, jobTags(t, c, "b1.0.pkg"), "dormant")
	require.Equal(t, "true", jobTags(t, c, "b1.1.pkg")["dormant"], "the backup stays dormant")
	_, err = c.StopBundleJob(ctx, &managerpb.StopBundleJobRequest{BundleId: b.BundleId, ReplicaIndex: 0, JobName: "pkg"})
	require.NoError(t, err)
	require.Equal(t, "true", jobTags(t, c, "b1.0.pkg")["dormant"])
	_, err = c.StartBundleJob(ctx, &managerpb.StartBundleJobRequest{BundleId: b.BundleId, ReplicaIndex: 0, JobName: "nope"})
	requireCode(t, err, codes.NotFound, "nope")
	_, err = c.StartBundleJob(ctx, &managerpb.StartBundleJobRequest{BundleId: &managerpb.BundleId{BundleId: "b9"}, JobName: "pkg"})
	requireCode(t, err, codes.NotFound, "b9")
	_, err = c.StartBundleJob(ctx, &managerpb.StartBundleJobRequest{BundleId: b.BundleId, ReplicaIndex: 2, JobName: "pkg"})
	requireCode(t, err, codes.InvalidArgument, "replica_index")

	// Update: pkg removed (completed, then deleted), mon added.
	b.Jobs = []*managerpb.BundleJobSpec{bundleSpec("enc", ""), bundleSpec("mon", "")}
	_, err = c.UpdateBundle(ctx, b)
	require.NoError(t, err)
	require.Contains(t, searchByTag(t, c, "bundleId", "b1"), "b1.1.mon")
	eventually(t, "pkg jobs removed", func() bool {
		ids := searchByTag(t, c, "bundleId", "b1")
		return len(ids) == 4 && ids[1] == "b1.0.mon" && ids[3] == "b1.1.mon"
	})
	_, err = c.UpdateBundle(ctx, &managerpb.Bundle{BundleId: &managerpb.BundleId{BundleId: "b9"}, Jobs: b.Jobs})
	requireCode(t, err, codes.NotFound, "b9")

	// A bundle without an id gets one.
	anon, err := c.CreateBundle(ctx, &managerpb.Bundle{Jobs: []*managerpb.BundleJobSpec{bundleSpec("x", "")}})
	require.NoError(t, err)
	require.NotEmpty(t, anon.GetBundleId().GetBundleId())
	list, err = c.ListBundles(ctx, &managerpb.ListBundlesRequest{})
	require.NoError(t, err)
	require.Len(t, list.GetBundles(), 2)

	// Delete: bundle_deleted ends the saga; the jobs and the bundle are gone.
	_, err = c.DeleteBundle(ctx, b.BundleId)
	require.NoError(t, err)
	var kinds []string
	for {
		ev := nextOf(t, ch)
		kinds = append(kinds, eventKind(ev))
		if d := ev.GetBundleDeleted(); d != nil {
			require.Equal(t, "b1", d.GetBundleId().GetBundleId())
			break
		}
	}
	require.Contains(t, kinds, "bundle_updated")
	require.Contains(t, kinds, "job_deleted")
	require.Empty(t, searchByTag(t, c, "bundleId", "b1"))
	_, err = c.GetBundle(ctx, b.BundleId)
	requireCode(t, err, codes.NotFound)
	_, err = c.DeleteBundle(ctx, b.BundleId)
	requireCode(t, err, codes.NotFound)
}
