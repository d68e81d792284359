package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/norsk-oss/norsk-manager/client"
	"github.com/norsk-oss/norsk-manager/proto/commonpb"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
	"github.com/norsk-oss/norsk-manager/test/testproc"
)

// versionJob is a bundle template whose service writes, as stampJob's,
// its start and exit times in <dir>/<job>.<role>.start and .exit, its pid
// in .pid (dir is the fleet's pidDir, for runsOn), and version in .ver:
// which definition the process runs, from the process itself.
func versionJob(dir, version string) *managerpb.Job {
	p := fmt.Sprintf(`%s/$NORSK_JOB_ID.$NORSK_JOB_ROLE`, dir)
	return &managerpb.Job{
		Tags: map[string]string{"suite": "e2e-rolling"},
		Services: []*commonpb.Service{{
			Name: "stamp",
			Command: fmt.Sprintf(`date +%%s%%N > "%s.start"; echo $$ > "%s.pid"; echo %s > "%s.ver"; `+
				`trap 'date +%%s%%N > "%s.exit"; exit 0' TERM; sleep 600 & wait`, p, p, version, p, p),
			Restart: commonpb.Service_NEVER,
		}},
	}
}

// span is one process's life from its own stamps; end is zero while it
// runs.
type span struct {
	name       string
	start, end time.Time
}

// spanOf reads the stamps of (job, role) in dir; the start must be
// written.
func spanOf(t *testing.T, dir, job, role string) span {
	t.Helper()
	base := filepath.Join(dir, job+"."+role)
	s, ok := startedAt(base)
	require.True(t, ok, "%s/%s wrote no start stamp", job, role)
	e, _ := stamp(base + ".exit")
	return span{name: job + "/" + role, start: s, end: e}
}

// coverGap returns the first instant after the first start at which none
// of spans runs (as text), or "" if there is none: at least one process
// ran the whole time.
func coverGap(spans []span) string {
	slices.SortFunc(spans, func(a, b span) int { return a.start.Compare(b.start) })
	reach := spans[0].end // zero: runs still
	for _, s := range spans[1:] {
		if reach.IsZero() {
			return ""
		}
		if s.start.After(reach) {
			return fmt.Sprintf("nothing ran between %v and %v (before %s started)", reach, s.start, s.name)
		}
		if s.end.IsZero() || s.end.After(reach) {
			reach = s.end
		}
	}
	if !reach.IsZero() {
		return fmt.Sprintf("nothing runs since %v", reach)
	}
	return ""
}

// TestE2E_RollingUpdate_Bundle (issue 13 §2): a resilient bundle under
// UPDATE_STRATEGY_MIGRATE runs its primary and backup on two workers (a
// process service). UpdateBundle changes the service's command: the
// engine moves the backup, then — once the backup's move has ended — the
// primary, each make-before-break. From the processes' own stamps: each
// new process started before the one it replaces exited, the primary's
// new process started after the backup's old one exited (never both
// replicas moving), and at every instant at least one replica ran. At the
// end both replicas run the new command and `norsk-ctl job get` shows no
// drift.
func TestE2E_RollingUpdate_Bundle(t *testing.T) {
	ctx := context.Background()
	f := newFleet(t, slotSpec{name: "w-z1", zone: "z1", capacity: 4}, slotSpec{name: "w-z2", zone: "z2", capacity: 4})
	ev := &testproc.EventLog{}
	ev.Follow(t, f.mc, 10*time.Second)
	dir := f.pidDir
	b := &managerpb.Bundle{
		UpdateStrategy:   managerpb.UpdateStrategy_UPDATE_STRATEGY_MIGRATE,
		Jobs:             []*managerpb.BundleJobSpec{{JobName: "enc", Requirements: &managerpb.JobRequirements{RequiredCapacity: 1}, Job: versionJob(dir, "v1")}},
		ResiliencePolicy: &managerpb.ResiliencePolicy{SameNode: managerpb.AntiAffinity_ANTI_AFFINITY_FORBID},
	}
	bid, err := f.mc.CreateBundle(ctx, b)
	require.NoError(t, err)
	b.BundleId = &managerpb.BundleId{BundleId: string(bid)}
	pj, bj := bundleJob(bid, 0, "enc"), bundleJob(bid, 1, "enc")
	pNode, _ := f.awaitRunning(30*time.Second, pj, "primary")
	bNode, _ := f.awaitRunning(30*time.Second, bj, "backup")
	f.awaitStamped(pj, "primary", dir, pNode)
	f.awaitStamped(bj, "backup", dir, bNode)

	b.Jobs[0].Job = versionJob(dir, "v2")
	require.NoError(t, f.mc.UpdateBundle(ctx, b))

	// The backup's target runs on its own node (anti-affinity keeps it off
	// the primary's), then the primary's on its own.
	f.awaitStamped(bj, "backup~1", dir, bNode)
	f.awaitStamped(pj, "primary~1", dir, pNode)
	for _, r := range []struct{ job, role string }{{pj, "primary"}, {bj, "backup"}} {
		testproc.Await(t, 60*time.Second, r.job+": the move ended", func() error {
			if _, ok := stamp(filepath.Join(dir, r.job+"."+r.role+".exit")); !ok {
				return fmt.Errorf("no exit stamp of %s/%s", r.job, r.role)
			}
			jr, err := f.mc.JobByID(ctx, client.JobID(r.job))
			if err != nil {
				return err
			}
			if len(jr.GetMigrations()) > 0 || len(jr.GetInstances()) != 1 {
				return fmt.Errorf("move not ended: %v, instances %v", jr.GetMigrations(), jr.GetInstances())
			}
			return nil
		})
	}
	p0, p1 := spanOf(t, dir, pj, "primary"), spanOf(t, dir, pj, "primary~1")
	b0, b1 := spanOf(t, dir, bj, "backup"), spanOf(t, dir, bj, "backup~1")
	require.True(t, b1.start.Before(b0.end), "backup: the new process started (%v) before the old one exited (%v)", b1.start, b0.end)
	require.True(t, p1.start.Before(p0.end), "primary: the new process started (%v) before the old one exited (%v)", p1.start, p0.end)
	require.True(t, b0.end.Before(p1.start), "the backup's move ended (%v) before the primary's target started (%v)", b0.end, p1.start)
	require.True(t, p1.end.IsZero() && b1.end.IsZero(), "the new processes run")
	require.Equal(t, "", coverGap([]span{p0, p1, b0, b1}), "at least one replica runs at every instant")
	t.Logf("overlap: backup %v, primary %v", b0.end.Sub(b1.start), p0.end.Sub(p1.start))

	for _, r := range []struct{ job, role string }{{pj, "primary~1"}, {bj, "backup~1"}} {
		v, err := os.ReadFile(filepath.Join(dir, r.job+"."+r.role+".ver"))
		require.NoError(t, err)
		require.Equal(t, "v2", strings.TrimSpace(string(v)), "%s/%s runs the new command", r.job, r.role)
		out, code := ctl(t, f.m.addr, "job", "get", r.job)
		require.Zero(t, code, out)
		require.NotContains(t, out, "runs definition hash", "no drift:\n%s", out)
		require.Contains(t, out, "  "+r.role+" on node ", out)
	}
	info, err := f.mc.GetBundle(ctx, bid)
	require.NoError(t, err)
	for _, js := range info.GetJobs() {
		require.False(t, js.GetDefinitionStale(), "%s", js.GetJobId().GetJobId())
	}
	testproc.Eventually(t, 10*time.Second, "two migration_completed, why update", func() bool {
		n := 0
		for _, e := range ev.Snapshot() {
			if c := e.GetMigrationCompleted(); c != nil && c.GetMigration().GetWhy() == managerpb.Migration_MIGRATION_UPDATE {
				n++
			}
		}
		return n == 2
	})
}
