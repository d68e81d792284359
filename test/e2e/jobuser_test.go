package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/norsk-oss/norsk-manager/client"
	"github.com/norsk-oss/norsk-manager/proto/commonpb"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
	"github.com/norsk-oss/norsk-manager/test/testproc"
	"github.com/norsk-oss/norsk-manager/worker"
	"github.com/norsk-oss/norsk-manager/worker/process"
)

// TestE2E_JobUser_CannotReadWorkerSecrets is issue 21 §5 with real
// processes: a worker running as root on a cluster slot runs an
// operator's job as the default job user, which gets "Permission denied"
// reading the node credential the worker wrote at registration and the
// TLS key file in the state directory (left readable by everyone by an
// "older worker": the start made it 0600), by absolute path and by the
// relative path from the old working directory; the job still runs
// norsk-ctl demo http from the test's bin directory.
func TestE2E_JobUser_CannotReadWorkerSecrets(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: only a worker running as root runs jobs as the job user")
	}
	ju, err := process.DefaultJobUser()
	if err != nil {
		t.Skipf("no job user on this host: %v", err)
	}
	ctx := context.Background()
	mport, wport, webPort := testproc.FreePort(t), testproc.FreePort(t), testproc.FreePort(t)
	m := startManager(t, filepath.Join(t.TempDir(), "data"), mport)
	mc := connect(t, m.addr)
	id, token, err := mc.RegisterClusterNode(ctx, "jobuser-worker", nil)
	require.NoError(t, err)
	nodeID := string(id)

	stateDir := filepath.Join(t.TempDir(), "worker")
	require.NoError(t, os.MkdirAll(stateDir, 0o700))
	keyFile := filepath.Join(stateDir, worker.SelfSignedCertFile)
	require.NoError(t, os.WriteFile(keyFile, []byte("-----BEGIN PRIVATE KEY-----\nKEY-SECRET\n"), 0o644))
	require.NoError(t, os.Chmod(keyFile, 0o644))
	startWorker(t, token, m.addr, stateDir, wport)
	testproc.Eventually(t, 20*time.Second, "worker online", func() bool { return nodeConnected(t, mc, nodeID) })
	identity := filepath.Join(stateDir, worker.IdentityFile)
	cred, err := os.ReadFile(identity)
	require.NoError(t, err)

	files := testproc.JobFilesDir(t)
	out := filepath.Join(files, "out")
	job := &managerpb.Job{
		JobId: &commonpb.JobId{JobId: "snoop"},
		Services: []*commonpb.Service{{
			Name:    "snoop",
			Restart: commonpb.Service_NEVER,
			Command: fmt.Sprintf(`exec > %[1]s.tmp 2>&1
echo "uid: $(id -u)"
cat %[2]s; echo "identity: $?"
cat %[3]s; echo "key: $?"
cat ../../../../%[4]s; echo "relative: $?"
mv %[1]s.tmp %[1]s
exec norsk-ctl demo http --listen %[5]s`, out, identity, keyFile, worker.IdentityFile, testproc.Addr(webPort)),
		}},
	}
	_, err = mc.CreateJob(ctx, job)
	require.NoError(t, err)
	require.NoError(t, mc.StartJob(ctx, "snoop", "primary", client.NodeID(nodeID)))
	testproc.Eventually(t, 30*time.Second, "the job's norsk-ctl demo http answers", func() bool { return httpOK(webPort) })

	got, err := os.ReadFile(out)
	require.NoError(t, err)
	text := string(got)
	t.Logf("the job's output:\n%s", text)
	for _, want := range []string{
		"uid: " + strconv.Itoa(int(ju.UID)),
		identity + ": Permission denied", "identity: 1",
		keyFile + ": Permission denied", "key: 1",
		"relative: 1",
	} {
		require.Contains(t, text, want)
	}
	require.NotContains(t, text, "KEY-SECRET")
	require.NotContains(t, text, strings.TrimSpace(string(cred)))
	for path, mode := range map[string]os.FileMode{stateDir: 0o700, identity: 0o600, keyFile: 0o600} {
		fi, err := os.Stat(path)
		require.NoError(t, err)
		require.Equal(t, mode, fi.Mode().Perm(), path)
	}
}
