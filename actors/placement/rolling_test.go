package placement

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/norsk-oss/norsk-manager/actors/bundle"
	"github.com/norsk-oss/norsk-manager/actors/job"
	"github.com/norsk-oss/norsk-manager/proto/internalpb"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
)

// rollingJob is an auto-placed ACTIVE job under MIGRATE (current hash 7)
// with one instance of role on node n1: stale (it runs hash 1, another
// run hash), current, or unknown (recorded without a definition).
func rollingJob(id, role, drift string, tags map[string]string) *internalpb.JobRecord {
	rec := autoJob(id, 1, tags)
	j := rec.GetJob().GetJob()
	j.UpdateStrategy = managerpb.UpdateStrategy_UPDATE_STRATEGY_MIGRATE
	in := &internalpb.Instance{Role: role, NodeId: "n1", Status: internalpb.InstanceStatus_INSTANCE_RUNNING}
	switch drift {
	case "stale":
		in.DefinitionHash, in.RunHash = 1, job.RunHash(j)+1
	case "current":
		in.DefinitionHash, in.RunHash = 7, job.RunHash(j)
	}
	rec.Instances = []*internalpb.Instance{in}
	return rec
}

// derived is rollingJob for a derived job of bundle bid.
func derived(bid string, replica uint32, name, drift string) *internalpb.JobRecord {
	role := map[uint32]string{0: "primary", 1: "backup"}[replica]
	return rollingJob(bundle.JobID(bid, replica, name), role, drift, map[string]string{
		bundle.TagBundleID: bid, bundle.TagReplicaIndex: fmt.Sprint(replica), bundle.TagJobName: name})
}

// liveBundle is a LIVE bundle record listing jobs names, primary and backup.
func liveBundle(bid string, names ...string) *internalpb.BundleRecord {
	b := &managerpb.Bundle{BundleId: &managerpb.BundleId{BundleId: bid}, ResiliencePolicy: &managerpb.ResiliencePolicy{}}
	for _, n := range names {
		b.Jobs = append(b.Jobs, &managerpb.BundleJobSpec{JobName: n})
	}
	return &internalpb.BundleRecord{Bundle: b, Jobs: bundle.Expand(b, 1)}
}

func moveNames(ms []rollingMove) []string {
	out := []string{}
	for _, m := range ms {
		out = append(out, m.key.String())
	}
	return out
}

func TestRollingOrder(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	cases := []struct {
		name    string
		jobs    []*internalpb.JobRecord
		bundles []*internalpb.BundleRecord
		want    []string
	}{
		{"plain stale job", []*internalpb.JobRecord{rollingJob("p", "primary", "stale", nil)}, nil, []string{"p/primary"}},
		{"current and unknown never move", []*internalpb.JobRecord{rollingJob("c", "primary", "current", nil),
			rollingJob("u", "primary", "unknown", nil)}, nil, []string{}},
		{"in place is left alone", []*internalpb.JobRecord{with(rollingJob("p", "primary", "stale", nil), func(r *internalpb.JobRecord) {
			r.Job.Job.UpdateStrategy = managerpb.UpdateStrategy_UPDATE_STRATEGY_IN_PLACE
		})}, nil, []string{}},
		{"completed, failed for good and dormant jobs are left alone", []*internalpb.JobRecord{
			with(rollingJob("a", "primary", "stale", nil), func(r *internalpb.JobRecord) { r.Job.Job.State = managerpb.Job_POST }),
			with(rollingJob("b", "primary", "stale", nil), func(r *internalpb.JobRecord) {
				r.Job.Job.TerminalState = &managerpb.TerminalState{FailureReason: "x"}
			}),
			with(derived("bd", 0, "enc", "stale"), func(r *internalpb.JobRecord) { r.Job.Job.Tags[bundle.TagDormant] = "true" }),
		}, []*internalpb.BundleRecord{liveBundle("bd", "enc")}, []string{}},
		{"an instance already changing is left alone", []*internalpb.JobRecord{
			with(rollingJob("a", "primary", "stale", nil), func(r *internalpb.JobRecord) {
				r.Instances[0].Status = internalpb.InstanceStatus_INSTANCE_PROVISIONING
			}),
			with(rollingJob("b", "primary", "stale", nil), func(r *internalpb.JobRecord) {
				r.Instances[0].Status = internalpb.InstanceStatus_INSTANCE_STOPPING
			}),
		}, nil, []string{}},
		{"bundle: backups first, then primaries, by job id", []*internalpb.JobRecord{
			derived("bd", 0, "enc", "stale"), derived("bd", 0, "pkg", "stale"),
			derived("bd", 1, "pkg", "stale"), derived("bd", 1, "enc", "stale"),
		}, []*internalpb.BundleRecord{liveBundle("bd", "enc", "pkg")},
			[]string{"bd.1.enc/backup", "bd.1.pkg/backup", "bd.0.enc/primary", "bd.0.pkg/primary"}},
		{"bundle missing, deleting, or no longer listing the job", []*internalpb.JobRecord{
			derived("gone", 0, "enc", "stale"), derived("del", 0, "enc", "stale"), derived("bd", 0, "old", "stale"),
		}, []*internalpb.BundleRecord{with(liveBundle("del", "enc"), func(b *internalpb.BundleRecord) {
			b.Bundle.State = managerpb.BundleState_BUNDLE_STATE_DELETING
		}), liveBundle("bd", "enc")}, []string{}},
		{"groups in id order", []*internalpb.JobRecord{
			rollingJob("z", "primary", "stale", nil), derived("bd", 0, "enc", "stale"), rollingJob("a", "primary", "stale", nil),
		}, []*internalpb.BundleRecord{liveBundle("bd", "enc")}, []string{"a/primary", "bd.0.enc/primary", "z/primary"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			jobs := map[string]*internalpb.JobRecord{}
			for _, r := range tc.jobs {
				jobs[r.GetJob().GetJob().GetJobId().GetJobId()] = r
			}
			bundles := map[string]*internalpb.BundleRecord{}
			for _, b := range tc.bundles {
				bundles[b.GetBundle().GetBundleId().GetBundleId()] = b
			}
			got := rollingOrder(jobs, bundles, now)
			require.Equal(t, tc.want, moveNames(got))
			for _, m := range got {
				require.Equal(t, int64(1), m.runs)
				require.Equal(t, int64(7), m.current)
				require.Equal(t, "n1", m.node)
			}
		})
	}
}

// with returns v after change.
func with[T any](v T, change func(T)) T {
	change(v)
	return v
}

// TestNextRollingMoves: one move at a time per bundle (its first in
// order: a backup before any primary), plain jobs independent, nothing
// for a group with a move in flight.
func TestNextRollingMoves(t *testing.T) {
	jobs := map[string]*internalpb.JobRecord{}
	for _, r := range []*internalpb.JobRecord{
		derived("bd", 0, "enc", "stale"), derived("bd", 1, "enc", "stale"), derived("bd", 1, "pkg", "stale"),
		derived("bx", 0, "enc", "stale"),
		rollingJob("p", "primary", "stale", nil), rollingJob("q", "primary", "stale", nil),
	} {
		jobs[r.GetJob().GetJob().GetJobId().GetJobId()] = r
	}
	bundles := map[string]*internalpb.BundleRecord{"bd": liveBundle("bd", "enc", "pkg"), "bx": liveBundle("bx", "enc")}
	order := rollingOrder(jobs, bundles, time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	cases := []struct {
		name   string
		moving []string
		want   []string
	}{
		{"nothing moving", nil, []string{"bd.1.enc/backup", "bx.0.enc/primary", "p/primary", "q/primary"}},
		{"a move in bd and one of p in flight", []string{"bd", "p"}, []string{"bx.0.enc/primary", "q/primary"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			moving := func(g string) bool { return slices.Contains(tc.moving, g) }
			require.Equal(t, tc.want, moveNames(nextRollingMoves(order, moving)))
		})
	}

	// bd's backups moved: its primary is next.
	for _, id := range []string{"bd.1.enc", "bd.1.pkg"} {
		in := jobs[id].Instances[0]
		in.DefinitionHash, in.RunHash = 7, job.RunHash(jobs[id].GetJob().GetJob())
	}
	order = rollingOrder(jobs, bundles, time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	require.Equal(t, []string{"bd.0.enc/primary", "bx.0.enc/primary", "p/primary", "q/primary"},
		moveNames(nextRollingMoves(order, func(string) bool { return false })))
}
