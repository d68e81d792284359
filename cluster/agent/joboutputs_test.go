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

// TestAgent_JobOutputFieldsAreNotInput: a job's state and terminal_state
// are the manager's (docs/design/jobs.md, "Output fields"; issue 21 §11:
// a client's terminal_state and state POST were stored on an active job).
// CreateJob and a bundle's template drop them; UpdateJob ignores state,
// keeps a verdict sent back as read, clears it when left out, and refuses
// any other with InvalidArgument, changing nothing.
func TestAgent_JobOutputFieldsAreNotInput(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	dir := t.TempDir()
	verdict := &managerpb.TerminalState{FailureReason: "restart ceiling exceeded: 5 failures in 10m0s"}
	func() { // a job the placement engine gave up, as the store holds it
		cfg := persistence.DefaultConfig(dir)
		cfg.SyncWrites, cfg.GCInterval, cfg.Mode = true, 0, persistence.ModeSingle
		store, err := persistence.Open(cfg)
		require.NoError(t, err)
		defer store.Close()
		log := persistence.NewLocalLog(store)
		defer log.Close()
		rec, err := proto.Marshal(&internalpb.JobRecord{Job: &managerpb.JobWithHistory{Job: &managerpb.Job{
			JobId: &commonpb.JobId{JobId: "given-up"}, State: managerpb.Job_ACTIVE, CurrentHash: 7, TerminalState: verdict}}})
		require.NoError(t, err)
		_, err = log.Append(ctx, persistence.JobKey("given-up"), 0, persistence.Change{Record: rec, At: time.Now()})
		require.NoError(t, err)
	}()
	_, c := startAgent(t, dir)
	get := func(id string) *managerpb.Job {
		t.Helper()
		r, err := c.JobById(ctx, &commonpb.JobId{JobId: id})
		require.NoError(t, err)
		return r.GetJob().GetJob()
	}
	forged := &managerpb.TerminalState{FailureReason: "forged"}

	h, err := c.CreateJob(ctx, &managerpb.Job{JobId: &commonpb.JobId{JobId: "fresh"}, State: managerpb.Job_POST, TerminalState: forged})
	require.NoError(t, err)
	j := get("fresh")
	require.Equal(t, managerpb.Job_ACTIVE, j.GetState(), "no start time: active, whatever the client said")
	require.Nil(t, j.GetTerminalState(), "CreateJob drops terminal_state")

	_, err = c.UpdateJob(ctx, &managerpb.Job{JobId: &commonpb.JobId{JobId: "fresh"}, CurrentHash: h.GetHash(), TerminalState: forged})
	requireCode(t, err, codes.InvalidArgument, "job.terminal_state: is output only")
	h, err = c.UpdateJob(ctx, &managerpb.Job{JobId: &commonpb.JobId{JobId: "fresh"}, CurrentHash: h.GetHash(), State: managerpb.Job_POST, Description: "d"})
	require.NoError(t, err)
	j = get("fresh")
	require.Equal(t, managerpb.Job_ACTIVE, j.GetState(), "UpdateJob ignores state")
	require.Nil(t, j.GetTerminalState())
	require.Equal(t, h.GetHash(), j.GetCurrentHash())

	// The stored verdict: kept when sent back as read, refused when
	// changed (nothing written), cleared when left out.
	_, err = c.UpdateJob(ctx, &managerpb.Job{JobId: &commonpb.JobId{JobId: "given-up"}, CurrentHash: 7, TerminalState: forged})
	requireCode(t, err, codes.InvalidArgument, "job.terminal_state: is output only", "restart ceiling exceeded")
	require.EqualValues(t, 7, get("given-up").GetCurrentHash(), "a refused update changes nothing")
	h, err = c.UpdateJob(ctx, &managerpb.Job{JobId: &commonpb.JobId{JobId: "given-up"}, CurrentHash: 7, TerminalState: verdict, Description: "d"})
	require.NoError(t, err)
	require.True(t, proto.Equal(verdict, get("given-up").GetTerminalState()), "kept")
	_, err = c.UpdateJob(ctx, &managerpb.Job{JobId: &commonpb.JobId{JobId: "given-up"}, CurrentHash: h.GetHash(), Description: "d"})
	require.NoError(t, err)
	require.Nil(t, get("given-up").GetTerminalState(), "cleared by the operator")

	// A bundle's template carries none into its derived jobs.
	_, err = c.CreateBundle(ctx, &managerpb.Bundle{BundleId: &managerpb.BundleId{BundleId: "b1"},
		Jobs: []*managerpb.BundleJobSpec{{JobName: "enc", Job: &managerpb.Job{TerminalState: forged, State: managerpb.Job_POST}}}})
	require.NoError(t, err)
	require.Nil(t, get("b1.0.enc").GetTerminalState())
	require.NotEqual(t, managerpb.Job_POST, get("b1.0.enc").GetState())
}
