package docker

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/norsk-oss/norsk-manager/worker"
)

// TestCheckBinds: a bind mount may not show a container the worker's
// state directory or TLS key: not the paths themselves, nothing inside
// them, no directory above them, not through a symbolic link.
func TestCheckBinds(t *testing.T) {
	base := t.TempDir()
	state := filepath.Join(base, "state")
	keys := filepath.Join(base, "keys")
	key := filepath.Join(keys, "worker.key")
	for _, d := range []string{filepath.Join(state, "process"), keys, filepath.Join(base, "state-jobs"), filepath.Join(base, "media")} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(key, []byte("key"), 0o600); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(base, "innocent")
	if err := os.Symlink(state, link); err != nil {
		t.Fatal(err)
	}
	protected := []string{state, key}
	for _, tc := range []struct {
		source string
		want   string // the protected path named; "" allowed
	}{
		{state, state},
		{state + "/", state},
		{filepath.Join(state, "process"), state},
		{filepath.Join(state, "identity.json"), state},
		{base, state},
		{"/", state},
		{link, state},
		{key, key},
		{keys, key},
		{filepath.Join(base, "state-jobs"), ""}, // a sibling whose name starts alike
		{filepath.Join(base, "media"), ""},
		{filepath.Join(base, "not-yet-there"), ""},
	} {
		specs := []*serviceSpec{{Name: "ok"}, {Name: "app", Binds: []bindMount{{Source: "/srv", Target: "/srv"}, {Source: tc.source, Target: "/mnt"}}}}
		err := checkBinds(specs, protected)
		if tc.want == "" {
			if err != nil {
				t.Errorf("bind of %s: %v; want it allowed", tc.source, err)
			}
			continue
		}
		want := `service "app" binds[1]: the bind mount of ` + tc.source + " at /mnt would show the container " + tc.want + ", which holds the worker's secrets"
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("bind of %s: err = %v; want %q", tc.source, err, want)
		}
	}
	if err := checkBinds([]*serviceSpec{{Name: "a", Binds: []bindMount{{Source: "/", Target: "/mnt"}}}}, nil); err != nil {
		t.Errorf("without protected paths: %v", err)
	}
}

// TestRuntime_BindOfStateDirRefused: a stack whose service binds the
// worker's state directory fails to start (job_failed, invalid job,
// naming the mount), and no container is created.
func TestRuntime_BindOfStateDirRefused(t *testing.T) {
	state := t.TempDir()
	e := newEnv(t, func(c *Config) { c.ProtectedPaths = []string{state} })
	web := e.stackService("web", "serve")
	web.Binds = []bindMount{{Source: filepath.Dir(state), Target: "/mnt/host", ReadOnly: true}}
	key, _, err := e.startStack("bind-state", &stackSpec{}, web)
	if !errors.Is(err, worker.ErrInvalidJob) || !strings.Contains(err.Error(), `service "web" binds[0]: the bind mount of `+filepath.Dir(state)) {
		t.Fatalf("err = %v; want an invalid job naming the mount", err)
	}
	ev := e.c.Wait(t, "job_failed", isKind(key, worker.EventFailed))
	if !strings.Contains(ev.Reason, "would show the container "+state) {
		t.Errorf("reason %q", ev.Reason)
	}
	if rjs := e.r.List(); len(rjs) != 0 {
		t.Errorf("jobs after the refusal: %v", rjs)
	}
}
