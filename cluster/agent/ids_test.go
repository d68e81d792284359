package agent

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	"github.com/norsk-oss/norsk-manager/persistence"
	"github.com/norsk-oss/norsk-manager/proto/commonpb"
	"github.com/norsk-oss/norsk-manager/proto/internalpb"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
)

// TestAgent_NewIDsFollowTheIDRule: CreateJob and CreateMockNode refuse an
// id outside [A-Za-z0-9][A-Za-z0-9._-]{0,199} with InvalidArgument naming
// the field, and write nothing (issue 10 §6: "bad id!" was accepted).
func TestAgent_NewIDsFollowTheIDRule(t *testing.T) {
	ctx := context.Background()
	a, c := startAgent(t, t.TempDir())
	_, head := a.Store().EventBounds()
	for _, id := range []string{"bad id!", "a:b", "-x", "ünïcode", "tab\tid"} {
		_, err := c.CreateJob(ctx, &managerpb.Job{JobId: &commonpb.JobId{JobId: id}})
		requireCode(t, err, codes.InvalidArgument, "job.job_id: ")
		_, err = c.CreateMockNode(ctx, &managerpb.CreateMockNodeRequest{NodeId: &commonpb.NodeId{NodeId: id}})
		requireCode(t, err, codes.InvalidArgument, "node_id: ")
		// Naming an id that was never created is not a validation error.
		_, err = c.JobById(ctx, &commonpb.JobId{JobId: id})
		if id != "tab\tid" { // a control character is refused everywhere
			requireCode(t, err, codes.NotFound)
		}
	}
	_, after := a.Store().EventBounds()
	require.Equal(t, head, after, "a refused create writes nothing")
	_, err := c.CreateJob(ctx, &managerpb.Job{JobId: &commonpb.JobId{JobId: "good.id_1-a"}})
	require.NoError(t, err)
}

// TestAgent_LegacyIDsStayReachable: a job stored before ids were
// restricted (here written straight to the store) can still be read,
// updated and deleted.
func TestAgent_LegacyIDsStayReachable(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	const legacy = "legacy id: ünïcode"
	func() {
		cfg := persistence.DefaultConfig(dir)
		cfg.SyncWrites, cfg.GCInterval, cfg.Mode = true, 0, persistence.ModeSingle
		store, err := persistence.Open(cfg)
		require.NoError(t, err)
		defer store.Close()
		log := persistence.NewLocalLog(store)
		defer log.Close()
		rec, err := proto.Marshal(&internalpb.JobRecord{Job: &managerpb.JobWithHistory{Job: &managerpb.Job{
			JobId: &commonpb.JobId{JobId: legacy}, State: managerpb.Job_ACTIVE, CurrentHash: 7}}})
		require.NoError(t, err)
		_, err = log.Append(ctx, persistence.JobKey(legacy), 0, persistence.Change{Record: rec, At: time.Now()})
		require.NoError(t, err)
	}()
	_, c := startAgent(t, dir)
	got, err := c.JobById(ctx, &commonpb.JobId{JobId: legacy})
	require.NoError(t, err)
	require.Equal(t, legacy, got.GetJob().GetJob().GetJobId().GetJobId())
	_, err = c.UpdateJob(ctx, &managerpb.Job{JobId: &commonpb.JobId{JobId: legacy}, CurrentHash: 7, Description: "updated"})
	require.NoError(t, err)
	_, err = c.DeleteJob(ctx, &commonpb.JobId{JobId: legacy})
	require.NoError(t, err)
	_, err = c.JobById(ctx, &commonpb.JobId{JobId: legacy})
	requireCode(t, err, codes.NotFound)
}
