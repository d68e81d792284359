package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	"github.com/norsk-oss/norsk-manager/client"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
	"github.com/norsk-oss/norsk-manager/test/testproc"
)

// TestE2E_DefinitionDrift (issue 13 §2): a web job runs on a real worker.
// An UpdateJob of nothing the worker runs (its description) leaves the
// instance current; one of its command leaves the process running (the
// default update strategy, in place) and JobById — through a manager
// SIGKILLed and restarted — says the instance runs the previous hash,
// as do `norsk-ctl job get` and a definition_drift event. StopJob then StartJob runs the new
// command (it writes a marker file the old one never wrote) and the
// drift is gone.
func TestE2E_DefinitionDrift(t *testing.T) {
	ctx := context.Background()
	s := newWebSetup(t)
	get := func() (*managerpb.Job, *managerpb.RunningJob) {
		t.Helper()
		r, err := s.mc.JobByID(ctx, "web")
		require.NoError(t, err)
		require.Len(t, r.GetInstances(), 1)
		return r.GetJob().GetJob(), r.GetInstances()[0]
	}
	update := func(change func(j *managerpb.Job)) int64 {
		t.Helper()
		j, _ := get()
		j = proto.Clone(j).(*managerpb.Job)
		change(j)
		h, err := s.mc.UpdateJob(ctx, j)
		require.NoError(t, err)
		return h
	}

	j, in := get()
	require.Equal(t, j.GetCurrentHash(), in.GetDefinitionHash(), "the start recorded the hash it ran")
	require.False(t, in.GetDefinitionStale())

	h1 := update(func(j *managerpb.Job) { j.Description = "renamed" })
	_, in = get()
	require.Equal(t, h1, in.GetDefinitionHash(), "a new description changes nothing the worker runs")
	require.False(t, in.GetDefinitionStale())

	marker := filepath.Join(testproc.JobFilesDir(t), "v2")
	h2 := update(func(j *managerpb.Job) {
		j.Services[0].Command = fmt.Sprintf("echo v2 > %s; %s", marker, j.Services[0].Command)
	})
	_, in = get()
	require.Equal(t, h1, in.GetDefinitionHash())
	require.True(t, in.GetDefinitionStale())
	s.jobStillRunning(t, "after the update (in place)")
	testproc.Eventually(t, 10*time.Second, "definition_drift on the event stream", func() bool {
		return s.ev.Has(func(ev *managerpb.EventStreamEvent) bool {
			d := ev.GetDefinitionDrift()
			return d.GetCurrentHash() == h2 && len(d.GetInstances()) == 1 &&
				strings.HasSuffix(d.GetMessage(), fmt.Sprintf("runs definition hash %d; current %d: restart or migrate to apply", h1, h2))
		})
	})

	// The drift is in the record: a SIGKILLed manager still reports it.
	s.m.Kill()
	s.m = startManager(t, s.managerDataDir, s.managerPort)
	s.mc = connect(t, s.m.addr)
	_, in = get()
	require.Equal(t, h1, in.GetDefinitionHash(), "after the manager's SIGKILL")
	require.True(t, in.GetDefinitionStale())

	out, code := ctl(t, s.m.addr, "job", "get", "web")
	require.Zero(t, code, out)
	want := fmt.Sprintf("primary on node %s: runs definition hash %d; current %d: restart or migrate to apply", s.nodeID, h1, h2)
	require.Contains(t, out, want)
	_, err := os.Stat(marker)
	require.True(t, os.IsNotExist(err), "the running process never ran the new command")

	require.NoError(t, s.mc.StopJob(ctx, "web", "primary", client.NodeID(s.nodeID)))
	testproc.Eventually(t, 30*time.Second, "the instance stopped", func() bool {
		r, err := s.mc.JobByID(ctx, "web")
		return err == nil && len(r.GetInstances()) == 0
	})
	require.NoError(t, s.mc.StartJob(ctx, "web", "primary", client.NodeID(s.nodeID)))
	testproc.Eventually(t, 30*time.Second, "the new command ran", func() bool {
		_, err := os.Stat(marker)
		return err == nil
	})
	_, in = get()
	require.Equal(t, h2, in.GetDefinitionHash(), "the restart runs the current definition")
	require.False(t, in.GetDefinitionStale())
	out, code = ctl(t, s.m.addr, "job", "get", "web")
	require.Zero(t, code, out)
	require.False(t, strings.Contains(out, "runs definition hash"), "no drift after the restart:\n%s", out)
}

// TestE2E_DefinitionDrift_Bundle: a resilient bundle runs its primary and
// backup on two workers. An UpdateBundle of its update_strategy alone
// (to MIGRATE) reaches both derived jobs and leaves them current; back
// under IN_PLACE (the default), one of the template's command leaves both
// processes running (nothing moves them: TestE2E_RollingUpdate_Bundle
// shows MIGRATE) and GetBundle, like `norsk-ctl bundle get`, shows both
// stale.
func TestE2E_DefinitionDrift_Bundle(t *testing.T) {
	ctx := context.Background()
	f := newFleet(t, slotSpec{name: "w-z1", zone: "z1", capacity: 4}, slotSpec{name: "w-z2", zone: "z2", capacity: 4})
	b := &managerpb.Bundle{
		Jobs:             []*managerpb.BundleJobSpec{{JobName: "enc", Requirements: &managerpb.JobRequirements{RequiredCapacity: 1}, Job: f.sleepJob("")}},
		ResiliencePolicy: &managerpb.ResiliencePolicy{SameNode: managerpb.AntiAffinity_ANTI_AFFINITY_FORBID},
	}
	bid, err := f.mc.CreateBundle(ctx, b)
	require.NoError(t, err)
	b.BundleId = &managerpb.BundleId{BundleId: string(bid)}
	var pids [2]int
	for r := range 2 {
		_, pids[r] = f.awaitRunning(30*time.Second, bundleJob(bid, r, "enc"), roleOf(r))
	}
	stale := func() []bool {
		t.Helper()
		info, err := f.mc.GetBundle(ctx, bid)
		require.NoError(t, err)
		var out []bool
		for _, js := range info.GetJobs() {
			require.NotEmpty(t, js.GetNodeId(), "%s runs", js.GetJobId().GetJobId())
			out = append(out, js.GetDefinitionStale())
		}
		return out
	}
	require.Equal(t, []bool{false, false}, stale())

	b.UpdateStrategy = managerpb.UpdateStrategy_UPDATE_STRATEGY_MIGRATE
	require.NoError(t, f.mc.UpdateBundle(ctx, b))
	for r := range 2 {
		r, err := f.mc.JobByID(ctx, client.JobID(bundleJob(bid, r, "enc")))
		require.NoError(t, err)
		require.Equal(t, managerpb.UpdateStrategy_UPDATE_STRATEGY_MIGRATE, r.GetJob().GetJob().GetUpdateStrategy(), "forwarded to the derived job")
	}
	require.Equal(t, []bool{false, false}, stale(), "the strategy is not part of what the worker runs")
	b.UpdateStrategy = managerpb.UpdateStrategy_UPDATE_STRATEGY_IN_PLACE
	require.NoError(t, f.mc.UpdateBundle(ctx, b))
	require.Equal(t, []bool{false, false}, stale())

	b.Jobs[0].Job.Services[0].Command = strings.Replace(b.Jobs[0].Job.Services[0].Command, "sleep 600", "sleep 601", 1)
	require.NoError(t, f.mc.UpdateBundle(ctx, b))
	require.Equal(t, []bool{true, true}, stale())
	out, code := ctl(t, f.m.addr, "bundle", "get", string(bid))
	require.Zero(t, code, out)
	require.Equal(t, 2, strings.Count(out, "runs a stale definition (restart or migrate to apply)"), out)
	for r := range 2 {
		_, pid, err := f.runsOn(bundleJob(bid, r, "enc"), roleOf(r))
		require.NoError(t, err)
		require.Equal(t, pids[r], pid, "replica %d keeps its process under IN_PLACE", r)
	}
}
