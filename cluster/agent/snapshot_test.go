package agent

import (
	"bytes"
	"context"
	"crypto/sha256"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	"github.com/norsk-oss/norsk-manager/client"
	"github.com/norsk-oss/norsk-manager/persistence"
	"github.com/norsk-oss/norsk-manager/proto/commonpb"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
)

// TestSnapshot_SaveRestoreStart takes a backup of a running manager
// through the API, writes more after it, and starts a manager on a data
// dir restored from it: it holds exactly the state of the backup, and an
// event-stream client resuming from any index of the old manager — newer
// than the backup or not — gets a stream_reset, while one resuming from
// the restored head does not.
func TestSnapshot_SaveRestoreStart(t *testing.T) {
	ctx := context.Background()
	a, c := startAgent(t, t.TempDir())
	for _, id := range []string{"a", "b", "c"} {
		_, err := c.CreateJob(ctx, &managerpb.Job{JobId: &commonpb.JobId{JobId: id}})
		require.NoError(t, err)
	}
	cl, err := client.Connect(ctx, client.Settings{URL: a.APIAddr(), Timeout: 10 * time.Second})
	require.NoError(t, err)
	defer cl.Close()
	var buf bytes.Buffer
	var last client.SnapshotProgress
	info, err := cl.SnapshotSave(ctx, &buf, func(p client.SnapshotProgress) { last = p })
	require.NoError(t, err)
	sum := sha256.Sum256(buf.Bytes())
	require.Equal(t, sum[:], info.SHA256)
	require.Equal(t, int64(buf.Len()), info.Size)
	require.Equal(t, a.Store().FSM().AppliedIndex(), info.Header.GetAppliedIndex())
	require.Equal(t, info.Header.GetKeys(), last.Keys, "the last chunk reports every key")
	require.Equal(t, int64(info.Header.GetEstimatedSizeBytes()), info.Size)
	_, snapHead := a.Store().EventBounds()
	require.Equal(t, uint64(snapHead), info.Header.GetEventHeadIndex())

	_, err = c.CreateJob(ctx, &managerpb.Job{JobId: &commonpb.JobId{JobId: "after"}})
	require.NoError(t, err)
	_, oldHead := a.Store().EventBounds()
	require.Greater(t, oldHead, snapHead)
	a.Shutdown()

	from := filepath.Join(t.TempDir(), "backup.nmb")
	require.NoError(t, os.WriteFile(from, buf.Bytes(), 0o600))
	dir := filepath.Join(t.TempDir(), "restored")
	res, err := persistence.RestoreDataDir(persistence.RestoreDirConfig{From: from, Dir: dir, Mode: persistence.ModeSingle})
	require.NoError(t, err)
	require.Greater(t, res.EventBase, oldHead+persistence.MinEventSkip-1)

	_, c2 := startAgent(t, dir)
	for _, id := range []string{"a", "b", "c"} {
		_, err := c2.JobById(ctx, &commonpb.JobId{JobId: id})
		require.NoError(t, err, id)
	}
	_, err = c2.JobById(ctx, &commonpb.JobId{JobId: "after"})
	requireCode(t, err, codes.NotFound)

	for _, n := range []uint64{uint64(oldHead), uint64(snapHead), 1} {
		ch, cancel := collect(t, c2, &managerpb.EventStreamRequest{ResumeFromIndex: proto.Uint64(n)})
		ev := nextOf(t, ch)
		require.Equal(t, "stream_reset", eventKind(ev), "resume from %d", n)
		require.Contains(t, ev.GetStreamReset().GetReason(), "restored from a backup or recovered")
		require.Equal(t, uint64(res.EventBase), ev.GetStreamReset().GetHeadIndex())
		cancel()
	}
	ch, _ := collect(t, c2, &managerpb.EventStreamRequest{ResumeFromIndex: proto.Uint64(uint64(res.EventBase))})
	_, err = c2.CreateJob(ctx, &managerpb.Job{JobId: &commonpb.JobId{JobId: "new"}})
	require.NoError(t, err)
	ev := nextOf(t, ch)
	require.Equal(t, "job_updated", eventKind(ev), "a resume from the restored head continues")
	require.Equal(t, uint64(res.EventBase)+1, ev.GetLogIndex())
}
