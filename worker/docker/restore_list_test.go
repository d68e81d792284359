//go:build linux

package docker

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/norsk-oss/norsk-manager/proto/commonpb"
	"github.com/norsk-oss/norsk-manager/test/testproc"
	"github.com/norsk-oss/norsk-manager/worker"
)

// TestRuntime_Restore_FailingJobListedUntilItEnds: a job a restarted
// worker finds failing (or stopping) is still in List until its
// containers are gone and job_failed is sent, as the process runtime does.
// Before, the Docker runtime left it out of List, so the manager's hello
// took the job as gone at once (reason node_stopped) while its containers
// ran for the stop grace, and the job_failed that followed, with the
// failure's text, no longer matched anything: `job get` showed no failure.
func TestRuntime_Restore_FailingJobListedUntilItEnds(t *testing.T) {
	longGrace := func(c *Config) { c.FailStopGrace = 2 * time.Minute }
	e := newEnv(t, longGrace)
	dies := e.svc("dies", "exit", "3", "--after", "1s")
	dies.Restart = commonpb.Service_NEVER
	dies.DependsOn = []string{"stub"}
	j := mkJob("failing", e.svc("stub", "sleep", "--ignore-term"), dies)
	key := worker.KeyOf(j)
	if _, err := e.r.Start(context.Background(), j); err != nil {
		t.Fatal(err)
	}
	e.c.Wait(t, "stub ignores SIGTERM", isInfo(key, "stub", "sleeping"))
	waitRecordPhase(t, e.dir, "failing")

	// The worker is SIGKILLed now: a copy of its state directory is what a
	// restarted worker finds (this runtime goes on stopping the stub with
	// its long grace, as the dead worker's would not; the kill below ends
	// it for both).
	copied := t.TempDir()
	if err := os.CopyFS(copied, os.DirFS(e.dir)); err != nil {
		t.Fatal(err)
	}
	e2 := &testEnv{t: t, cli: e.cli, image: e.image, dir: copied}
	e2.start(longGrace)
	listed := func() bool {
		for _, rj := range e2.r.List() {
			if rj.Key() == key {
				return true
			}
		}
		return false
	}
	if !listed() {
		t.Fatalf("List = %v after the restart; want the failing job %v until it ends", e2.r.List(), key)
	}
	// End the grace early: kill the stubborn container.
	stub := e.inspectService(key, "stub")
	if err := e.cli.ContainerKill(context.Background(), stub.ID, "KILL"); err != nil {
		t.Fatal(err)
	}
	failed := e2.c.Wait(t, "job_failed", isKind(key, worker.EventFailed))
	if !strings.Contains(failed.Reason, `service "dies" exited with code 3`) {
		t.Fatalf("job_failed reason %q; want the recorded failure", failed.Reason)
	}
	if listed() {
		t.Fatalf("List = %v after job_failed; want the job gone", e2.r.List())
	}
}

// waitRecordPhase waits until a job record under dir says phase.
func waitRecordPhase(t *testing.T, dir, phase string) {
	t.Helper()
	testproc.Eventually(t, time.Minute, "a job record in phase "+phase, func() bool {
		paths, _ := filepath.Glob(filepath.Join(dir, "jobs", "*", "job.json"))
		for _, p := range paths {
			if data, err := os.ReadFile(p); err == nil && strings.Contains(string(data), `"phase": "`+phase+`"`) {
				return true
			}
		}
		return false
	})
}
