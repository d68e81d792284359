package job_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/norsk-oss/norsk-manager/proto/commonpb"
	"github.com/norsk-oss/norsk-manager/proto/errorpb"
	"github.com/norsk-oss/norsk-manager/proto/internalpb"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
)

// TestJob_Preempt: the placement engine's PreemptJob marks the instance
// stopping with history reason JOB_STOPPED_PREEMPTED, keeps the preemption
// in the record and raises job_updated and job_preempted in one commit; on
// the wrong node it is refused and writes nothing; a repeat of its request
// id is answered without a second write.
func TestJob_Preempt(t *testing.T) {
	e := newEnv(t)
	e.do(t, "bulk", create(runnable(&managerpb.Job{JobId: &commonpb.JobId{JobId: "bulk"}})))
	require.Equal(t, errorpb.Code_OK, e.do(t, "bulk", start("primary", "n1")).GetCode())

	preempt := func(node string) *internalpb.JobCommand {
		return &internalpb.JobCommand{RequestId: "placement/preempt/bulk/primary/2", Cmd: &internalpb.JobCommand_Preempt{Preempt: &internalpb.PreemptJob{
			Role: "primary", NodeId: node, ForJobId: "news", ForRole: "primary", Reason: "news fits no node; stopping 1 LOW instance on node n1 makes room"}}}
	}
	h := head(e.store)
	wrong := preempt("n2")
	wrong.RequestId = "placement/preempt/bulk/primary/1"
	r := e.do(t, "bulk", wrong)
	require.Equal(t, errorpb.Code_FAILED_PRECONDITION, r.GetCode(), r.GetMessage())
	require.Empty(t, eventKinds(t, e.store, h))

	require.Equal(t, errorpb.Code_OK, e.do(t, "bulk", preempt("n1")).GetCode())
	evs, err := e.store.ReadEvents(h+1, 100)
	require.NoError(t, err)
	require.Len(t, evs, 2)
	require.NotNil(t, evs[0].GetEvent().GetJobUpdated())
	p := evs[1].GetEvent().GetJobPreempted()
	require.NotNil(t, p, "job_preempted in the same commit")
	require.Equal(t, "bulk", p.GetJobId().GetJobId())
	require.Equal(t, "news", p.GetForJobId().GetJobId())
	require.Equal(t, "n1", p.GetNodeId().GetNodeId())
	require.Contains(t, p.GetReason(), "makes room")

	rec := e.record(t, "bulk")
	require.Equal(t, internalpb.InstanceStatus_INSTANCE_STOPPING, rec.GetInstances()[0].GetStatus())
	hist := rec.GetJob().GetHistoryEntry()
	require.Equal(t, managerpb.JobHistoryJobStopping_JOB_STOPPED_PREEMPTED, hist[len(hist)-1].GetJobStopping().GetReason())
	require.Len(t, rec.GetPreemptions(), 1)
	require.Equal(t, "news", rec.GetPreemptions()[0].GetForJobId())
	require.Equal(t, "n1", rec.GetPreemptions()[0].GetNodeId())

	h = head(e.store)
	require.Equal(t, errorpb.Code_OK, e.do(t, "bulk", preempt("n1")).GetCode())
	require.Empty(t, eventKinds(t, e.store, h), "a repeat writes nothing")
}

// TestJob_PreemptOfAnotherInstanceIsStale: a PreemptJob naming an instance
// id stops only that instance: one decided on an older read (sent late by
// a leader that was frozen) finds another instance of the role on the node
// and changes nothing.
func TestJob_PreemptOfAnotherInstanceIsStale(t *testing.T) {
	e := newEnv(t)
	runningJob(t, e, "j")
	in := e.record(t, "j").GetInstances()[0]
	require.NotEmpty(t, in.GetInstanceId())
	preempt := func(reqID, id string) *internalpb.Reply {
		return e.do(t, "j", &internalpb.JobCommand{RequestId: reqID, Cmd: &internalpb.JobCommand_Preempt{Preempt: &internalpb.PreemptJob{
			Role: "primary", NodeId: "n1", ForJobId: "news", ForRole: "primary", Reason: "room", InstanceId: id}}})
	}
	h := head(e.store)
	r := preempt("placement/preempt/j/primary/1", "j-primary-earlier")
	require.Equal(t, errorpb.Code_FAILED_PRECONDITION, r.GetCode())
	require.Contains(t, r.GetMessage(), "stale preemption")
	require.Empty(t, eventKinds(t, e.store, h), "nothing written")
	rec := e.record(t, "j")
	require.Equal(t, internalpb.InstanceStatus_INSTANCE_RUNNING, rec.GetInstances()[0].GetStatus(), "nothing changed")
	require.Empty(t, rec.GetPreemptions())

	require.Equal(t, errorpb.Code_OK, preempt("placement/preempt/j/primary/2", in.GetInstanceId()).GetCode())
	rec = e.record(t, "j")
	require.Equal(t, internalpb.InstanceStatus_INSTANCE_STOPPING, rec.GetInstances()[0].GetStatus())
	require.Len(t, rec.GetPreemptions(), 1)
}
