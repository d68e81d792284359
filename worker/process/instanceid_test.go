//go:build linux

package process

import (
	"context"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/norsk-oss/norsk-manager/proto/commonpb"
	"github.com/norsk-oss/norsk-manager/proto/workerpb"
	"github.com/norsk-oss/norsk-manager/worker"
)

// withInstance returns a copy of job provisioned as instance id.
func withInstance(job *workerpb.WorkerJob, id string) *workerpb.WorkerJob {
	c := proto.Clone(job).(*workerpb.WorkerJob)
	c.InstanceId = id
	return c
}

func isKindOf(key worker.JobKey, k worker.EventKind, instance string) func(worker.Event) bool {
	return func(ev worker.Event) bool { return ev.Key == key && ev.Kind == k && ev.Instance == instance }
}

func listedInstance(t *testing.T, r *Runtime, key worker.JobKey) string {
	t.Helper()
	for _, rj := range r.List() {
		if rj.Key() == key {
			return rj.Job.GetInstanceId()
		}
	}
	t.Fatalf("%s is not listed", key)
	return ""
}

// TestRuntime_InstanceID_EchoedAndPersisted: the instance id a job was
// provisioned with is echoed in its lifecycle events, kept by a second
// provision and by an update (which carry other ids), kept in the job's
// record across a worker restart, and a stop that finds nothing running
// echoes the id it names.
func TestRuntime_InstanceID_EchoedAndPersisted(t *testing.T) {
	dir := t.TempDir()
	a, ca := newTestRuntime(t, dir, nil)
	job := testJob("job-iid", svc("app", "exec sleep 30"))
	key := worker.KeyOf(job)

	if _, err := a.Start(context.Background(), withInstance(job, "iid-1")); err != nil {
		t.Fatal(err)
	}
	ca.Wait(t, "job_started of iid-1", isKindOf(key, worker.EventStarted, "iid-1"))
	if got := listedInstance(t, a, key); got != "iid-1" {
		t.Fatalf("List instance id %q, want iid-1", got)
	}

	// A provision of the running job keeps the running instance.
	if _, err := a.Start(context.Background(), withInstance(job, "iid-2")); err != nil {
		t.Fatal(err)
	}
	ca.WaitN(t, 2, "job_started again, of iid-1", isKindOf(key, worker.EventStarted, "iid-1"))
	if n := ca.Count(isKindOf(key, worker.EventStarted, "iid-2")); n != 0 {
		t.Errorf("job_started of iid-2 × %d: a provision of a running job took its id", n)
	}
	// So does an update.
	if err := a.Update(context.Background(), withInstance(job, "iid-3")); err != nil {
		t.Fatal(err)
	}
	if got := listedInstance(t, a, key); got != "iid-1" {
		t.Fatalf("List instance id after update %q, want iid-1", got)
	}

	a.Shutdown() // the worker goes away; the job stays
	b, cb := newTestRuntime(t, dir, nil)
	if got := listedInstance(t, b, key); got != "iid-1" {
		t.Fatalf("instance id after a worker restart %q, want iid-1", got)
	}

	// A stop naming another instance stops what runs; its job_stopped
	// names what ran.
	if err := b.StopInstance(context.Background(), key, "iid-0", time.Second); err != nil {
		t.Fatal(err)
	}
	cb.Wait(t, "job_stopped of iid-1", isKindOf(key, worker.EventStopped, "iid-1"))
	// A stop of nothing running echoes its own id, or none.
	if err := b.StopInstance(context.Background(), key, "iid-9", time.Second); err != nil {
		t.Fatal(err)
	}
	cb.Wait(t, "job_stopped of iid-9", isKindOf(key, worker.EventStopped, "iid-9"))
	if err := b.Stop(context.Background(), key, time.Second); err != nil {
		t.Fatal(err)
	}
	cb.Wait(t, "job_stopped without an id", isKindOf(key, worker.EventStopped, ""))
}

// TestRuntime_InstanceID_Failures: a job that cannot start and one that
// fails on its own report the instance id they were provisioned with.
func TestRuntime_InstanceID_Failures(t *testing.T) {
	r, c := newTestRuntime(t, t.TempDir(), nil)
	cases := []struct {
		name string
		job  *workerpb.WorkerJob
	}{
		{"invalid definition", withFiles(testJob("job-iid-bad", svc("app", "exec sleep 30")), "../escape")},
		{"service exits", testJob("job-iid-exit", &commonpb.Service{Name: "app", Command: "exit 3", Restart: commonpb.Service_NEVER})},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			job := withInstance(tc.job, "iid-"+tc.name)
			_, _ = r.Start(context.Background(), job)
			c.Wait(t, "job_failed with the id", isKindOf(worker.KeyOf(job), worker.EventFailed, job.GetInstanceId()))
		})
	}
}
