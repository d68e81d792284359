package process

import (
	"context"
	"strings"
	"testing"

	"github.com/norsk-oss/norsk-manager/worker"
)

// TestRuntime_RelativeStateDir: a relative StateDir (norsk-ctl
// --mode=worker --state-dir=w1, as an operator types it) runs jobs as an
// absolute one does. Before, the shell of each service, started in the
// job's directory, could not write its exit file under the relative path
// ("cannot create w1/process/jobs/…/run/….exit: Directory nonexistent"),
// so every service's exit code was lost.
func TestRuntime_RelativeStateDir(t *testing.T) {
	t.Chdir(t.TempDir())
	r, c := newTestRuntime(t, "state", nil)
	job := testJob("job-rel", svc("app", "exit 3"))
	key := worker.KeyOf(job)
	if _, err := r.Start(context.Background(), job); err != nil {
		t.Fatal(err)
	}
	ev := c.Wait(t, "job_failed", isKind(key, worker.EventFailed))
	if !strings.Contains(ev.Reason, "exited with code 3") || strings.Contains(ev.Reason, "cannot create") {
		t.Errorf("reason %q: want the service's own exit code 3", ev.Reason)
	}
}
