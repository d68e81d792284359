package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/norsk-oss/norsk-manager/client"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
	"github.com/norsk-oss/norsk-manager/test/testproc"
)

// TestE2E_PlacementPriorities (issue 13 §3, §4) with real processes. One
// worker of 2 units runs two LOW priority jobs; a HIGH priority job
// arrives: one LOW job is stopped (job_preempted naming the HIGH job,
// with its reason; its process is gone; its history says PREEMPTED), the
// HIGH job runs on the freed room and the other LOW job keeps its
// process. A second worker joins: the preempted LOW job runs there. Then
// a LOW job of a pool with a 2 s bronze drop has nowhere to go: it gets
// terminal_state "bronze drop: …" (a job_updated event carries it) and is
// never started.
func TestE2E_PlacementPriorities(t *testing.T) {
	ctx := context.Background()
	f := newFleet(t, slotSpec{name: "w-1", zone: "z1", capacity: 2})
	ev := &testproc.EventLog{}
	ev.Follow(t, f.mc, 10*time.Second)
	catchAll := []*managerpb.PoolTier{{Name: "any"}}
	require.NoError(t, f.mc.CreatePool(ctx, &managerpb.Pool{Name: "live", Tiers: catchAll}))
	require.NoError(t, f.mc.CreatePool(ctx, &managerpb.Pool{Name: "bulk", Tiers: catchAll, LowPriorityMaxWaitSeconds: 2}))
	banded := func(id, pool string, band managerpb.PriorityBand) {
		t.Helper()
		j := f.autoJob(id, 1, pool)
		j.AutoPlacement.Requirements.PriorityBand = band
		_, err := f.mc.CreateJob(ctx, j)
		require.NoError(t, err)
	}
	w1 := f.byName["w-1"].id
	pids := map[string]int{}
	for _, id := range []string{"low-a", "low-b"} {
		banded(id, "live", managerpb.PriorityBand_PRIORITY_BAND_LOW)
		n, pid := f.awaitRunning(30*time.Second, id, "primary")
		require.Equal(t, w1, n, id)
		pids[id] = pid
	}

	banded("news", "live", managerpb.PriorityBand_PRIORITY_BAND_HIGH)
	var preempted *managerpb.JobPreempted
	testproc.Eventually(t, 30*time.Second, "job_preempted for news", func() bool {
		for _, e := range ev.Snapshot() {
			if p := e.GetJobPreempted(); p.GetForJobId().GetJobId() == "news" {
				preempted = p
				return true
			}
		}
		return false
	})
	victim := preempted.GetJobId().GetJobId()
	kept := map[string]string{"low-a": "low-b", "low-b": "low-a"}[victim]
	require.NotEmpty(t, kept, "the victim %q is one of the LOW jobs", victim)
	require.Equal(t, w1, preempted.GetNodeId().GetNodeId())
	require.Equal(t, "primary", preempted.GetForRole())
	require.Contains(t, preempted.GetReason(), "fits no node")
	require.Contains(t, preempted.GetReason(), "makes room")

	n, _ := f.awaitRunning(30*time.Second, "news", "primary")
	require.Equal(t, w1, n, "the HIGH job runs on the freed room")
	require.False(t, testproc.PIDAlive(pids[victim]), "the preempted job's process is gone")
	_, pid, err := f.runsOn(kept, "primary")
	require.NoError(t, err, "only one LOW job is stopped")
	require.Equal(t, pids[kept], pid)
	require.Equal(t, managerpb.JobHistoryJobStopping_JOB_STOPPED_PREEMPTED, lastStopping(t, f, victim, "primary"))

	w2 := f.add(slotSpec{name: "w-2", zone: "z1", capacity: 1}).id
	n, _ = f.awaitRunning(30*time.Second, victim, "primary")
	require.Equal(t, w2, n, "capacity returned: the preempted job runs again")

	// Bronze drop: every node is full, and pool bulk gives up on a LOW job
	// unplaced for 2 s.
	banded("low-c", "bulk", managerpb.PriorityBand_PRIORITY_BAND_LOW)
	var reason string
	testproc.Await(t, 30*time.Second, "low-c dropped", func() error {
		r, err := f.mc.JobByID(ctx, client.JobID("low-c"))
		if err != nil {
			return err
		}
		if reason = r.GetJob().GetJob().GetTerminalState().GetFailureReason(); reason == "" {
			return errNotYet("low-c has no terminal_state")
		}
		return nil
	})
	require.True(t, strings.HasPrefix(reason, "bronze drop: "), reason)
	require.Contains(t, reason, "pool bulk allows 2s")
	require.Contains(t, reason, "fits no node")
	testproc.Eventually(t, 10*time.Second, "job_updated carrying the bronze drop", func() bool {
		return ev.Has(func(e *managerpb.EventStreamEvent) bool {
			j := e.GetJobUpdated().GetJobWithHistory().GetJob()
			return j.GetJobId().GetJobId() == "low-c" && strings.HasPrefix(j.GetTerminalState().GetFailureReason(), "bronze drop: ")
		})
	})
	require.Zero(t, f.provisioned("low-c", "primary"), "a dropped job is never started")
}

// lastStopping is the reason of the last job_stopping of (job, role) in
// the manager's history.
func lastStopping(t *testing.T, f *fleet, job, role string) managerpb.JobHistoryJobStopping_Reason {
	t.Helper()
	r, err := f.mc.JobByID(context.Background(), client.JobID(job))
	require.NoError(t, err)
	h := r.GetJob().GetHistoryEntry()
	for i := len(h) - 1; i >= 0; i-- {
		if s := h[i].GetJobStopping(); s.GetRole() == role {
			return s.GetReason()
		}
	}
	t.Fatalf("%s/%s: no job_stopping in its history", job, role)
	return 0
}

// errNotYet is a condition not met yet, for testproc.Await.
type errNotYet string

func (e errNotYet) Error() string { return string(e) }
