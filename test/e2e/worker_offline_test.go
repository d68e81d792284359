package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/norsk-oss/norsk-manager/client"
	"github.com/norsk-oss/norsk-manager/proto/commonpb"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
	"github.com/norsk-oss/norsk-manager/test/testproc"
)

// TestE2E_OutputWhileManagerDown_ReachesEventStream: a job prints and
// fails while its manager is SIGKILLed; the worker keeps the lines, and
// once the manager is back and has re-dialed it, they appear on the event
// stream, each once and in order. (The worker sends them before
// job_failed — worker.TestAgent_InfoWhileDisconnected_SentToNextSession —
// but the manager records job_info in the node's grain and the failure in
// the job's, so the stream does not order the two.)
func TestE2E_OutputWhileManagerDown_ReachesEventStream(t *testing.T) {
	ctx := context.Background()
	dataDir := filepath.Join(t.TempDir(), "data")
	mport, wport := testproc.FreePort(t), testproc.FreePort(t)
	m := startManager(t, dataDir, mport)
	mc := connect(t, m.addr)
	nodeID, token, err := mc.RegisterClusterNode(ctx, "offline", nil)
	require.NoError(t, err)

	ev := &testproc.EventLog{}
	evCtx, stopEvents := context.WithCancel(ctx)
	defer stopEvents()
	go func() {
		_ = mc.EventStream(evCtx, client.EventStreamSettings{PendingWindow: time.Hour, OnEvent: ev.Add})
	}()

	w := startWorker(t, token, m.addr, filepath.Join(t.TempDir(), "worker"), wport)
	testproc.Eventually(t, 20*time.Second, "worker online", func() bool { return nodeConnected(t, mc, string(nodeID)) })

	dir := testproc.JobFilesDir(t)
	trigger := filepath.Join(dir, "go")
	_, err = mc.CreateJob(ctx, &managerpb.Job{
		JobId: &commonpb.JobId{JobId: "chatty"},
		Services: []*commonpb.Service{{
			Name:    "app",
			Command: fmt.Sprintf("while [ ! -f %s ]; do sleep 0.05; done; for i in 1 2 3 4 5; do echo offline line $i; done; exit 3", trigger),
			Restart: commonpb.Service_NEVER,
		}},
	})
	require.NoError(t, err)
	require.NoError(t, mc.StartJob(ctx, "chatty", "primary", nodeID))
	testproc.Eventually(t, 20*time.Second, "job_running event", func() bool {
		return ev.Has(jobUpdate("chatty", func(h *managerpb.JobHistoryEntry) bool { return h.GetJobRunning() != nil }))
	})

	m.Kill()
	require.NoError(t, os.WriteFile(trigger, nil, 0o600))
	// The worker logs the failure as it publishes it, after the lines the
	// job printed before it: they were all published with no session up.
	testproc.Eventually(t, 10*time.Second, "the worker saw the job fail", func() bool {
		return strings.Contains(w.Output(), `msg="job failed" component=worker job_id=chatty`)
	})
	m = startManager(t, dataDir, mport)

	line := func(i int) func(*managerpb.EventStreamEvent) bool {
		return func(e *managerpb.EventStreamEvent) bool {
			return e.GetJobInfo().GetJobKey().GetJobId().GetJobId() == "chatty" &&
				e.GetJobInfo().GetContainerEvent().GetText() == fmt.Sprintf("stdout: offline line %d", i)
		}
	}
	testproc.Eventually(t, 30*time.Second, "the lines printed while the manager was down", func() bool { return ev.Has(line(5)) })
	stopped := jobUpdate("chatty", func(h *managerpb.JobHistoryEntry) bool { return h.GetJobStopped() != nil })
	testproc.Eventually(t, 20*time.Second, "the job's failure", func() bool { return ev.Has(stopped) })
	var order []int
	for _, e := range ev.Snapshot() {
		for i := 1; i <= 5; i++ {
			if line(i)(e) {
				order = append(order, i)
			}
		}
	}
	require.Equal(t, []int{1, 2, 3, 4, 5}, order, "each line once, in order")
}
