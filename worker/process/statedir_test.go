//go:build linux

package process

import (
	"errors"
	"os"
	"testing"

	"github.com/norsk-oss/norsk-manager/worker"
)

// TestRuntime_New_StateDirInUse: two runtimes over one state directory at
// once would both adopt its jobs, so the second New is refused, naming the
// directory and the holder; once the first is shut down the directory is
// free again.
func TestRuntime_New_StateDirInUse(t *testing.T) {
	dir := t.TempDir()
	first, err := New(testConfig(t, dir))
	if err != nil {
		t.Fatal(err)
	}
	_, err = New(testConfig(t, dir))
	var inUse *worker.StateDirInUseError
	if !errors.Is(err, worker.ErrStateDirInUse) || !errors.As(err, &inUse) || inUse.Dir != dir || inUse.PID != os.Getpid() {
		first.Shutdown()
		t.Fatalf("second New: err = %v; want a *worker.StateDirInUseError for %s held by pid %d", err, dir, os.Getpid())
	}
	first.Shutdown()

	again, err := New(testConfig(t, dir))
	if err != nil {
		t.Fatalf("New after Shutdown: %v", err)
	}
	again.Shutdown()
}
