package job_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/norsk-oss/norsk-manager/proto/commonpb"
	"github.com/norsk-oss/norsk-manager/proto/errorpb"
	"github.com/norsk-oss/norsk-manager/proto/internalpb"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
	"github.com/norsk-oss/norsk-manager/proto/workerpb"
)

// lastProvision is the WorkerJob of the latest Provision the fake nodes got.
func (f *fakeNodes) lastProvision(t *testing.T) *workerpb.WorkerJob {
	t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	require.NotEmpty(t, f.provisioned, "no provision sent")
	return f.provisioned[len(f.provisioned)-1]
}

// TestJob_StartCPUList: the cores of a StartJob (the placement engine's
// assignment) are sent as the provision's norsk_cpu_list instead of the
// job's own, and recorded on the instance; a start without them (manual)
// sends and records the job's own norsk_cpu_list, as before.
func TestJob_StartCPUList(t *testing.T) {
	cases := []struct {
		name   string
		own    []uint32 // the job's norsk_cpu_list
		engine []uint32 // StartJob.cpu_list
		want   []uint32
	}{
		{name: "engine cores", engine: []uint32{2, 3}, want: []uint32{2, 3}},
		{name: "manual start keeps the job's own list", own: []uint32{0, 5}, want: []uint32{0, 5}},
		{name: "engine cores override the job's own", own: []uint32{0}, engine: []uint32{6, 7}, want: []uint32{6, 7}},
		{name: "not pinned", want: nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			e.do(t, "j", create(runnable(&managerpb.Job{JobId: &commonpb.JobId{JobId: "j"}, NorskCpuList: tc.own})))
			cmd := start("primary", "n1")
			cmd.GetStart().CpuList = tc.engine
			require.Equal(t, errorpb.Code_OK, e.do(t, "j", cmd).GetCode())
			require.Equal(t, tc.want, e.nodes.lastProvision(t).GetNorskCpuList(), "norsk_cpu_list sent")
			rec := e.record(t, "j")
			require.Len(t, rec.GetInstances(), 1)
			require.Equal(t, tc.want, rec.GetInstances()[0].GetCpuList(), "cpu_list recorded")
			// Running keeps it.
			e.do(t, "j", report(internalpb.InstanceReport_STARTED, "primary", "n1"))
			rec = e.record(t, "j")
			require.Equal(t, internalpb.InstanceStatus_INSTANCE_RUNNING, rec.GetInstances()[0].GetStatus())
			require.Equal(t, tc.want, rec.GetInstances()[0].GetCpuList(), "cpu_list once running")
		})
	}
}

// TestJob_StartCPUListRunningBeforeAnswer: when the worker reports the
// instance running before the node grain answers the provision, the
// instance recorded from that report still carries the start's cores.
func TestJob_StartCPUListRunningBeforeAnswer(t *testing.T) {
	e := newEnv(t)
	e.do(t, "j", create(runnable(&managerpb.Job{JobId: &commonpb.JobId{JobId: "j"}})))
	gate := make(chan struct{})
	e.nodes.gate.Store(&gate)
	t.Cleanup(func() { e.nodes.gate.Store(nil) })
	cmd := start("primary", "n1")
	cmd.GetStart().CpuList = []uint32{4, 5}
	started := make(chan *internalpb.Reply, 1)
	go func() { started <- e.do(t, "j", cmd) }()
	require.Eventually(t, func() bool { return e.nodes.held.Load() == 1 }, 5*time.Second, time.Millisecond)
	require.Equal(t, errorpb.Code_OK, e.do(t, "j", report(internalpb.InstanceReport_STARTED, "primary", "n1")).GetCode())
	close(gate)
	require.Equal(t, errorpb.Code_OK, (<-started).GetCode())
	rec := e.record(t, "j")
	require.Len(t, rec.GetInstances(), 1)
	require.Equal(t, []uint32{4, 5}, rec.GetInstances()[0].GetCpuList())
}
