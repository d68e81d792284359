package e2e

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"

	"github.com/norsk-oss/norsk-manager/client"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
	"github.com/norsk-oss/norsk-manager/test/testproc"
	"github.com/norsk-oss/norsk-manager/worker"
)

// TestE2E_TLS_SelfSignedWorker runs a manager with mutual TLS and a worker
// as a cloud node's user data starts it: --ca-cert and --self-signed, a
// slot token, no certificate of the CA (docs/design/security.md, "Cloud
// workers"). The worker registers without a client certificate, the
// manager dials it back pinning its certificate, and a job runs; a client
// without a certificate can call nothing else; the worker restarted on its
// state directory keeps its key and its session; a process holding the
// node's credential but another key on the node's address gets no session
// (the pin), and registering with it is refused.
func TestE2E_TLS_SelfSignedWorker(t *testing.T) {
	ctx := context.Background()
	d := newTLSDir(t)
	caFile := d.path("norsk-ca.pem")
	good := client.TLSFiles{CACert: caFile, ClientCert: d.path("norsk-client.pem"), ClientKey: d.path("norsk-client-key.pem")}
	addr := testproc.Addr(testproc.FreePort(t))
	m := start(t, "manager", "norsk-manager", "--data-dir", filepath.Join(t.TempDir(), "data"), "--api-addr", addr, "--log-level", "debug",
		"--tls-cert", d.path("norsk-server.pem"), "--tls-key", d.path("norsk-server-key.pem"), "--tls-ca", caFile)
	testproc.Eventually(t, 30*time.Second, "manager serving over TLS on "+addr, func() bool {
		if !m.Running() {
			t.Fatalf("manager exited:\n%s", m.Output())
		}
		return tlsServing(addr, clientTLS(t, good))
	})
	mc, err := client.Connect(ctx, client.Settings{URL: addr, Timeout: 10 * time.Second, TLS: clientTLS(t, good)})
	require.NoError(t, err)
	t.Cleanup(func() { mc.Close() })
	nid, token, err := mc.RegisterClusterNode(ctx, "cloud-like", nil)
	require.NoError(t, err)
	nodeID := string(nid)

	t.Run("a client without a certificate may only register", func(t *testing.T) {
		nc, err := client.Connect(ctx, client.Settings{URL: addr, Timeout: 5 * time.Second, TLS: clientTLS(t, client.TLSFiles{CACert: caFile})})
		require.NoError(t, err)
		defer nc.Close()
		// The client library's health check is refused first.
		_, err = nc.ListClusterNodes(ctx)
		require.ErrorContains(t, err, "needs a client certificate of the cluster CA")

		conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(credentials.NewTLS(clientTLS(t, client.TLSFiles{CACert: caFile}))))
		require.NoError(t, err)
		defer conn.Close()
		api := managerpb.NewManagerClient(conn)
		for name, call := range map[string]func() error{
			"ListClusterNodes": func() error { _, err := api.ListClusterNodes(ctx, &managerpb.ListClusterNodesRequest{}); return err },
			"CreateJob":        func() error { _, err := api.CreateJob(ctx, webJob("nocert", "/dev/null", 1)); return err },
			"AclBootstrap":     func() error { _, err := api.AclBootstrap(ctx, &managerpb.AclBootstrapRequest{}); return err },
		} {
			err := call()
			require.Equal(t, codes.Unauthenticated, status.Code(err), "%s: %v", name, err)
		}
		// The registration is let through to its own checks.
		_, err = api.ClusterMemberRegister(ctx, &managerpb.ClusterMemberRegisterRequest{Token: "nope", Address: "127.0.0.1", Port: 1})
		require.Equal(t, codes.Unauthenticated, status.Code(err), "%v", err)
		require.Equal(t, "unknown registration token", status.Convert(err).Message())
	})

	wport, webPort := testproc.FreePort(t), testproc.FreePort(t)
	stateDir := filepath.Join(t.TempDir(), "worker")
	t.Cleanup(func() { testproc.KillProcessesMentioning(stateDir) })
	workerArgs := func(dir string, extra ...string) []string {
		return append([]string{"norsk-ctl", "--mode=worker", "--listen", testproc.Addr(wport), "--state-dir", dir, "--log-level", "debug",
			"--ca-cert", caFile, "--self-signed"}, extra...)
	}
	w := start(t, "worker", workerArgs(stateDir, "--token", token, "--manager-url", addr)...)
	testproc.Eventually(t, 30*time.Second, "self-signed worker online", func() bool {
		if !w.Running() {
			t.Fatalf("worker exited:\n%s", w.Output())
		}
		return nodeConnected(t, mc, nodeID)
	})
	keyFile := filepath.Join(stateDir, worker.SelfSignedCertFile)
	st, err := os.Stat(keyFile)
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o600), st.Mode().Perm())
	key, err := os.ReadFile(keyFile)
	require.NoError(t, err)
	require.Contains(t, m.Output(), "worker session up")

	pidFile := filepath.Join(testproc.JobFilesDir(t), "web.pid")
	_, err = mc.CreateJob(ctx, webJob("web", pidFile, webPort))
	require.NoError(t, err)
	require.NoError(t, mc.StartJob(ctx, "web", "primary", client.NodeID(nodeID)))
	testproc.Eventually(t, 30*time.Second, "job serving", func() bool { return httpOK(webPort) })

	// SIGKILL and restart on the state directory, without the token: the
	// same key, re-registration with the credential, the session back.
	w.Kill()
	w = start(t, "worker-again", workerArgs(stateDir, "--manager-url", addr)...)
	testproc.Eventually(t, 30*time.Second, "restarted worker online", func() bool {
		return strings.Contains(w.Output(), "registered with manager") && nodeConnected(t, mc, nodeID)
	})
	again, err := os.ReadFile(keyFile)
	require.NoError(t, err)
	require.True(t, bytes.Equal(key, again), "the key was replaced across a restart")
	require.True(t, httpOK(webPort), "the job kept running")

	// Another process takes the node's address with the node's credential
	// (a copy of identity.json) but its own key. Its registration is
	// pointed at nothing so it stays up: the manager's re-dials of the node
	// reach it and are refused by the pin, before any hello.
	w.Kill()
	impostorDir := filepath.Join(t.TempDir(), "impostor")
	t.Cleanup(func() { testproc.KillProcessesMentioning(impostorDir) })
	require.NoError(t, os.MkdirAll(impostorDir, 0o700))
	id, err := os.ReadFile(filepath.Join(stateDir, worker.IdentityFile))
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(impostorDir, worker.IdentityFile), id, 0o600))
	deadManager := testproc.Addr(testproc.FreePort(t))
	before := len(m.Output())
	imp := start(t, "impostor", workerArgs(impostorDir, "--manager-url", deadManager)...)
	testproc.Eventually(t, 60*time.Second, "the manager refusing the impostor's certificate", func() bool {
		if !imp.Running() {
			t.Fatalf("impostor exited:\n%s", imp.Output())
		}
		return strings.Contains(m.Output()[before:], "the peer's certificate is not the one pinned at registration")
	})
	require.False(t, nodeConnected(t, mc, nodeID))
	require.NotContains(t, imp.Output(), "session up")
	imp.Kill()

	// Registering with that key is refused, naming what to do.
	imp = start(t, "impostor-registers", workerArgs(impostorDir, "--manager-url", addr)...)
	code, ok := imp.Exited(30 * time.Second)
	require.True(t, ok, "the impostor kept running:\n%s", imp.Output())
	require.Equal(t, 5, code, imp.Output())
	require.Contains(t, imp.Output(), worker.SelfSignedCertFile)

	// The real worker comes back and gets its node again.
	w = start(t, "worker-back", workerArgs(stateDir, "--manager-url", addr)...)
	testproc.Eventually(t, 30*time.Second, "the real worker online again", func() bool { return nodeConnected(t, mc, nodeID) })
	require.True(t, httpOK(webPort))
}
