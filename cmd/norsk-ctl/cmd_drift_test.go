package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/cobra"

	"github.com/norsk-oss/norsk-manager/proto/commonpb"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
)

// TestWriteJobDetails_Drift: "job get" says which instance runs a stale
// definition, with both hashes and what applies the current one, and the
// job's update strategy; an instance with an unknown or current
// definition gets no note.
func TestWriteJobDetails_Drift(t *testing.T) {
	rj := func(role string, hash int64, stale bool) *managerpb.RunningJob {
		return &managerpb.RunningJob{JobKey: &commonpb.ActiveJobKey{Role: role}, NodeId: &commonpb.NodeId{NodeId: "n1"},
			DefinitionHash: hash, DefinitionStale: stale}
	}
	resp := &managerpb.JobByIdResponse{
		Job: &managerpb.JobWithHistory{Job: &managerpb.Job{JobId: &commonpb.JobId{JobId: "j"}, CurrentHash: 22,
			UpdateStrategy: managerpb.UpdateStrategy_UPDATE_STRATEGY_MIGRATE}},
		Instances: []*managerpb.RunningJob{rj("backup", 0, false), rj("primary", 11, true), rj("spare", 22, false)},
	}
	var b strings.Builder
	if err := writeJobDetails(&b, resp); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"Updates:      migrate (running instances are moved to the new definition, make-before-break)\n",
		"  backup on node n1\n",
		"  primary on node n1: runs definition hash 11; current 22: rolling update in progress\n",
		"  spare on node n1\n",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("job get printed:\n%s\nwant a line %q", b.String(), want)
		}
	}
	// IN_PLACE: nothing moves it; a restart or a move applies it.
	resp.Job.Job.UpdateStrategy = managerpb.UpdateStrategy_UPDATE_STRATEGY_IN_PLACE
	b.Reset()
	if err := writeJobDetails(&b, resp); err != nil {
		t.Fatal(err)
	}
	if want := "  primary on node n1: runs definition hash 11; current 22: restart or migrate to apply\n"; !strings.Contains(b.String(), want) {
		t.Errorf("job get printed:\n%s\nwant a line %q", b.String(), want)
	}
}

// TestWriteBundleDetails_Drift: "bundle get" shows the update strategy
// and a stale derived job in its status.
func TestWriteBundleDetails_Drift(t *testing.T) {
	info := &managerpb.BundleInfo{
		Bundle: &managerpb.Bundle{BundleId: &managerpb.BundleId{BundleId: "b"}, UpdateStrategy: managerpb.UpdateStrategy_UPDATE_STRATEGY_MIGRATE},
		Jobs: []*managerpb.BundleJobStatus{{JobName: "enc", JobId: &commonpb.JobId{JobId: "b.0.enc"}, Synced: true, DefinitionStale: true},
			{JobName: "pkg", JobId: &commonpb.JobId{JobId: "b.0.pkg"}, Synced: true}},
		Converged: true,
	}
	var b strings.Builder
	if err := writeBundleDetails(&b, info); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	if !strings.Contains(out, "Updates:    migrate (") {
		t.Errorf("bundle get printed:\n%s\nwant the update strategy", out)
	}
	if !strings.Contains(out, "synced, runs a stale definition (rolling update in progress)") || strings.Count(out, "stale") != 1 {
		t.Errorf("bundle get printed:\n%s\nwant b.0.enc (only) shown stale", out)
	}
}

// TestCtlReadFiles_UpdateStrategy: job and bundle files carry the
// strategy as "updateStrategy" with the enum's name (protojson), as the
// README shows.
func TestCtlReadFiles_UpdateStrategy(t *testing.T) {
	dir := t.TempDir()
	jobFile, bundleFile := filepath.Join(dir, "job.json"), filepath.Join(dir, "bundle.json")
	if err := os.WriteFile(jobFile, []byte(`{"jobId": {"jobId": "j"}, "updateStrategy": "UPDATE_STRATEGY_MIGRATE"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bundleFile, []byte(`{"updateStrategy": "UPDATE_STRATEGY_MIGRATE", "jobs": [{"jobName": "a"}]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := &cobra.Command{}
	j, err := ctlReadJobFile(cmd, jobFile)
	if err != nil || j.GetUpdateStrategy() != managerpb.UpdateStrategy_UPDATE_STRATEGY_MIGRATE {
		t.Errorf("job file: %v, %v", j, err)
	}
	b, err := ctlReadBundleFile(cmd, bundleFile)
	if err != nil || b.GetUpdateStrategy() != managerpb.UpdateStrategy_UPDATE_STRATEGY_MIGRATE {
		t.Errorf("bundle file: %v, %v", b, err)
	}
}
