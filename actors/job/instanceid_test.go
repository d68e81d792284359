package job_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/norsk-oss/norsk-manager/proto/commonpb"
	"github.com/norsk-oss/norsk-manager/proto/errorpb"
	"github.com/norsk-oss/norsk-manager/proto/internalpb"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
)

// reportID is report with the worker's instance id set.
func reportID(kind internalpb.InstanceReport_Kind, role, node, id string) *internalpb.JobCommand {
	c := report(kind, role, node)
	c.GetInstanceReport().InstanceId = id
	return c
}

func stopCmd(role, node string) *internalpb.JobCommand {
	return &internalpb.JobCommand{Cmd: &internalpb.JobCommand_Stop{Stop: &internalpb.StopJob{Role: role, NodeId: node}}}
}

// provisionID returns the instance id of the n-th Provision (1-based)
// the node fake received, waiting for it.
func (f *fakeNodes) provisionID(t *testing.T, n int) string {
	t.Helper()
	var id string
	require.Eventually(t, func() bool {
		f.mu.Lock()
		defer f.mu.Unlock()
		if len(f.provisioned) < n {
			return false
		}
		id = f.provisioned[n-1].GetInstanceId()
		return true
	}, 5*time.Second, time.Millisecond, "provision %d never reached the node", n)
	return id
}

// runFirstInstance creates job "j", starts primary on n1, has it reported
// running, stops it and has its stop confirmed; it returns the instance
// id of that first instance.
func runFirstInstance(t *testing.T, e *env) string {
	t.Helper()
	e.do(t, "j", create(runnable(&managerpb.Job{JobId: &commonpb.JobId{JobId: "j"}})))
	require.Equal(t, errorpb.Code_OK, e.do(t, "j", start("primary", "n1")).GetCode())
	first := e.nodes.provisionID(t, 1)
	require.NotEmpty(t, first, "a provision carries an instance id")
	require.Equal(t, first, e.record(t, "j").GetInstances()[0].GetInstanceId(), "the instance is recorded with the provision's id")
	e.do(t, "j", reportID(internalpb.InstanceReport_STARTED, "primary", "n1", first))
	require.Equal(t, errorpb.Code_OK, e.do(t, "j", stopCmd("primary", "n1")).GetCode())
	e.nodes.waitStop(t, "n1/j/primary")
	e.nodes.mu.Lock()
	require.Equal(t, first, e.nodes.stopIDs[len(e.nodes.stopIDs)-1], "the stop names the recorded instance")
	e.nodes.mu.Unlock()
	e.do(t, "j", reportID(internalpb.InstanceReport_STOPPED, "primary", "n1", first))
	require.Empty(t, e.record(t, "j").GetInstances())
	return first
}

// TestJob_InstanceID_LateEndOfEarlierInstance is the freeze bench's false
// answer: a job stopped, then at once started again on the same node; the
// worker's job_stopped of the first instance (or the answer to a repeated
// stop of it) reaches the grain while the new start is pending, or after
// the new instance is recorded. It must not be taken for the new
// instance's end: the start is answered OK with a recorded instance, and
// StopJob finds it.
func TestJob_InstanceID_LateEndOfEarlierInstance(t *testing.T) {
	cases := []struct {
		name string
		kind internalpb.InstanceReport_Kind
		// whilePending: the late report arrives while the provision's
		// answer is held; otherwise once the new instance is recorded.
		whilePending bool
	}{
		{"stopped while pending", internalpb.InstanceReport_STOPPED, true},
		{"failed while pending", internalpb.InstanceReport_FAILED, true},
		{"stopped once recorded", internalpb.InstanceReport_STOPPED, false},
		{"failed once recorded", internalpb.InstanceReport_FAILED, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			first := runFirstInstance(t, e)
			histBefore := len(history(e.record(t, "j")))

			late := reportID(tc.kind, "primary", "n1", first)
			var second string
			if tc.whilePending {
				gate := make(chan struct{})
				e.nodes.gate.Store(&gate)
				started := make(chan *internalpb.Reply, 1)
				go func() { started <- e.do(t, "j", start("primary", "n1")) }()
				require.Eventually(t, func() bool { return e.nodes.held.Load() == 1 }, 5*time.Second, time.Millisecond)
				second = e.nodes.provisionID(t, 2)
				require.Equal(t, errorpb.Code_OK, e.do(t, "j", late).GetCode())
				close(gate)
				require.Equal(t, errorpb.Code_OK, (<-started).GetCode())
				e.nodes.gate.Store(nil)
			} else {
				require.Equal(t, errorpb.Code_OK, e.do(t, "j", start("primary", "n1")).GetCode())
				second = e.nodes.provisionID(t, 2)
				require.Equal(t, errorpb.Code_OK, e.do(t, "j", late).GetCode())
			}
			require.NotEqual(t, first, second, "each start attempt gets its own instance id")

			rec := e.record(t, "j")
			require.Len(t, rec.GetInstances(), 1, "the acknowledged start left an instance")
			in := rec.GetInstances()[0]
			require.Equal(t, second, in.GetInstanceId())
			require.Equal(t, internalpb.InstanceStatus_INSTANCE_PROVISIONING, in.GetStatus())
			require.Equal(t, []string{"provisioned"}, history(rec)[histBefore:], "the late report wrote nothing")
			require.Empty(t, rec.GetLastFailures(), "a late failure of the first instance is not recorded as a failure")

			// The new instance runs and is stopped normally.
			e.do(t, "j", reportID(internalpb.InstanceReport_STARTED, "primary", "n1", second))
			require.Equal(t, internalpb.InstanceStatus_INSTANCE_RUNNING, e.record(t, "j").GetInstances()[0].GetStatus())
			require.Equal(t, errorpb.Code_OK, e.do(t, "j", stopCmd("primary", "n1")).GetCode(), "StopJob finds the new instance")
			e.do(t, "j", reportID(internalpb.InstanceReport_STOPPED, "primary", "n1", second))
			require.Empty(t, e.record(t, "j").GetInstances())
		})
	}
}

// TestJob_InstanceID_EndWhilePendingOfThisInstance: a job_stopped or
// job_failed naming the very instance being started (a start refused at
// once) still ends it before the provision's answer arrives.
func TestJob_InstanceID_EndWhilePendingOfThisInstance(t *testing.T) {
	e := newEnv(t)
	e.do(t, "j", create(runnable(&managerpb.Job{JobId: &commonpb.JobId{JobId: "j"}})))
	gate := make(chan struct{})
	e.nodes.gate.Store(&gate)
	started := make(chan *internalpb.Reply, 1)
	go func() { started <- e.do(t, "j", start("primary", "n1")) }()
	require.Eventually(t, func() bool { return e.nodes.held.Load() == 1 }, 5*time.Second, time.Millisecond)
	id := e.nodes.provisionID(t, 1)
	failed := reportID(internalpb.InstanceReport_FAILED, "primary", "n1", id)
	failed.GetInstanceReport().Reason = "pull image x: refused"
	require.Equal(t, errorpb.Code_OK, e.do(t, "j", failed).GetCode())
	close(gate)
	require.Equal(t, errorpb.Code_OK, (<-started).GetCode())
	rec := e.record(t, "j")
	require.Empty(t, rec.GetInstances())
	require.Equal(t, []string{"created", "provisioned", "stopping:JOB_STOPPED_JOB_FAILED", "stopped"}, history(rec))
	require.Equal(t, "pull image x: refused", rec.GetLastFailures()[0].GetReason())
}

// TestJob_InstanceID_WorkerKeepsRunningInstance: the worker answers a
// provision of a (job, role) it already runs with job_started of the
// running instance, whose id differs from the attempt's. The record takes
// that id; a later end of the attempt's id (which never ran) changes
// nothing, and the running instance's end ends it.
func TestJob_InstanceID_WorkerKeepsRunningInstance(t *testing.T) {
	e := newEnv(t)
	e.do(t, "j", create(runnable(&managerpb.Job{JobId: &commonpb.JobId{JobId: "j"}})))
	require.Equal(t, errorpb.Code_OK, e.do(t, "j", start("primary", "n1")).GetCode())
	attempt := e.nodes.provisionID(t, 1)
	const running = "0123456789abcdef0123456789abcdef"
	e.do(t, "j", reportID(internalpb.InstanceReport_STARTED, "primary", "n1", running))
	in := e.record(t, "j").GetInstances()[0]
	require.Equal(t, running, in.GetInstanceId(), "the id of what the worker runs is recorded")
	require.Equal(t, internalpb.InstanceStatus_INSTANCE_RUNNING, in.GetStatus())

	e.do(t, "j", reportID(internalpb.InstanceReport_STOPPED, "primary", "n1", attempt))
	require.Len(t, e.record(t, "j").GetInstances(), 1, "the end of an id that is not recorded changes nothing")

	// A hello listing the same (job, role) with yet another id (the worker
	// was restarted with an instance it kept) is adopted too.
	const again = "fedcba9876543210fedcba9876543210"
	e.do(t, "j", reportID(internalpb.InstanceReport_STARTED, "primary", "n1", again))
	require.Equal(t, again, e.record(t, "j").GetInstances()[0].GetInstanceId())

	require.Equal(t, errorpb.Code_OK, e.do(t, "j", stopCmd("primary", "n1")).GetCode())
	e.nodes.waitStop(t, "n1/j/primary")
	e.nodes.mu.Lock()
	require.Equal(t, again, e.nodes.stopIDs[len(e.nodes.stopIDs)-1])
	e.nodes.mu.Unlock()
	e.do(t, "j", reportID(internalpb.InstanceReport_STOPPED, "primary", "n1", again))
	require.Empty(t, e.record(t, "j").GetInstances())
}

// TestJob_InstanceID_RetriedStartKeepsID: a StartJob retried with the same
// request id (it was not applied: the node refused the first attempt)
// provisions the same instance id; another request id gets another one.
func TestJob_InstanceID_RetriedStartKeepsID(t *testing.T) {
	e := newEnv(t)
	e.do(t, "j", create(runnable(&managerpb.Job{JobId: &commonpb.JobId{JobId: "j"}})))
	e.nodes.mu.Lock()
	e.nodes.online["n1"] = false
	e.nodes.mu.Unlock()
	withID := func(reqID string) *internalpb.JobCommand {
		c := start("primary", "n1")
		c.RequestId = reqID
		return c
	}
	require.Equal(t, errorpb.Code_FAILED_PRECONDITION, e.do(t, "j", withID("req-1")).GetCode())
	e.nodes.mu.Lock()
	e.nodes.online["n1"] = true
	e.nodes.mu.Unlock()
	require.Equal(t, errorpb.Code_OK, e.do(t, "j", withID("req-1")).GetCode())
	require.Equal(t, e.nodes.provisionID(t, 1), e.nodes.provisionID(t, 2), "a retried StartJob provisions the same instance")
	require.Equal(t, e.nodes.provisionID(t, 2), e.record(t, "j").GetInstances()[0].GetInstanceId())

	first := e.nodes.provisionID(t, 2)

	// Applied once: a third delivery is answered as a repeat, provisioning nothing.
	require.Equal(t, errorpb.Code_OK, e.do(t, "j", withID("req-1")).GetCode())
	e.nodes.mu.Lock()
	require.Len(t, e.nodes.provisioned, 2)
	e.nodes.mu.Unlock()

	require.Equal(t, errorpb.Code_OK, e.do(t, "j", stopCmd("primary", "n1")).GetCode())
	e.do(t, "j", reportID(internalpb.InstanceReport_STOPPED, "primary", "n1", first))
	require.Equal(t, errorpb.Code_OK, e.do(t, "j", withID("req-2")).GetCode())
	require.NotEqual(t, first, e.nodes.provisionID(t, 3), "another StartJob gets another instance id")
}

// TestJob_InstanceID_UnknownIDsKeepTodaysRules: reports without an id (a
// worker that predates instance ids) and records without one (written
// before them) follow the rules of (job, role, node): the end reported
// while a start is pending ends it.
func TestJob_InstanceID_UnknownIDsKeepTodaysRules(t *testing.T) {
	e := newEnv(t)
	e.do(t, "j", create(runnable(&managerpb.Job{JobId: &commonpb.JobId{JobId: "j"}})))
	// An instance adopted from an old worker has no id; any end ends it.
	e.do(t, "j", report(internalpb.InstanceReport_STARTED, "primary", "n1"))
	require.Empty(t, e.record(t, "j").GetInstances()[0].GetInstanceId())
	e.do(t, "j", reportID(internalpb.InstanceReport_STOPPED, "primary", "n1", "0123456789abcdef0123456789abcdef"))
	require.Empty(t, e.record(t, "j").GetInstances(), "an id against an unknown recorded id ends the instance")
}

// TestJob_InstanceID_StoppedBeforeItsStartWasReported: StopJob reaches an
// instance still provisioning under the attempt's id while the worker runs
// an instance it kept (another id). Its job_started then names that id:
// the record takes it and the stop is sent again naming it, so the
// worker's job_stopped of it ends the instance, and the late end of the
// attempt's id (the answer to the first stop) changes nothing.
func TestJob_InstanceID_StoppedBeforeItsStartWasReported(t *testing.T) {
	e := newEnv(t)
	e.do(t, "j", create(runnable(&managerpb.Job{JobId: &commonpb.JobId{JobId: "j"}})))
	require.Equal(t, errorpb.Code_OK, e.do(t, "j", start("primary", "n1")).GetCode())
	attempt := e.nodes.provisionID(t, 1)
	require.Equal(t, errorpb.Code_OK, e.do(t, "j", stopCmd("primary", "n1")).GetCode())
	e.nodes.waitStop(t, "n1/j/primary")

	const running = "0123456789abcdef0123456789abcdef"
	e.do(t, "j", reportID(internalpb.InstanceReport_STARTED, "primary", "n1", running))
	in := e.record(t, "j").GetInstances()[0]
	require.Equal(t, internalpb.InstanceStatus_INSTANCE_STOPPING, in.GetStatus())
	require.Equal(t, running, in.GetInstanceId(), "the id of what the worker runs is recorded")
	require.Eventually(t, func() bool {
		e.nodes.mu.Lock()
		defer e.nodes.mu.Unlock()
		return len(e.nodes.stopIDs) == 2 && e.nodes.stopIDs[1] == running
	}, 5*time.Second, time.Millisecond, "the stop is sent again naming the running instance")

	e.do(t, "j", reportID(internalpb.InstanceReport_STOPPED, "primary", "n1", attempt))
	require.Len(t, e.record(t, "j").GetInstances(), 1, "the end of the attempt that never ran changes nothing")
	e.do(t, "j", reportID(internalpb.InstanceReport_STOPPED, "primary", "n1", running))
	require.Empty(t, e.record(t, "j").GetInstances())
}
