package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/norsk-oss/norsk-manager/cluster/agent"
)

// startTestManager starts a real single manager on a temporary data dir.
func startTestManager(t *testing.T) string {
	t.Helper()
	cfg := agent.DevConfig(t.TempDir())
	cfg.Store.SyncWrites = false
	cfg.Store.GCInterval = 0
	a, err := agent.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(a.Shutdown)
	return a.APIAddr()
}

const testBundleJSON = `{
  "bundleId": {"bundleId": "live1"},
  "pool": "eu",
  "jobs": [
    {"jobName": "enc", "job": {"description": "encoder", "tags": {"app": "live"}}},
    {"jobName": "pkg", "startMode": "manual", "job": {"description": "packager"}}
  ]
}`

// TestCtl_BundleWorkflow drives a bundle through its life against a real
// manager.
func TestCtl_BundleWorkflow(t *testing.T) {
	addr := startTestManager(t)
	file := filepath.Join(t.TempDir(), "bundle.json")
	if err := os.WriteFile(file, []byte(testBundleJSON), 0o600); err != nil {
		t.Fatal(err)
	}
	if got := mustRun(t, addr, "bundle", "create", "-f", file); got != "created bundle live1\n" {
		t.Fatalf("bundle create printed %q", got)
	}
	get := mustRun(t, addr, "bundle", "get", "live1")
	for _, want := range []string{"Bundle:     live1", "State:      live", "live1.0.enc", "live1.0.pkg"} {
		if !strings.Contains(get, want) {
			t.Errorf("bundle get lacks %q:\n%s", want, get)
		}
	}
	if !strings.Contains(mustRun(t, addr, "job", "search", "--tag", "dormant=true"), "live1.0.pkg") {
		t.Error("the manual job is not dormant")
	}
	if got := mustRun(t, addr, "bundle", "start", "live1", "pkg"); got != "started job pkg of bundle live1, replica 0\n" {
		t.Errorf("bundle start printed %q", got)
	}
	if out := mustRun(t, addr, "job", "search", "--tag", "dormant=true"); strings.Contains(out, "live1.0.pkg") {
		t.Errorf("started job still dormant:\n%s", out)
	}
	mustRun(t, addr, "bundle", "stop", "live1", "pkg")
	if !strings.Contains(mustRun(t, addr, "bundle", "list"), "live1") {
		t.Error("bundle list lacks live1")
	}
	r := runCtl(t, testCtx(), "", "--manager-url", addr, "bundle", "start", "live1", "nope")
	if r.code == 0 || !strings.Contains(r.stderr, "nope") {
		t.Errorf("start of an unknown job: exit %d, stderr %q", r.code, r.stderr)
	}

	// Update from standard input: drop pkg.
	upd := strings.Replace(testBundleJSON, `,
    {"jobName": "pkg", "startMode": "manual", "job": {"description": "packager"}}`, "", 1)
	if r := runCtl(t, testCtx(), upd, "--manager-url", addr, "bundle", "update", "-f", "-"); r.code != 0 {
		t.Fatalf("bundle update: exit %d: %s", r.code, r.stderr)
	}
	mustRun(t, addr, "bundle", "delete", "live1")
	deadline := time.Now().Add(10 * time.Second)
	for {
		r := runCtl(t, testCtx(), "", "--manager-url", addr, "bundle", "get", "live1")
		if r.code != 0 && strings.Contains(r.stderr, "not found") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("bundle not gone: exit %d %s", r.code, r.stdout)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if out := mustRun(t, addr, "job", "search", "--tag", "bundleId=live1"); strings.Contains(out, "live1.") {
		t.Errorf("derived jobs left:\n%s", out)
	}
}

// TestCtl_BundleCreateErrorSubject checks that a failed create names the
// bundle by its id, or as "new bundle" when the file has none (the
// manager would assign it).
func TestCtl_BundleCreateErrorSubject(t *testing.T) {
	addr := startTestManager(t)
	for _, c := range []struct {
		name, file, want string
	}{
		{"without id", `{"jobs": []}`, "invalid request: new bundle ("},
		{"with id", `{"bundleId": {"bundleId": "b9"}, "jobs": []}`, "invalid request: bundle b9 ("},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := runCtl(t, testCtx(), c.file, "--manager-url", addr, "bundle", "create", "-f", "-")
			if r.code != ctlExitUsage || !strings.Contains(r.stderr, c.want) || strings.Contains(r.stderr, "bundle  ") {
				t.Errorf("exit %d, stderr %q; want exit %d and %q", r.code, r.stderr, ctlExitUsage, c.want)
			}
		})
	}
}

// TestCtl_ExitCodesHelpNamesAborted checks that the exit-code table says
// where Aborted goes (exit 4, with precondition failed).
func TestCtl_ExitCodesHelpNamesAborted(t *testing.T) {
	for _, args := range [][]string{{"--help"}, {"bundle", "--help"}} {
		r := runCtl(t, testCtx(), "", args...)
		if r.code != 0 || !strings.Contains(r.stdout, "  4    precondition failed") || !strings.Contains(r.stdout, "or aborted (a concurrent request") {
			t.Errorf("%v: exit %d, the exit-code table lacks Aborted under 4:\n%s", args, r.code, r.stdout)
		}
	}
}
