package job_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/norsk-oss/norsk-manager/actors"
	"github.com/norsk-oss/norsk-manager/proto/commonpb"
	"github.com/norsk-oss/norsk-manager/proto/errorpb"
	"github.com/norsk-oss/norsk-manager/proto/internalpb"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
)

// nodeHandled waits until node n's grain handled what was sent to it
// before (a Get queued behind it) and returns the stops sent so far.
func (e *env) nodeHandled(t *testing.T, n string) []string {
	t.Helper()
	r, err := e.host.Request(context.Background(), actors.KindNode, n, &internalpb.NodeCommand{NodeId: n, Cmd: &internalpb.NodeCommand_Get{Get: &internalpb.GetNode{}}})
	require.NoError(t, err)
	require.Equal(t, errorpb.Code_OK, r.GetCode())
	return e.nodes.stopped()
}

// waitInstance polls the record until role has an instance with status.
func (e *env) waitInstance(t *testing.T, id, role string, status internalpb.InstanceStatus) *internalpb.Instance {
	t.Helper()
	var got *internalpb.Instance
	require.Eventually(t, func() bool {
		for _, in := range e.record(t, id).GetInstances() {
			if in.GetRole() == role && in.GetStatus() == status {
				got = in
				return true
			}
		}
		return false
	}, 10*time.Second, 10*time.Millisecond, "no %s instance of %s/%s", status, id, role)
	return got
}

func countHistory(rec *internalpb.JobRecord, entry string) int {
	n := 0
	for _, h := range history(rec) {
		if h == entry {
			n++
		}
	}
	return n
}

// TestJob_UnknownOutcomeAfterStartStopsNothing (issue 21 §2): the append
// that records a started instance fails with its outcome unknown (a Raft
// leader frozen mid-append). The instance may run on air by now — the
// grain must not stop it. It stays pending (a second StartJob is
// refused), the worker's job_started is adopted, and the grain decides
// again on the confirmed record: records it if the write was lost, keeps
// the one record if the write had committed, stops it only when the
// current record no longer wants it (the job completed meanwhile).
func TestJob_UnknownOutcomeAfterStartStopsNothing(t *testing.T) {
	for _, tc := range []struct {
		name      string
		committed bool // the failed append had in fact committed
		report    bool // the worker's job_started arrives while unsure
		complete  bool // the job is completed while unsure
	}{
		{name: "write lost, no report"},
		{name: "write lost, worker reports running", report: true},
		{name: "write committed, answer lost", committed: true},
		{name: "write committed, worker reports running", committed: true, report: true},
		{name: "job completed meanwhile", complete: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			e.do(t, "j", create(runnable(&managerpb.Job{JobId: &commonpb.JobId{JobId: "j"}})))
			if tc.committed {
				e.journal.lostAnswer.Store(true)
			} else {
				e.journal.failNext.Store(true)
			}
			cmd := start("primary", "n1")
			cmd.RequestId = "placement/j/primary/1"
			r := e.do(t, "j", cmd)
			if tc.committed {
				// The reload after the failed append finds the instance.
				require.Equal(t, errorpb.Code_OK, r.GetCode(), r.GetMessage())
			} else {
				require.Equal(t, errorpb.Code_UNAVAILABLE, r.GetCode(), r.GetMessage())
			}
			require.Empty(t, e.nodeHandled(t, "n1"), "an instance whose record's write had no verdict is never stopped for it")

			// Still being started (or recorded): a second start (another
			// engine's decision, on the record that does not show it) is
			// refused.
			again := start("primary", "n2")
			again.RequestId = "placement/j/primary/2"
			require.Equal(t, errorpb.Code_ALREADY_EXISTS, e.do(t, "j", again).GetCode())
			e.nodes.mu.Lock()
			require.Len(t, e.nodes.provisioned, 1, "nothing else provisioned")
			instance := e.nodes.provisioned[0].GetInstanceId()
			e.nodes.mu.Unlock()

			switch {
			case tc.complete:
				require.Equal(t, errorpb.Code_OK, e.do(t, "j", &internalpb.JobCommand{Cmd: &internalpb.JobCommand_Complete{Complete: &internalpb.CompleteJob{}}}).GetCode())
				e.nodes.waitStop(t, "n1/j/primary")
				e.nodes.mu.Lock()
				require.Equal(t, []string{instance}, e.nodes.stopIDs, "the stop names the instance the current record does not want")
				e.nodes.mu.Unlock()
				return
			case tc.report:
				rep := report(internalpb.InstanceReport_STARTED, "primary", "n1")
				rep.GetInstanceReport().InstanceId = instance
				require.Equal(t, errorpb.Code_OK, e.do(t, "j", rep).GetCode())
				e.waitInstance(t, "j", "primary", internalpb.InstanceStatus_INSTANCE_RUNNING)
			default:
				e.waitInstance(t, "j", "primary", internalpb.InstanceStatus_INSTANCE_PROVISIONING)
			}
			// The confirmation ran (the role is no longer pending: a start
			// is refused for the recorded instance, not the pending one).
			require.Eventually(t, func() bool {
				return slices.Contains([]string{`job "j" role "primary" is already provisioning on node "n1"`,
					`job "j" role "primary" is already running on node "n1"`}, e.do(t, "j", again).GetMessage())
			}, 10*time.Second, 10*time.Millisecond)
			rec := e.record(t, "j")
			require.Len(t, rec.GetInstances(), 1)
			require.Equal(t, instance, rec.GetInstances()[0].GetInstanceId())
			require.Equal(t, 1, countHistory(rec, "provisioned"), "recorded once: %v", history(rec))
			require.Empty(t, e.nodeHandled(t, "n1"))
			require.Empty(t, e.nodeHandled(t, "n2"))
		})
	}
}
