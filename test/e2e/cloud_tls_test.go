//go:build linux

package e2e

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/norsk-oss/norsk-manager/actors/node"
	"github.com/norsk-oss/norsk-manager/client"
	"github.com/norsk-oss/norsk-manager/proto/commonpb"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
	"github.com/norsk-oss/norsk-manager/test/ec2emu"
	"github.com/norsk-oss/norsk-manager/test/testproc"
	"github.com/norsk-oss/norsk-manager/worker"
)

// TestE2E_TLS_CloudWorkerFromUserData: a manager with mutual TLS and the
// AWS provider (an EC2 emulator) creates a node; the worker is started
// with the flags of the user data the manager sent (the emulator runs
// nothing: the test "boots" the instance by running the script's norsk-ctl
// line, with the CA the script carries, on loopback paths and ports). It
// registers with the token and its self-signed certificate, the manager
// pins it, and a job runs on the cloud node.
func TestE2E_TLS_CloudWorkerFromUserData(t *testing.T) {
	emu := ec2emu.Start(t, ec2emu.Options{LaunchTemplates: []ec2emu.LaunchTemplate{{ID: "lt-0123456789abcdef0", Name: "norsk-worker", Versions: 1}}})
	creds, err := emu.Config().Credentials.Retrieve(context.Background())
	require.NoError(t, err)
	dir := t.TempDir()
	t.Setenv("AWS_ACCESS_KEY_ID", creds.AccessKeyID)
	t.Setenv("AWS_SECRET_ACCESS_KEY", creds.SecretAccessKey)
	t.Setenv("AWS_REGION", ec2emu.DefaultRegion)
	t.Setenv("AWS_CONFIG_FILE", filepath.Join(dir, "none"))
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", filepath.Join(dir, "none"))
	t.Setenv("AWS_EC2_METADATA_DISABLED", "true")

	d := newTLSDir(t)
	caFile := d.path("norsk-ca.pem")
	good := client.TLSFiles{CACert: caFile, ClientCert: d.path("norsk-client.pem"), ClientKey: d.path("norsk-client-key.pem")}
	addr := testproc.Addr(testproc.FreePort(t))
	m := start(t, "manager", "norsk-manager", "--data-dir", filepath.Join(dir, "data"), "--api-addr", addr, "--log-level", "debug",
		"--aws", "--aws-endpoint", emu.URL(),
		"--tls-cert", d.path("norsk-server.pem"), "--tls-key", d.path("norsk-server-key.pem"), "--tls-ca", caFile)
	testproc.Eventually(t, 30*time.Second, "manager serving over TLS", func() bool {
		if !m.Running() {
			t.Fatalf("manager exited:\n%s", m.Output())
		}
		return tlsServing(addr, clientTLS(t, good))
	})
	ctx := context.Background()
	mc, err := client.Connect(ctx, client.Settings{URL: addr, Timeout: 10 * time.Second, TLS: clientTLS(t, good)})
	require.NoError(t, err)
	t.Cleanup(func() { mc.Close() })
	err = mc.CreateAwsNode(ctx, &managerpb.CreateAwsNodeRequest{NodeId: &commonpb.NodeId{NodeId: "aws-tls"}, Region: ec2emu.DefaultRegion,
		Template: &managerpb.AwsLaunchTemplate{Template: &managerpb.AwsLaunchTemplate_Name{Name: "norsk-worker"}}})
	require.NoError(t, err)
	var run ec2emu.RunRequest
	testproc.Eventually(t, 20*time.Second, "RunInstances", func() bool { var ok bool; run, ok = emu.LastRunRequest(); return ok })
	testproc.Eventually(t, 20*time.Second, "the instance described", func() bool {
		insts := emu.Instances()
		return len(insts) == 1 && insts[0].PrivateIP != ""
	})
	privateIP := emu.Instances()[0].PrivateIP

	// The user data carries the CA (public) and no private key.
	script := run.UserData
	require.NotContains(t, script, "PRIVATE KEY")
	caPEM := userDataCA(t, script)
	want, err := os.ReadFile(caFile)
	require.NoError(t, err)
	require.Equal(t, strings.TrimSpace(string(want)), strings.TrimSpace(caPEM))

	wport, webPort := testproc.FreePort(t), testproc.FreePort(t)
	stateDir := filepath.Join(t.TempDir(), "worker")
	t.Cleanup(func() { testproc.KillProcessesMentioning(stateDir) })
	instCA := filepath.Join(t.TempDir(), "manager-ca.pem")
	require.NoError(t, os.WriteFile(instCA, []byte(caPEM), 0o644))
	args := userDataWorkerArgs(t, script, map[string]string{
		"--ca-cert":   instCA,
		"--listen":    net.JoinHostPort(privateIP, strconv.Itoa(wport)),
		"--advertise": privateIP,
		"--state-dir": stateDir,
	})
	require.Contains(t, args, "--self-signed")
	w := start(t, "cloud-worker", append([]string{"norsk-ctl"}, append(args, "--log-level", "debug")...)...)
	testproc.Eventually(t, 30*time.Second, "the cloud node online", func() bool {
		if !w.Running() {
			t.Fatalf("worker exited:\n%s", w.Output())
		}
		return nodeConnected(t, mc, "aws-tls")
	})
	_, err = os.Stat(filepath.Join(stateDir, worker.SelfSignedCertFile))
	require.NoError(t, err)

	pidFile := filepath.Join(testproc.JobFilesDir(t), "web.pid")
	_, err = mc.CreateJob(ctx, webJob("web", pidFile, webPort))
	require.NoError(t, err)
	require.NoError(t, mc.StartJob(ctx, "web", "primary", "aws-tls"))
	testproc.Eventually(t, 30*time.Second, "job serving on the cloud node", func() bool { return httpOK(webPort) })
}

// userDataCA returns the CA bundle of a TLSUserData script's heredoc.
func userDataCA(t *testing.T, script string) string {
	t.Helper()
	_, rest, ok := strings.Cut(script, "<<'NORSK_MANAGER_CA_EOF'\n")
	require.True(t, ok, "no CA heredoc in:\n%s", script)
	ca, _, ok := strings.Cut(rest, "\nNORSK_MANAGER_CA_EOF\n")
	require.True(t, ok, "unterminated CA heredoc in:\n%s", script)
	return ca
}

// userDataWorkerArgs returns the arguments of the script's "exec norsk-ctl"
// line, with the values of the flags in subst replaced (paths and
// addresses of the instance, which a test cannot use).
func userDataWorkerArgs(t *testing.T, script string, subst map[string]string) []string {
	t.Helper()
	_, rest, ok := strings.Cut(script, "exec norsk-ctl ")
	require.True(t, ok, "no exec norsk-ctl in:\n%s", script)
	line, _, _ := strings.Cut(strings.ReplaceAll(rest, "\\\n", " "), "\n")
	var args []string
	seen := map[string]bool{}
	for _, f := range strings.Fields(line) {
		name, _, _ := strings.Cut(f, "=")
		if v, ok := subst[name]; ok {
			f, seen[name] = name+"="+v, true
		}
		args = append(args, f)
	}
	for name := range subst {
		require.True(t, seen[name], "the user data has no %s:\n%s", name, script)
	}
	require.Equal(t, node.WorkerCAPath, flagValue(t, line, "--ca-cert"), "CA path in the script")
	return args
}

// flagValue returns the value of --name=value in line.
func flagValue(t *testing.T, line, name string) string {
	t.Helper()
	for _, f := range strings.Fields(line) {
		if v, ok := strings.CutPrefix(f, name+"="); ok {
			return v
		}
	}
	t.Fatalf("no %s in %q", name, line)
	return ""
}
