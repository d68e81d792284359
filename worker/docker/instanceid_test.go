//go:build linux

package docker

import (
	"context"
	"testing"
	"time"

	"github.com/norsk-oss/norsk-manager/proto/workerpb"
	"github.com/norsk-oss/norsk-manager/worker"
)

func isKindOf(key worker.JobKey, k worker.EventKind, instance string) func(worker.Event) bool {
	return func(ev worker.Event) bool { return ev.Key == key && ev.Kind == k && ev.Instance == instance }
}

// TestRuntime_InstanceID_EchoedAndPersisted: the provision's instance id
// is echoed in job_started, kept by a second provision and an update that
// name others, kept in the job's record across a worker restart, and named
// in the job_stopped; a stop that finds nothing running echoes its own id.
func TestRuntime_InstanceID_EchoedAndPersisted(t *testing.T) {
	e := newEnv(t, nil)
	provisioned := func(id string) *workerpb.WorkerJob {
		j := mkJob("iid", e.svc("web", "serve"))
		j.InstanceId = id
		return j
	}
	key := worker.KeyOf(provisioned(""))
	listed := func() string {
		t.Helper()
		got := e.r.List()
		if len(got) != 1 || got[0].Key() != key {
			t.Fatalf("List = %v", got)
		}
		return got[0].Job.GetInstanceId()
	}

	if _, err := e.r.Start(context.Background(), provisioned("iid-1")); err != nil {
		t.Fatal(err)
	}
	e.c.Wait(t, "job_started of iid-1", isKindOf(key, worker.EventStarted, "iid-1"))
	if _, err := e.r.Start(context.Background(), provisioned("iid-2")); err != nil {
		t.Fatal(err)
	}
	e.c.WaitN(t, 2, "job_started again, of iid-1", isKindOf(key, worker.EventStarted, "iid-1"))
	if err := e.r.Update(context.Background(), provisioned("iid-3")); err != nil {
		t.Fatal(err)
	}
	if got := listed(); got != "iid-1" {
		t.Fatalf("instance id after update %q, want iid-1", got)
	}

	e.r.Shutdown() // the worker exits; the container keeps running
	e.start(nil)
	if got := listed(); got != "iid-1" {
		t.Fatalf("instance id after a worker restart %q, want iid-1", got)
	}
	if err := e.r.StopInstance(context.Background(), key, "iid-0", time.Second); err != nil {
		t.Fatal(err)
	}
	e.c.Wait(t, "job_stopped of iid-1", isKindOf(key, worker.EventStopped, "iid-1"))
	if err := e.r.StopInstance(context.Background(), key, "iid-9", time.Second); err != nil {
		t.Fatal(err)
	}
	e.c.Wait(t, "job_stopped of iid-9", isKindOf(key, worker.EventStopped, "iid-9"))
}
