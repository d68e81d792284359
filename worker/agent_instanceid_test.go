package worker_test

import (
	"testing"

	"github.com/norsk-oss/norsk-manager/proto/commonpb"
	"github.com/norsk-oss/norsk-manager/proto/workerpb"
	"github.com/norsk-oss/norsk-manager/worker"
)

// TestEvent_Message_InstanceID: each lifecycle event carries its instance
// id in the field the manager reads.
func TestEvent_Message_InstanceID(t *testing.T) {
	key := worker.JobKey{JobID: "j", Role: "primary"}
	cases := []struct {
		kind worker.EventKind
		got  func(*workerpb.WorkerMessage) string
	}{
		{worker.EventStarted, func(m *workerpb.WorkerMessage) string { return m.GetJobStarted().GetInstanceId() }},
		{worker.EventFailed, func(m *workerpb.WorkerMessage) string { return m.GetJobFailed().GetInstanceId() }},
		{worker.EventStopped, func(m *workerpb.WorkerMessage) string { return m.GetJobStopped().GetInstanceId() }},
	}
	for _, tc := range cases {
		t.Run(tc.kind.String(), func(t *testing.T) {
			m := worker.Event{Kind: tc.kind, Key: key, Instance: "iid-7"}.Message()
			if got := tc.got(m); got != "iid-7" {
				t.Errorf("instance id %q, want iid-7 (message %v)", got, m)
			}
		})
	}
}

func withInstance(job *workerpb.WorkerJob, id string) *workerpb.WorkerJob {
	job.InstanceId = id
	return job
}

func stopInstance(key worker.JobKey, id string, epoch uint64) *workerpb.NodeControllerMessage {
	k := key.Proto()
	k.InstanceId = id
	return &workerpb.NodeControllerMessage{Message: &workerpb.NodeControllerMessage_StopJob{StopJob: k}, SessionEpoch: epoch}
}

// TestAgent_InstanceID_Echoed: over a session, the worker echoes the
// provision's instance id in job_started, keeps it for a second provision
// naming another id, lists it in the next session's hello, names what ran
// in the job_stopped of a stop, and echoes the stop's id when nothing runs.
func TestAgent_InstanceID_Echoed(t *testing.T) {
	a, _, _ := registeredAgent(t, nil)
	addr := a.Addr().String()
	s1, _ := open(t, addr, "node-1", "secret-1", 1)
	job := sleeper("job-iid")
	key := worker.KeyOf(job)

	s1.send(t, provision(withInstance(sleeper("job-iid"), "iid-1"), 1))
	if got := s1.waitFor(t, "job_started", isStarted(key)).GetJobStarted().GetInstanceId(); got != "iid-1" {
		t.Fatalf("job_started instance id %q, want iid-1", got)
	}
	s1.send(t, provision(withInstance(sleeper("job-iid"), "iid-2"), 1))
	if got := s1.waitFor(t, "job_started again", isStarted(key)).GetJobStarted().GetInstanceId(); got != "iid-1" {
		t.Fatalf("job_started of a second provision names %q, want the running iid-1", got)
	}
	s1.cancel()
	s1.waitEnd(t)

	s2, h := open(t, addr, "node-1", "secret-1", 2)
	if len(h.GetRunningJobs()) != 1 || h.GetRunningJobs()[0].GetJob().GetInstanceId() != "iid-1" {
		t.Fatalf("hello running_jobs %v, want job-iid as iid-1", h.GetRunningJobs())
	}
	s2.send(t, stopInstance(key, "iid-2", 2))
	if got := s2.waitFor(t, "job_stopped", isStopped(key)).GetJobStopped().GetInstanceId(); got != "iid-1" {
		t.Fatalf("job_stopped names %q, want what ran: iid-1", got)
	}
	s2.send(t, stopInstance(key, "iid-2", 2))
	if got := s2.waitFor(t, "job_stopped of nothing", isStopped(key)).GetJobStopped().GetInstanceId(); got != "iid-2" {
		t.Fatalf("job_stopped of a stop that found nothing names %q, want the stop's iid-2", got)
	}
	failing := withInstance(sleeper("job-iid-bad"), "iid-3")
	failing.WriteFiles = []*commonpb.WriteFile{{Path: "../../etc/evil"}}
	s2.send(t, provision(failing, 2))
	if got := s2.waitFor(t, "job_failed", isFailed(worker.KeyOf(failing))).GetJobFailed().GetInstanceId(); got != "iid-3" {
		t.Fatalf("job_failed instance id %q, want iid-3", got)
	}
}
