package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
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

func jobUpdate(id string, last func(*managerpb.JobHistoryEntry) bool) func(*managerpb.EventStreamEvent) bool {
	return func(ev *managerpb.EventStreamEvent) bool {
		jh := ev.GetJobUpdated().GetJobWithHistory()
		h := jh.GetHistoryEntry()
		return jh.GetJob().GetJobId().GetJobId() == id && len(h) > 0 && last(h[len(h)-1])
	}
}

func historyKinds(r *managerpb.JobByIdResponse) []string {
	var out []string
	for _, h := range r.GetJob().GetHistoryEntry() {
		out = append(out, strings.TrimPrefix(fmt.Sprintf("%T", h.GetHistoryEntry()), "*managerpb.JobHistoryEntry_Job"))
	}
	return out
}

// webJob is a one-service job running norsk-ctl's demo HTTP server on
// port, writing its pid to pidFile first.
func webJob(id, pidFile string, port int) *managerpb.Job {
	return &managerpb.Job{
		JobId: &commonpb.JobId{JobId: id},
		Tags:  map[string]string{"suite": "e2e"},
		Services: []*commonpb.Service{{
			Name:    "web",
			Command: fmt.Sprintf("echo $$ > %s; exec norsk-ctl demo http --listen %s", pidFile, testproc.Addr(port)),
			Restart: commonpb.Service_NEVER,
		}},
	}
}

func httpOK(port int) bool {
	c := http.Client{Timeout: time.Second}
	resp, err := c.Get("http://" + testproc.Addr(port) + "/")
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode == 200 && strings.Contains(string(b), "hello")
}

func connect(t *testing.T, managerAddr string) *client.NorskManager {
	t.Helper()
	m, err := client.Connect(context.Background(), client.Settings{URL: managerAddr, Timeout: 10 * time.Second})
	require.NoError(t, err)
	t.Cleanup(func() { m.Close() })
	return m
}

func nodeConnected(t *testing.T, m *client.NorskManager, id string) bool {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	nodes, err := m.ListNodes(ctx)
	if err != nil {
		return false
	}
	for _, n := range nodes {
		if n.GetMetadata().GetNodeId().GetNodeId() == id {
			return n.GetConnected() && n.GetState() == managerpb.NodeLifecycle_NODE_LIFECYCLE_STARTED
		}
	}
	return false
}

// TestE2E_JobLifecycleAcrossRestarts drives real processes: a manager and a
// worker on a cluster slot; a job whose process must survive a SIGKILL of
// the manager and of the worker, with an event client that resumes without
// gap or duplicate.
func TestE2E_JobLifecycleAcrossRestarts(t *testing.T) {
	ctx := context.Background()
	dataDir := filepath.Join(t.TempDir(), "data")
	mport, wport, webPort := testproc.FreePort(t), testproc.FreePort(t), testproc.FreePort(t)
	m := startManager(t, dataDir, mport)
	mc := connect(t, m.addr)

	// Register the slot with the CLI, as an operator would.
	out, code := ctl(t, m.addr, "slot", "register", "e2e-worker", "--output", "json")
	require.Equal(t, 0, code, out)
	var nodeID, token string
	slots, err := mc.ListClusterNodes(ctx)
	require.NoError(t, err)
	require.Len(t, slots, 1)
	nodeID, token = slots[0].GetNodeId().GetNodeId(), slots[0].GetToken()
	require.Contains(t, out, token)

	ev := &testproc.EventLog{}
	evCtx, stopEvents := context.WithCancel(ctx)
	defer stopEvents()
	go func() {
		_ = mc.EventStream(evCtx, client.EventStreamSettings{PendingWindow: time.Hour, OnEvent: ev.Add})
	}()
	testproc.Eventually(t, 10*time.Second, "event snapshot", func() bool {
		return ev.Has(func(e *managerpb.EventStreamEvent) bool { return e.GetInitialDataComplete() != nil })
	})

	stateDir := filepath.Join(t.TempDir(), "worker")
	w := startWorker(t, token, m.addr, stateDir, wport)
	testproc.Eventually(t, 20*time.Second, "worker online", func() bool { return nodeConnected(t, mc, nodeID) })
	require.True(t, ev.Has(func(e *managerpb.EventStreamEvent) bool { return e.GetNodeStarting() != nil }), "node_starting")
	testproc.Eventually(t, 5*time.Second, "node_started event", func() bool {
		return ev.Has(func(e *managerpb.EventStreamEvent) bool { return e.GetNodeStarted() != nil })
	})

	pidFile := filepath.Join(testproc.JobFilesDir(t), "web.pid")
	_, err = mc.CreateJob(ctx, webJob("web", pidFile, webPort))
	require.NoError(t, err)
	require.NoError(t, mc.StartJob(ctx, "web", "primary", client.NodeID(nodeID)))
	testproc.Eventually(t, 20*time.Second, "job_running event", func() bool {
		return ev.Has(jobUpdate("web", func(h *managerpb.JobHistoryEntry) bool { return h.GetJobRunning() != nil }))
	})
	testproc.Eventually(t, 10*time.Second, "the service answers HTTP", func() bool { return httpOK(webPort) })
	pid, ok := testproc.ReadPID(pidFile)
	require.True(t, ok, "service pid file")
	require.True(t, ev.Has(func(e *managerpb.EventStreamEvent) bool { return e.GetJobInfo() != nil }), "job_info from the worker")
	before, err := mc.JobByID(ctx, "web")
	require.NoError(t, err)

	// SIGKILL the manager mid-stream and start it again on the same data.
	m.Kill()
	require.True(t, testproc.PIDAlive(pid), "the job must outlive the manager")
	m = startManager(t, dataDir, mport)
	testproc.Eventually(t, 30*time.Second, "worker re-dialled after the manager restart", func() bool { return nodeConnected(t, mc, nodeID) })
	after, err := mc.JobByID(ctx, "web")
	require.NoError(t, err)
	require.Equal(t, historyKinds(before), historyKinds(after), "state and history intact; nothing restarted")
	require.Len(t, after.GetInstances(), 1)
	cur, ok := testproc.ReadPID(pidFile)
	require.True(t, ok)
	require.Equal(t, pid, cur, "the job's process keeps its PID")
	require.True(t, testproc.PIDAlive(pid))
	require.True(t, httpOK(webPort))

	// SIGKILL the worker and start it again: it re-adopts the process.
	w.Kill()
	require.True(t, testproc.PIDAlive(pid), "the job must outlive the worker")
	w = startWorker(t, token, m.addr, stateDir, wport)
	testproc.Eventually(t, 30*time.Second, "worker back", func() bool { return nodeConnected(t, mc, nodeID) })
	testproc.Eventually(t, 10*time.Second, "instance still recorded", func() bool {
		r, err := mc.JobByID(ctx, "web")
		return err == nil && len(r.GetInstances()) == 1
	})
	again, err := mc.JobByID(ctx, "web")
	require.NoError(t, err)
	require.Equal(t, historyKinds(before), historyKinds(again), "a worker restart re-adopts; it does not restart the job")
	require.True(t, testproc.PIDAlive(pid))
	require.True(t, httpOK(webPort))

	// A change after both restarts reaches the resumed event client.
	_, err = mc.CreateJob(ctx, &managerpb.Job{JobId: &commonpb.JobId{JobId: "after"}})
	require.NoError(t, err)
	testproc.Eventually(t, 20*time.Second, "event after the restarts", func() bool {
		return ev.Has(func(e *managerpb.EventStreamEvent) bool {
			return e.GetJobUpdated().GetJobWithHistory().GetJob().GetJobId().GetJobId() == "after"
		})
	})

	// Stop and complete.
	require.NoError(t, mc.StopJob(ctx, "web", "primary", client.NodeID(nodeID)))
	testproc.Eventually(t, 20*time.Second, "job_stopped event", func() bool {
		return ev.Has(jobUpdate("web", func(h *managerpb.JobHistoryEntry) bool { return h.GetJobStopped() != nil }))
	})
	testproc.Eventually(t, 10*time.Second, "service process gone", func() bool { return !testproc.PIDAlive(pid) })
	require.NoError(t, mc.CompleteJob(ctx, "web"))
	testproc.Eventually(t, 10*time.Second, "job_completed event", func() bool {
		return ev.Has(jobUpdate("web", func(h *managerpb.JobHistoryEntry) bool { return h.GetJobCompleted() != nil }))
	})
	final, err := mc.JobByID(ctx, "web")
	require.NoError(t, err)
	require.Equal(t, managerpb.Job_POST, final.GetJob().GetJob().GetState())
	require.Equal(t, []string{"Created", "Provisioned", "Running", "Stopping", "Stopped", "Completed"}, historyKinds(final))
	require.NoError(t, ev.CheckExactlyOnce())

	// The CLI reads the same state.
	out, code = ctl(t, m.addr, "job", "get", "web")
	require.Equal(t, 0, code, out)
	require.Contains(t, out, "web")
	w.Stop()
	m.Stop()
}

// TestE2E_DeregisterSlot: deregistering a slot stops the worker's jobs,
// closes its stream and revokes its token; the worker exits.
func TestE2E_DeregisterSlot(t *testing.T) {
	ctx := context.Background()
	mport, wport, webPort := testproc.FreePort(t), testproc.FreePort(t), testproc.FreePort(t)
	m := startManager(t, filepath.Join(t.TempDir(), "data"), mport)
	mc := connect(t, m.addr)
	nodeID, token, err := mc.RegisterClusterNode(ctx, "doomed", nil)
	require.NoError(t, err)
	w := startWorker(t, token, m.addr, filepath.Join(t.TempDir(), "worker"), wport)
	testproc.Eventually(t, 20*time.Second, "worker online", func() bool { return nodeConnected(t, mc, string(nodeID)) })
	pidFile := filepath.Join(testproc.JobFilesDir(t), "web.pid")
	_, err = mc.CreateJob(ctx, webJob("j", pidFile, webPort))
	require.NoError(t, err)
	require.NoError(t, mc.StartJob(ctx, "j", "primary", nodeID))
	testproc.Eventually(t, 20*time.Second, "service up", func() bool { return httpOK(webPort) })
	pid, _ := testproc.ReadPID(pidFile)

	require.NoError(t, mc.DeregisterClusterNode(ctx, nodeID))
	testproc.Eventually(t, 20*time.Second, "the job's process stopped", func() bool { return !testproc.PIDAlive(pid) })
	code, exited := w.Exited(30 * time.Second)
	require.True(t, exited, "the worker of a deregistered slot must exit")
	require.NotEqual(t, 0, code)
	r, err := mc.JobByID(ctx, "j")
	require.NoError(t, err)
	require.Empty(t, r.GetInstances())
	_, err = mc.ClusterMemberRegister(ctx, &managerpb.ClusterMemberRegisterRequest{Token: token, Address: "127.0.0.1", Port: uint32(wport)})
	require.Error(t, err)
	require.Contains(t, err.Error(), "revoked")
}

// TestE2E_RefusesBadDataDir: the manager exits with a clear error, never
// silently starting empty.
func TestE2E_RefusesBadDataDir(t *testing.T) {
	foreign := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(foreign, "notes.txt"), []byte("x"), 0o600))
	p := start(t, "manager-foreign", "norsk-manager", "--data-dir", foreign, "--api-addr", testproc.Addr(testproc.FreePort(t)))
	code, ok := p.Exited(20 * time.Second)
	require.True(t, ok, "manager should refuse the dir and exit")
	require.NotEqual(t, 0, code)
	require.Contains(t, p.Output(), "not a norsk-manager data dir")

	// A data dir whose store vanished.
	dir := filepath.Join(t.TempDir(), "data")
	port := testproc.FreePort(t)
	m := startManager(t, dir, port)
	m.Stop()
	require.NoError(t, os.RemoveAll(filepath.Join(dir, "store")))
	p = start(t, "manager-missing", "norsk-manager", "--data-dir", dir, "--api-addr", testproc.Addr(port))
	code, ok = p.Exited(20 * time.Second)
	require.True(t, ok)
	require.NotEqual(t, 0, code)
	require.Contains(t, p.Output(), "refusing to start with empty state")
}

// TestE2E_RefusesDataDirOfOtherMode: a data dir records whether a single
// manager or a cluster member uses it, and a manager started in the other
// mode exits with an error naming the dir, both modes and what to do,
// without touching it (a single manager's writes never went through Raft;
// a single manager on a member's dir would dial the cluster's workers and
// accept writes the cluster never sees).
func TestE2E_RefusesDataDirOfOtherMode(t *testing.T) {
	clusterFlags := func() []string {
		return []string{"--name", "m1", "--bootstrap-expect", "1", "--cluster-timings", "local",
			"--gossip-addr", testproc.Addr(testproc.FreePort(t)), "--cluster-addr", testproc.Addr(testproc.FreePort(t)), "--raft-addr", testproc.Addr(testproc.FreePort(t))}
	}
	cases := []struct {
		name        string
		first, then []string // extra flags of the first (serving) run and of the refused one
		want        []string
	}{
		{"single dir started as a cluster member", nil, clusterFlags(),
			[]string{`holds a single manager's state (mode "single"`, "as a cluster member", "fresh --data-dir"}},
		{"cluster member's dir started as a single manager", clusterFlags(), nil,
			[]string{`holds a cluster member's state (mode "cluster"`, "as a single manager",
				"this data dir belongs to a cluster member; start it with its cluster flags", "fresh --data-dir"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "data")
			port := testproc.FreePort(t)
			m := startManager(t, dir, port, tc.first...)
			out, code := ctl(t, m.addr, "job", "create", "-f", filepath.Join("..", "..", "examples", "hello-http", "job.json"))
			require.Equal(t, 0, code, out)
			m.Stop()
			before := treeOf(t, dir)

			args := append([]string{"norsk-manager", "--data-dir", dir, "--api-addr", testproc.Addr(port)}, tc.then...)
			p := start(t, "manager-other-mode", args...)
			code, ok := p.Exited(20 * time.Second)
			require.True(t, ok, "a manager started in the other mode must refuse the data dir and exit")
			require.NotEqual(t, 0, code)
			require.Contains(t, p.Output(), dir)
			for _, w := range tc.want {
				require.Contains(t, p.Output(), w)
			}
			require.Equal(t, before, treeOf(t, dir), "a refused data dir must be left untouched")

			// The dir still works in its own mode, with its job.
			m = startManager(t, dir, port, tc.first...)
			out, code = ctl(t, m.addr, "job", "get", "hello-http")
			require.Equal(t, 0, code, out)
			m.Stop()
		})
	}
}

// treeOf lists dir's files with their sizes and modification times.
func treeOf(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	require.NoError(t, filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		out[strings.TrimPrefix(p, dir)] = fmt.Sprintf("%d %s", fi.Size(), fi.ModTime())
		return nil
	}))
	return out
}
