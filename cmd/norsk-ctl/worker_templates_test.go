package main

import (
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/norsk-oss/norsk-manager/proto/commonpb"
)

// TestCtl_Worker_TemplateDirRefused: --template-dir with the process
// runtime is a usage error, and an unreadable --template-dir is fatal
// naming the flag, before the worker touches the Docker engine.
func TestCtl_Worker_TemplateDirRefused(t *testing.T) {
	cases := []struct {
		name string
		args []string
		exit int
		want string
	}{
		{"process runtime", []string{"--template-dir=" + t.TempDir()}, workerExitUsage,
			"norsk-ctl: --template-dir needs --runtime=docker"},
		{"missing directory", []string{"--runtime=docker", "--template-dir=" + filepath.Join(t.TempDir(), "nope")}, workerExitFailure,
			"norsk-ctl: --template-dir "},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv(ctlEnvManagerURL, "")
			args := append([]string{"--mode=worker", "--listen=127.0.0.1:0", "--state-dir=" + t.TempDir()}, tc.args...)
			r := runCtl(t, testCtx(), "", args...)
			if r.code != tc.exit || !strings.Contains(r.stderr, tc.want) {
				t.Fatalf("exit %d, stderr %q; want exit %d and %q", r.code, r.stderr, tc.exit, tc.want)
			}
			if strings.Contains(r.stderr, "worker listening") {
				t.Errorf("the worker started listening:\n%s", r.stderr)
			}
		})
	}
}

// TestWorkerOptions_LoadTemplates: the catalogue of --template-dir goes
// into the resources the worker reports (hello, registration), the other
// resources unchanged and the flags' copy untouched; a broken version is
// left out, not fatal.
func TestWorkerOptions_LoadTemplates(t *testing.T) {
	dir := t.TempDir()
	for _, v := range []string{"1.1", "1.0"} {
		if err := os.MkdirAll(filepath.Join(dir, "hello", v), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "hello", v, "compose.yaml"), []byte("services:\n  web:\n    image: example/probe:1\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.MkdirAll(filepath.Join(dir, "bad", "1"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "bad", "1", "compose.yaml"), []byte("services:\n  web:\n    image: x\n    privileged: true\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	o := &workerOptions{runtime: "docker", templateDir: dir}
	c, err := o.loadTemplates(testCtx(), slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	res := &commonpb.NodeResources{Capacity: 2, Zone: "z"}
	got := withTemplates(res, c)
	if got.GetCapacity() != 2 || got.GetZone() != "z" || len(res.GetTemplates()) != 0 {
		t.Fatalf("resources %v (flags' copy %v): want capacity and zone kept, the flags' copy untouched", got, res)
	}
	if ts := got.GetTemplates(); len(ts) != 1 || ts[0].GetName() != "hello" || strings.Join(ts[0].GetVersions(), ",") != "1.0,1.1" {
		t.Fatalf("templates %v, want hello (1.0, 1.1)", ts)
	}
	if withTemplates(res, nil) != res {
		t.Fatal("no catalogue changed the resources")
	}
}
