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

// runningOffline starts a manager, a slot's worker on stateDir (with
// --token) and job j on it, waits until the service answers, SIGKILLs the
// worker and waits until the manager sees the node offline: the job's
// process is left running with no worker. It returns the manager, its
// client, the node id, the token and the service's pid.
func runningOffline(t *testing.T, stateDir string, wport int, job *managerpb.Job, pidFile string, up func() bool) (*manager, string, string, int) {
	t.Helper()
	ctx := context.Background()
	m := startManager(t, filepath.Join(t.TempDir(), "data"), testproc.FreePort(t))
	mc := connect(t, m.addr)
	nodeID, token, err := mc.RegisterClusterNode(ctx, "retired", nil)
	require.NoError(t, err)
	w := startWorkerArgs(t, "worker", stateDir, wport, "--token", token, "--manager-url", m.addr)
	testproc.Eventually(t, 20*time.Second, "worker online", func() bool { return nodeConnected(t, mc, string(nodeID)) })
	_, err = mc.CreateJob(ctx, job)
	require.NoError(t, err)
	require.NoError(t, mc.StartJob(ctx, client.JobID(job.GetJobId().GetJobId()), "primary", nodeID))
	testproc.Eventually(t, 20*time.Second, "service up", up)
	pid, ok := testproc.ReadPID(pidFile)
	require.True(t, ok, "the service wrote its pid")

	w.Kill()
	testproc.Eventually(t, 40*time.Second, "node seen offline", func() bool { return !nodeConnected(t, mc, string(nodeID)) })
	require.True(t, testproc.PIDAlive(pid), "the job outlives its worker")
	return m, string(nodeID), token, pid
}

// TestE2E_WorkerBack_AfterNodeRetired_StopsItsJobs: a worker SIGKILLed
// with a job running, whose node is then terminated (or whose slot is
// deregistered) while it is down, is refused when it comes back — with its
// token, or with the credential in its state dir alone — and, since no
// manager will manage that job again, stops it, says so, and exits 7.
func TestE2E_WorkerBack_AfterNodeRetired_StopsItsJobs(t *testing.T) {
	cases := []struct {
		name      string
		retire    []string // norsk-ctl command, NODE appended
		withToken bool     // the worker comes back with --token
		says      string
	}{
		{"node terminated, restarted with its token", []string{"node", "terminate"}, true, "terminated by an operator"},
		{"slot deregistered, restarted with its token", []string{"slot", "deregister"}, true, "registration token revoked"},
		{"slot deregistered, restarted on its credential", []string{"slot", "deregister"}, false, "node credential revoked"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			stateDir := filepath.Join(t.TempDir(), "worker")
			wport, webPort := testproc.FreePort(t), testproc.FreePort(t)
			pidFile := filepath.Join(testproc.JobFilesDir(t), "web.pid")
			m, nodeID, token, pid := runningOffline(t, stateDir, wport, webJob("j", pidFile, webPort), pidFile,
				func() bool { return httpOK(webPort) })

			out, code := ctl(t, m.addr, append(tc.retire, nodeID)...)
			require.Equal(t, 0, code, out)
			require.True(t, testproc.PIDAlive(pid), "nobody could stop the job while its worker was down")

			args := []string{"--manager-url", m.addr}
			if tc.withToken {
				args = append(args, "--token", token)
			}
			w := startWorkerArgs(t, "worker-back", stateDir, wport, args...)
			code, exited := w.Exited(30 * time.Second)
			require.True(t, exited, "the refused worker must exit")
			require.Equal(t, 7, code, w.Output())
			testproc.Eventually(t, 10*time.Second, "the job's process gone", func() bool { return !testproc.PIDAlive(pid) })
			require.False(t, httpOK(webPort))
			require.Contains(t, w.Output(), tc.says)
			require.Contains(t, w.Output(), "stopped the 1 job(s) it ran for node "+nodeID+" (j/primary): no manager will manage them again")
		})
	}
}

// stubbornJob's service writes its pid to dir/pid and, sent SIGTERM,
// writes dir/termed and exits only once dir/release exists: its stop is in
// progress for as long as the test wants.
func stubbornJob(id, dir string) *managerpb.Job {
	return &managerpb.Job{
		JobId: &commonpb.JobId{JobId: id},
		Services: []*commonpb.Service{{
			Name: "app",
			Command: fmt.Sprintf("echo $$ > %[1]s/pid; trap 'touch %[1]s/termed; while [ ! -f %[1]s/release ]; do sleep 0.05; done; exit 0' TERM; "+
				"while :; do sleep 0.05; done", dir),
			Restart: commonpb.Service_NEVER,
		}},
	}
}

// TestE2E_WorkerBack_AfterNodeRetired_StopSurvivesSIGKILL: the worker of
// a terminated node, SIGKILLed while it stops the node's job (the service
// is still exiting), is refused again at its next start and finishes the
// stop.
func TestE2E_WorkerBack_AfterNodeRetired_StopSurvivesSIGKILL(t *testing.T) {
	stateDir, jobDir := filepath.Join(t.TempDir(), "worker"), testproc.JobFilesDir(t)
	t.Cleanup(func() { testproc.KillProcessesMentioning(jobDir) })
	wport := testproc.FreePort(t)
	pidFile := filepath.Join(jobDir, "pid")
	m, nodeID, _, pid := runningOffline(t, stateDir, wport, stubbornJob("s", jobDir), pidFile,
		func() bool { _, ok := testproc.ReadPID(pidFile); return ok })
	out, code := ctl(t, m.addr, "node", "terminate", nodeID)
	require.Equal(t, 0, code, out)

	// A grace long enough that only the SIGKILL below ends this stop.
	w := startWorkerArgs(t, "worker-stopping", stateDir, wport, "--manager-url", m.addr, "--stop-grace", "1h")
	testproc.Eventually(t, 30*time.Second, "the service got SIGTERM", func() bool {
		_, err := os.Stat(filepath.Join(jobDir, "termed"))
		return err == nil
	})
	w.Kill()
	require.True(t, testproc.PIDAlive(pid), "the service is still exiting")

	w = startWorkerArgs(t, "worker-again", stateDir, wport, "--manager-url", m.addr)
	// Released only once this worker has restored the job (before it
	// registers) and been refused, so that it is the one finishing the stop.
	testproc.Eventually(t, 30*time.Second, "the new worker refused again", func() bool {
		return strings.Contains(w.Output(), "refused this node for good")
	})
	require.True(t, testproc.PIDAlive(pid), "the service is still exiting")
	require.NoError(t, os.WriteFile(filepath.Join(jobDir, "release"), nil, 0o600))
	code, exited := w.Exited(30 * time.Second)
	require.True(t, exited, "the refused worker must exit")
	require.Equal(t, 7, code, w.Output())
	testproc.Eventually(t, 10*time.Second, "the job's process gone", func() bool { return !testproc.PIDAlive(pid) })
}

// TestE2E_WorkerBack_UnknownToManager_KeepsItsJobs: a worker coming back to
// a manager that does not know its slot (a store restored from an old
// backup, a new cluster) is refused — TOKEN_UNKNOWN with its token,
// CREDENTIAL_UNKNOWN on its credential alone — and exits 7, but stops
// nothing: the job may be a live broadcast its real manager still runs.
func TestE2E_WorkerBack_UnknownToManager_KeepsItsJobs(t *testing.T) {
	stateDir := filepath.Join(t.TempDir(), "worker")
	wport, webPort := testproc.FreePort(t), testproc.FreePort(t)
	pidFile := filepath.Join(testproc.JobFilesDir(t), "web.pid")
	_, _, token, pid := runningOffline(t, stateDir, wport, webJob("j", pidFile, webPort), pidFile,
		func() bool { return httpOK(webPort) })

	other := startManager(t, filepath.Join(t.TempDir(), "other-data"), testproc.FreePort(t))
	for _, tc := range []struct {
		name string
		args []string
		says string
	}{
		{"token unknown", []string{"--token", token, "--manager-url", other.addr}, "does not know this registration token"},
		{"credential unknown", []string{"--manager-url", other.addr}, "does not know the node credential"},
	} {
		w := startWorkerArgs(t, "worker-"+tc.name, stateDir, wport, tc.args...)
		code, exited := w.Exited(30 * time.Second)
		require.True(t, exited, "%s: the refused worker must exit", tc.name)
		require.Equal(t, 7, code, w.Output())
		require.Contains(t, w.Output(), tc.says)
		require.NotContains(t, w.Output(), "stopping job")
		require.True(t, testproc.PIDAlive(pid), "%s: the job keeps running", tc.name)
		require.True(t, httpOK(webPort), "%s: the service still answers", tc.name)
	}
}
