package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/norsk-oss/norsk-manager/client"
	"github.com/norsk-oss/norsk-manager/proto/commonpb"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
	"github.com/norsk-oss/norsk-manager/test/testproc"
)

// TestE2E_PlacementFailedThenPlaced (issue 11 §3, §5): one worker of 1
// unit runs the first 1-unit job (job_placed, naming its node); a second
// finds no room: placement_failed on the event stream with the filter
// count ("capacity exhausted on 1 node"), the same explanation from
// GetPlacement, and nothing started; a second worker joins and the job is
// placed there (job_placed), its failure no longer shown.
func TestE2E_PlacementFailedThenPlaced(t *testing.T) {
	ctx := context.Background()
	f := newFleet(t, slotSpec{name: "w-1", zone: "z1", capacity: 1})
	ev := &testproc.EventLog{}
	ev.Follow(t, f.mc, 10*time.Second)
	placedOn := func(job string) func(*managerpb.EventStreamEvent) bool {
		return func(e *managerpb.EventStreamEvent) bool {
			p := e.GetJobPlaced()
			return p.GetJobId().GetJobId() == job && p.GetRole() == "primary" && p.GetNodeId().GetNodeId() != ""
		}
	}

	_, err := f.mc.CreateJob(ctx, f.autoJob("ev-a", 1, ""))
	require.NoError(t, err)
	nodeA, _ := f.awaitRunning(30*time.Second, "ev-a", "primary")
	require.Equal(t, f.byName["w-1"].id, nodeA)
	testproc.Eventually(t, 10*time.Second, "job_placed of ev-a", func() bool { return ev.Has(placedOn("ev-a")) })

	_, err = f.mc.CreateJob(ctx, f.autoJob("ev-b", 1, ""))
	require.NoError(t, err)
	var failed *managerpb.PlacementFailed
	testproc.Eventually(t, 30*time.Second, "placement_failed of ev-b", func() bool {
		for _, e := range ev.Snapshot() {
			if p := e.GetPlacementFailed(); p.GetJobId().GetJobId() == "ev-b" {
				failed = p
				return true
			}
		}
		return false
	})
	require.Equal(t, "primary", failed.GetRole())
	at := failed.GetAttempt()
	require.EqualValues(t, 1, at.GetNodesEvaluated(), "reason: %s", at.GetReason())
	require.Len(t, at.GetFilters(), 1, "reason: %s", at.GetReason())
	require.Equal(t, "capacity", at.GetFilters()[0].GetFilter())
	require.EqualValues(t, 1, at.GetFilters()[0].GetNodesRemoved())
	require.Contains(t, at.GetReason(), "capacity exhausted on 1 node")
	info, err := f.mc.GetPlacement(ctx, client.JobID("ev-b"))
	require.NoError(t, err)
	require.Len(t, info.GetRoles(), 1)
	require.Empty(t, info.GetRoles()[0].GetNodeId())
	require.Contains(t, info.GetRoles()[0].GetLastAttempt().GetReason(), "capacity exhausted on 1 node")
	require.Zero(t, f.provisioned("ev-b", "primary"), "ev-b fits nowhere: never started")

	w2 := f.add(slotSpec{name: "w-2", zone: "z2", capacity: 1})
	nodeB, _ := f.awaitRunning(30*time.Second, "ev-b", "primary")
	require.Equal(t, w2.id, nodeB)
	testproc.Eventually(t, 10*time.Second, "job_placed of ev-b", func() bool { return ev.Has(placedOn("ev-b")) })
	info, err = f.mc.GetPlacement(ctx, client.JobID("ev-b"))
	require.NoError(t, err)
	require.Len(t, info.GetRoles(), 1)
	require.Equal(t, w2.id, info.GetRoles()[0].GetNodeId())
	require.Nil(t, info.GetRoles()[0].LastAttempt, "placed: no failed attempt shown")
}

// TestE2E_PlacementPinnedCores (issue 11 §3, §5): a worker offering two
// cores (--cores 0,1) gets two jobs that each require one whole core: each
// service's own Cpus_allowed_list (read by the process itself) is one core,
// the two are different, and each is the job's NORSK_CPU_LIST. A third
// such job fits no core; once one of the first two is completed (its
// instance stopped) it runs, on the core that was freed.
func TestE2E_PlacementPinnedCores(t *testing.T) {
	ctx := context.Background()
	f := newFleet(t, slotSpec{name: "w-cores", zone: "z1", capacity: 8, extra: []string{"--cores", "0,1"}})
	dir := testproc.JobFilesDir(t)
	coreJob := func(id string) *managerpb.Job {
		return &managerpb.Job{
			JobId: &commonpb.JobId{JobId: id},
			Services: []*commonpb.Service{{
				Name: "idle",
				Command: fmt.Sprintf(`grep Cpus_allowed_list /proc/self/status > "%[1]s/%[2]s.tmp"; echo "env:$NORSK_CPU_LIST" >> "%[1]s/%[2]s.tmp"; mv "%[1]s/%[2]s.tmp" "%[1]s/%[2]s.cpus"; echo $$ > "%[3]s/$NORSK_JOB_ID.$NORSK_JOB_ROLE.pid"; exec sleep 600`,
					dir, id, f.pidDir),
				Restart: commonpb.Service_NEVER,
			}},
			AutoPlacement: &managerpb.AutoPlacement{Requirements: &managerpb.JobRequirements{RequiredCapacity: 1, RequiredCores: &commonpb.OptionalInt{Value: 1}}},
		}
	}
	allowedRE := regexp.MustCompile(`Cpus_allowed_list:\s*(\S+)\nenv:(\S*)\n`)
	coresOf := func(id string) string {
		t.Helper()
		var cores string
		testproc.Await(t, 30*time.Second, id+" reports its affinity", func() error {
			b, err := os.ReadFile(filepath.Join(dir, id+".cpus"))
			if err != nil {
				return err
			}
			m := allowedRE.FindStringSubmatch(string(b))
			if m == nil {
				return fmt.Errorf("unexpected affinity file %q", b)
			}
			if m[1] != m[2] {
				t.Fatalf("%s: Cpus_allowed_list %s but NORSK_CPU_LIST %q", id, m[1], m[2])
			}
			cores = m[1]
			return nil
		})
		return cores
	}

	for _, id := range []string{"core-a", "core-b"} {
		_, err := f.mc.CreateJob(ctx, coreJob(id))
		require.NoError(t, err)
		f.awaitRunning(30*time.Second, id, "primary")
	}
	got := []string{coresOf("core-a"), coresOf("core-b")}
	sort.Strings(got)
	require.Equal(t, []string{"0", "1"}, got, "one core each, without overlap")

	_, err := f.mc.CreateJob(ctx, coreJob("core-c"))
	require.NoError(t, err)
	testproc.Await(t, 30*time.Second, "core-c explained as unplaced for its cores", func() error {
		info, err := f.mc.GetPlacement(ctx, client.JobID("core-c"))
		if err != nil {
			return err
		}
		for _, r := range info.GetRoles() {
			if reason := r.GetLastAttempt().GetReason(); strings.Contains(reason, "core") {
				return nil
			} else if reason != "" {
				return fmt.Errorf("reason %q does not name cores", reason)
			}
		}
		return fmt.Errorf("no attempt yet: %v", info)
	})
	require.Zero(t, f.provisioned("core-c", "primary"), "no core free: core-c never started")

	freed := coresOf("core-a")
	_, pidA := f.awaitRunning(30*time.Second, "core-a", "primary")
	require.NoError(t, f.mc.CompleteJob(ctx, client.JobID("core-a")))
	f.awaitStopped(30*time.Second, "core-a", "primary", pidA)
	f.awaitRunning(30*time.Second, "core-c", "primary")
	require.Equal(t, freed, coresOf("core-c"), "core-c runs on the core core-a freed")
}
