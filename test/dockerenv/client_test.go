package dockerenv

import (
	"fmt"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/docker/docker/api/types/versions"
)

// fakeTB records how a helper ended a test. Skipf and Fatalf end the calling
// goroutine, like the real ones.
type fakeTB struct {
	testing.TB
	skipped, failed bool
	msg             string
}

func (f *fakeTB) Helper()        {}
func (f *fakeTB) Cleanup(func()) {}
func (f *fakeTB) Skipf(format string, args ...any) {
	f.skipped, f.msg = true, fmt.Sprintf(format, args...)
	runtime.Goexit()
}
func (f *fakeTB) Fatalf(format string, args ...any) {
	f.failed, f.msg = true, fmt.Sprintf(format, args...)
	runtime.Goexit()
}

func TestClientUnreachable(t *testing.T) {
	tests := []struct {
		require   string
		wantSkip  bool
		wantInMsg string
	}{
		{require: "", wantSkip: true, wantInMsg: "set NORSK_REQUIRE_DOCKER=1 to fail instead"},
		{require: "0", wantSkip: true, wantInMsg: "docker engine not reachable"},
		{require: "1", wantSkip: false, wantInMsg: "NORSK_REQUIRE_DOCKER=1"},
	}
	for _, tc := range tests {
		t.Run("require="+tc.require, func(t *testing.T) {
			t.Setenv("DOCKER_HOST", "unix://"+filepath.Join(t.TempDir(), "missing.sock"))
			t.Setenv(RequireDockerEnv, tc.require)
			f := &fakeTB{}
			done := make(chan struct{})
			go func() {
				defer close(done)
				Client(f)
			}()
			<-done
			if f.skipped != tc.wantSkip || f.failed == tc.wantSkip {
				t.Fatalf("skipped=%v failed=%v (%q); want skipped=%v", f.skipped, f.failed, f.msg, tc.wantSkip)
			}
			if !strings.Contains(f.msg, tc.wantInMsg) {
				t.Errorf("message %q does not mention %q", f.msg, tc.wantInMsg)
			}
		})
	}
}

func TestClientReachable(t *testing.T) {
	cli := Client(t)
	sv, err := cli.ServerVersion(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if versions.GreaterThan(cli.ClientVersion(), sv.APIVersion) {
		t.Fatalf("client speaks API %s, engine %s (%s): not negotiated", cli.ClientVersion(), sv.APIVersion, sv.Version)
	}
	t.Logf("engine %s, API version %s", sv.Version, cli.ClientVersion())
}
