package e2e

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/norsk-oss/norsk-manager/client"
	"github.com/norsk-oss/norsk-manager/cluster/pki"
	"github.com/norsk-oss/norsk-manager/test/testproc"
)

// tlsDir is a directory of certificates made with the norsk-manager tls
// commands, as an operator makes them.
type tlsDir struct {
	dir string
}

func (d tlsDir) path(name string) string { return filepath.Join(d.dir, name) }

// newTLSDir runs "norsk-manager tls ca create" and "tls cert create" for a
// server, a worker and a client certificate.
func newTLSDir(t *testing.T) tlsDir {
	t.Helper()
	d := tlsDir{dir: t.TempDir()}
	for _, args := range [][]string{
		{"tls", "ca", "create"},
		{"tls", "cert", "create", "--server"},
		{"tls", "cert", "create", "--worker"},
		{"tls", "cert", "create", "--client"},
	} {
		out, code := runBin(t, "norsk-manager", nil, append(args, "--dir", d.dir)...)
		require.Equal(t, 0, code, out)
	}
	// Creating again refuses, naming the files, and changes nothing.
	before, err := os.ReadFile(d.path("norsk-server.pem"))
	require.NoError(t, err)
	out, code := runBin(t, "norsk-manager", nil, "tls", "cert", "create", "--server", "--dir", d.dir)
	require.NotEqual(t, 0, code)
	require.Contains(t, out, "refusing to overwrite existing files: "+d.path("norsk-server.pem")+", "+d.path("norsk-server-key.pem"))
	after, err := os.ReadFile(d.path("norsk-server.pem"))
	require.NoError(t, err)
	require.Equal(t, before, after)
	st, err := os.Stat(d.path("norsk-ca-key.pem"))
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o600), st.Mode().Perm())
	return d
}

// runBin runs a built binary to completion with extra environment
// variables and returns its combined output and exit code.
func runBin(t *testing.T, bin string, env []string, args ...string) (string, int) {
	t.Helper()
	cmd := exec.Command(filepath.Join(testproc.Bin(t), bin), args...)
	cmd.Env = append(os.Environ(), env...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	if ee, ok := err.(*exec.ExitError); ok {
		return out.String(), ee.ExitCode()
	} else if err != nil {
		t.Fatalf("%s %v: %v", bin, args, err)
	}
	return out.String(), 0
}

// clientTLS is the TLS configuration of a client with the given files
// (the client pair optional).
func clientTLS(t *testing.T, f client.TLSFiles) *tls.Config {
	t.Helper()
	cfg, err := f.Config()
	require.NoError(t, err)
	return cfg
}

// tlsServing asks the manager's grpc.health.v1 over TLS.
func tlsServing(addr string, cfg *tls.Config) bool {
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(credentials.NewTLS(cfg)))
	if err != nil {
		return false
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	resp, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
	return err == nil && resp.GetStatus() == healthpb.HealthCheckResponse_SERVING
}

// servedSerial opens a new TLS connection to addr and returns the serial
// of the certificate the server presents.
func servedSerial(t *testing.T, addr string, cfg *tls.Config) *big.Int {
	t.Helper()
	cfg = cfg.Clone()
	cfg.ServerName = "127.0.0.1"
	cfg.NextProtos = []string{"h2"}
	c, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr, cfg)
	require.NoError(t, err)
	defer c.Close()
	return c.ConnectionState().PeerCertificates[0].SerialNumber
}

// TestE2E_TLS runs a manager with mutual TLS and a worker with TLS on its
// dial-back port, as README "Securing a cluster" sets them up, and checks
// who gets in: a job runs; a plaintext client, a client without a
// certificate and one with a certificate of another CA are refused; a
// worker whose certificate does not name worker.norsk gets no session; the
// manager's certificate is renewed by replacing its files and SIGHUP,
// without a restart.
func TestE2E_TLS(t *testing.T) {
	ctx := context.Background()
	d := newTLSDir(t)
	caFile := d.path("norsk-ca.pem")
	good := client.TLSFiles{CACert: caFile, ClientCert: d.path("norsk-client.pem"), ClientKey: d.path("norsk-client-key.pem")}

	mport, metricsPort := testproc.FreePort(t), testproc.FreePort(t)
	addr := testproc.Addr(mport)
	m := start(t, "manager", "norsk-manager", "--data-dir", filepath.Join(t.TempDir(), "data"), "--api-addr", addr, "--log-level", "debug",
		"--metrics-addr", testproc.Addr(metricsPort),
		"--tls-cert", d.path("norsk-server.pem"), "--tls-key", d.path("norsk-server-key.pem"), "--tls-ca", caFile)
	testproc.Eventually(t, 30*time.Second, "manager serving over TLS on "+addr, func() bool {
		if !m.Running() {
			t.Fatalf("manager exited:\n%s", m.Output())
		}
		return tlsServing(addr, clientTLS(t, good))
	})

	t.Run("plaintext client refused", func(t *testing.T) {
		require.False(t, testproc.Serving(addr), "plaintext health check answered")
		plain, err := client.Connect(ctx, client.Settings{URL: addr, Timeout: 5 * time.Second})
		require.NoError(t, err)
		defer plain.Close()
		_, err = plain.ListClusterNodes(ctx)
		require.ErrorContains(t, err, "a manager serving TLS closes plaintext connections")
		out, code := runBin(t, "norsk-ctl", nil, "--manager-url", addr, "slot", "list")
		require.Equal(t, 6, code, out)
		require.Contains(t, out, "--ca-cert")
	})

	otherCA, err := pki.CreateCA(pki.CAOptions{})
	require.NoError(t, err)
	_, rogue := pki.TestIssue(t, otherCA, t.TempDir(), "rogue", pki.CertOptions{Role: pki.RoleClient})
	// The server's alert may be lost to a broken pipe when the client
	// writes first (TLS 1.3 sends the client certificate last), so the
	// reason is checked only where the client itself refuses.
	refused := []struct {
		name   string
		files  client.TLSFiles
		reason string
	}{
		{"no client certificate", client.TLSFiles{CACert: caFile}, "needs a client certificate of the cluster CA"},
		{"client certificate of another CA", client.TLSFiles{CACert: caFile, ClientCert: rogue.Cert, ClientKey: rogue.Key}, ""},
		{"server not trusted (the system roots)", client.TLSFiles{ClientCert: good.ClientCert, ClientKey: good.ClientKey}, "certificate signed by unknown authority"},
	}
	for _, tc := range refused {
		t.Run(tc.name+" refused", func(t *testing.T) {
			mc, err := client.Connect(ctx, client.Settings{URL: addr, Timeout: 5 * time.Second, TLS: clientTLS(t, tc.files)})
			require.NoError(t, err)
			defer mc.Close()
			_, err = mc.ListClusterNodes(ctx)
			require.Equal(t, codes.Unavailable, status.Code(err), "%v", err)
			require.ErrorContains(t, err, tc.reason)
		})
	}
	t.Run("wrong server name refused", func(t *testing.T) {
		f := good
		f.ServerName = "m9.example.com"
		mc, err := client.Connect(ctx, client.Settings{URL: addr, Timeout: 5 * time.Second, TLS: clientTLS(t, f)})
		require.NoError(t, err)
		defer mc.Close()
		_, err = mc.ListClusterNodes(ctx)
		require.ErrorContains(t, err, "m9.example.com")
		// The role name every server certificate carries is accepted.
		f.ServerName = "server.norsk"
		ok, err := client.Connect(ctx, client.Settings{URL: addr, Timeout: 5 * time.Second, TLS: clientTLS(t, f)})
		require.NoError(t, err)
		defer ok.Close()
		_, err = ok.ListClusterNodes(ctx)
		require.NoError(t, err)
	})

	// norsk-ctl with flags, and with the environment variables.
	ctlFlags := []string{"--manager-url", addr, "--ca-cert", caFile, "--client-cert", good.ClientCert, "--client-key", good.ClientKey}
	out, code := runBin(t, "norsk-ctl", nil, append(ctlFlags, "slot", "register", "tls-worker")...)
	require.Equal(t, 0, code, out)
	out, code = runBin(t, "norsk-ctl", nil, append(ctlFlags, "slot", "register", "wrong-cert-worker")...)
	require.Equal(t, 0, code, out)
	out, code = runBin(t, "norsk-ctl", []string{"NORSK_CACERT=" + caFile, "NORSK_CLIENT_CERT=" + good.ClientCert, "NORSK_CLIENT_KEY=" + good.ClientKey},
		"--manager-url", addr, "slot", "list")
	require.Equal(t, 0, code, out)
	require.Contains(t, out, "tls-worker")

	mc, err := client.Connect(ctx, client.Settings{URL: addr, Timeout: 10 * time.Second, TLS: clientTLS(t, good)})
	require.NoError(t, err)
	t.Cleanup(func() { mc.Close() })
	slots, err := mc.ListClusterNodes(ctx)
	require.NoError(t, err)
	tokens := map[string][2]string{}
	for _, s := range slots {
		tokens[s.GetName()] = [2]string{s.GetNodeId().GetNodeId(), s.GetToken()}
	}

	// A worker with TLS registers over TLS, and the manager dials it back
	// over TLS; a job runs.
	wport, webPort := testproc.FreePort(t), testproc.FreePort(t)
	stateDir := filepath.Join(t.TempDir(), "worker")
	t.Cleanup(func() { testproc.KillProcessesMentioning(stateDir) })
	w := start(t, "worker", "norsk-ctl", "--mode=worker", "--listen", testproc.Addr(wport), "--state-dir", stateDir, "--log-level", "debug",
		"--token", tokens["tls-worker"][1], "--manager-url", addr,
		"--ca-cert", caFile, "--tls-cert", d.path("norsk-worker.pem"), "--tls-key", d.path("norsk-worker-key.pem"))
	nodeID := tokens["tls-worker"][0]
	testproc.Eventually(t, 30*time.Second, "TLS worker online", func() bool { return nodeConnected(t, mc, nodeID) })
	pidFile := filepath.Join(testproc.JobFilesDir(t), "web.pid")
	_, err = mc.CreateJob(ctx, webJob("web", pidFile, webPort))
	require.NoError(t, err)
	require.NoError(t, mc.StartJob(ctx, "web", "primary", client.NodeID(nodeID)))
	testproc.Eventually(t, 30*time.Second, "job serving", func() bool { return httpOK(webPort) })

	t.Run("worker port refuses plaintext and certificate-less managers", func(t *testing.T) {
		conn, err := grpc.NewClient(testproc.Addr(wport), grpc.WithTransportCredentials(insecure.NewCredentials()))
		require.NoError(t, err)
		defer conn.Close()
		cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		defer cancel()
		_, err = healthpb.NewHealthClient(conn).Check(cctx, &healthpb.HealthCheckRequest{})
		require.Equal(t, codes.Unavailable, status.Code(err), "plaintext: %v", err)
		noCert := clientTLS(t, client.TLSFiles{CACert: caFile})
		noCert.ServerName = "worker.norsk"
		tc, err := grpc.NewClient(testproc.Addr(wport), grpc.WithTransportCredentials(credentials.NewTLS(noCert)), grpc.WithAuthority("worker.norsk"))
		require.NoError(t, err)
		defer tc.Close()
		_, err = healthpb.NewHealthClient(tc).Check(cctx, &healthpb.HealthCheckRequest{})
		require.Equal(t, codes.Unavailable, status.Code(err), "TLS without a client certificate: %v", err)
	})

	t.Run("worker certificate without worker.norsk gets no session", func(t *testing.T) {
		// The server certificate is of the CA and may authenticate a
		// client, so registration succeeds; it does not name
		// worker.norsk, so the manager refuses to dial it.
		port := testproc.FreePort(t)
		dir := filepath.Join(t.TempDir(), "wrong")
		t.Cleanup(func() { testproc.KillProcessesMentioning(dir) })
		w := start(t, "wrong-cert-worker", "norsk-ctl", "--mode=worker", "--listen", testproc.Addr(port), "--state-dir", dir, "--log-level", "debug",
			"--token", tokens["wrong-cert-worker"][1], "--manager-url", addr,
			"--ca-cert", caFile, "--tls-cert", d.path("norsk-server.pem"), "--tls-key", d.path("norsk-server-key.pem"))
		testproc.Eventually(t, 30*time.Second, "registered", func() bool { return strings.Contains(w.Output(), "registered with manager") })
		testproc.Eventually(t, 30*time.Second, "dial-back refused for its certificate", func() bool {
			return strings.Contains(m.Output(), "worker dial failed") && strings.Contains(m.Output(), "not worker.norsk")
		})
		require.False(t, nodeConnected(t, mc, tokens["wrong-cert-worker"][0]))
	})

	t.Run("expiry metric", func(t *testing.T) {
		resp, err := http.Get("http://" + testproc.Addr(metricsPort) + "/metrics")
		require.NoError(t, err)
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		require.Regexp(t, `(?m)^norsk_manager_tls_cert_expiry_seconds 3\.15\d+e\+07$`, string(b), "about 365 days")
	})

	t.Run("renewal without restart", func(t *testing.T) {
		cfg := clientTLS(t, good)
		old := servedSerial(t, addr, cfg)
		// A new server certificate, moved over the old files as an
		// operator would (key first), then SIGHUP.
		out, code := runBin(t, "norsk-manager", nil, "tls", "cert", "create", "--server", "--name", "renewed", "--dir", d.dir)
		require.Equal(t, 0, code, out)
		block, err := os.ReadFile(d.path("norsk-server-renewed.pem"))
		require.NoError(t, err)
		renewed := parseCert(t, block)
		require.NotEqual(t, 0, renewed.SerialNumber.Cmp(old))
		require.NoError(t, os.Rename(d.path("norsk-server-renewed-key.pem"), d.path("norsk-server-key.pem")))
		require.NoError(t, os.Rename(d.path("norsk-server-renewed.pem"), d.path("norsk-server.pem")))
		pid := m.Cmd.Process.Pid
		require.NoError(t, m.Cmd.Process.Signal(syscall.SIGHUP))
		testproc.Eventually(t, 20*time.Second, "new connections get the renewed certificate", func() bool {
			return servedSerial(t, addr, cfg).Cmp(renewed.SerialNumber) == 0 &&
				strings.Contains(m.Output(), "tls certificates reloaded") // logged just after the swap
		})
		require.True(t, m.Running())
		require.Equal(t, pid, m.Cmd.Process.Pid)
		// The client connected before keeps working, and so does the
		// worker session and its job.
		_, err = mc.ListClusterNodes(ctx)
		require.NoError(t, err)
		require.True(t, nodeConnected(t, mc, nodeID))
		require.True(t, httpOK(webPort))

		// The worker's certificate too: SIGHUP to the worker, and the next
		// manager to dial it (here: a TLS client with the manager's
		// certificate) sees the new one; the session stays up.
		out, code = runBin(t, "norsk-manager", nil, "tls", "cert", "create", "--worker", "--name", "renewed", "--dir", d.dir)
		require.Equal(t, 0, code, out)
		block, err = os.ReadFile(d.path("norsk-worker-renewed.pem"))
		require.NoError(t, err)
		renewedWorker := parseCert(t, block)
		require.NoError(t, os.Rename(d.path("norsk-worker-renewed-key.pem"), d.path("norsk-worker-key.pem")))
		require.NoError(t, os.Rename(d.path("norsk-worker-renewed.pem"), d.path("norsk-worker.pem")))
		require.NoError(t, w.Cmd.Process.Signal(syscall.SIGHUP))
		asManager := clientTLS(t, client.TLSFiles{CACert: caFile, ClientCert: d.path("norsk-server.pem"), ClientKey: d.path("norsk-server-key.pem")})
		testproc.Eventually(t, 20*time.Second, "the worker serves its renewed certificate", func() bool {
			return servedSerial(t, testproc.Addr(wport), asManager).Cmp(renewedWorker.SerialNumber) == 0
		})
		require.True(t, w.Running())
		require.True(t, nodeConnected(t, mc, nodeID))
	})
}

func parseCert(t *testing.T, pemBytes []byte) *x509.Certificate {
	t.Helper()
	blk, _ := pem.Decode(pemBytes)
	require.NotNil(t, blk, string(pemBytes))
	c, err := x509.ParseCertificate(blk.Bytes)
	require.NoError(t, err)
	return c
}

// TestE2E_TLS_Cluster runs three managers with mutual TLS on their APIs:
// they reach each other's API (the internal Cluster service: member
// status, forwarded calls) with their server certificates as client
// certificates, and a write through each of them commits.
func TestE2E_TLS_Cluster(t *testing.T) {
	ctx := context.Background()
	d := newTLSDir(t)
	caFile := d.path("norsk-ca.pem")
	cfg := clientTLS(t, client.TLSFiles{CACert: caFile, ClientCert: d.path("norsk-client.pem"), ClientKey: d.path("norsk-client-key.pem")})
	c := testproc.NewCluster(t, 3, "--tls-cert", d.path("norsk-server.pem"), "--tls-key", d.path("norsk-server-key.pem"), "--tls-ca", caFile)
	c.TLS = cfg
	for _, m := range c.Managers {
		m.TLS = cfg
	}
	c.StartAll()
	for _, m := range c.Managers {
		require.False(t, testproc.Serving(m.APIAddr), "%s answers plaintext", m.Name)
		testproc.Await(t, 30*time.Second, m.Name+" sees every member's status", func() error {
			resp, err := m.Members(ctx)
			if err != nil {
				return err
			}
			if len(resp.GetMembers()) != 3 {
				return fmt.Errorf("%d members", len(resp.GetMembers()))
			}
			for _, mem := range resp.GetMembers() {
				if mem.GetError() != "" || mem.GetRaftState() == "unknown" {
					return fmt.Errorf("member %s: %s (%s)", mem.GetName(), mem.GetError(), mem.GetRaftState())
				}
			}
			return nil
		})
		_, err := m.Client().CreateJob(ctx, webJob("job-via-"+m.Name, filepath.Join(testproc.JobFilesDir(t), "pid"), testproc.FreePort(t)))
		require.NoError(t, err, "create a job through %s", m.Name)
	}
}

// TestE2E_TLS_Dev: --dev --dev-tls runs the dev manager and its worker with
// mutual TLS on throw-away certificates, and prints the norsk-ctl flags
// that reach it; without them the manager refuses.
func TestE2E_TLS_Dev(t *testing.T) {
	addr := testproc.Addr(testproc.FreePort(t))
	m := start(t, "dev-manager", "norsk-manager", "--dev", "--dev-tls", "--api-addr", addr)
	var try string
	testproc.Eventually(t, 30*time.Second, "the dev manager's hint", func() bool {
		if !m.Running() {
			t.Fatalf("dev manager exited:\n%s", m.Output())
		}
		for _, line := range strings.Split(m.Output(), "\n") {
			if rest, ok := strings.CutPrefix(line, "try: norsk-ctl "); ok {
				try = rest
				return true
			}
		}
		return false
	})
	require.Contains(t, try, "--ca-cert")
	out, code := runBin(t, "norsk-ctl", nil, strings.Fields(try)...)
	require.Equal(t, 0, code, out)
	require.Regexp(t, `cluster\s+started\s+yes`, out, "the dev worker is connected over TLS")
	out, code = runBin(t, "norsk-ctl", nil, "--manager-url", addr, "node", "list")
	require.Equal(t, 6, code, out)
}
