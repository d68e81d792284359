package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/norsk-oss/norsk-manager/cluster/pki"
)

// runManagerCmd runs norsk-manager with args and returns stdout and the
// error.
func runManagerCmd(t *testing.T, args ...string) (string, error) {
	t.Helper()
	cmd := newCommand()
	cmd.SetArgs(args)
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&bytes.Buffer{})
	err := cmd.ExecuteContext(context.Background())
	return out.String(), err
}

// TestTLSFlagErrors: a bad TLS flag is a usage error naming the flag, and
// nothing is created on disk.
func TestTLSFlagErrors(t *testing.T) {
	pkiDir := t.TempDir()
	ca, _ := pki.TestCA(t, pkiDir)
	_, server := pki.TestIssue(t, ca, pkiDir, "server", pki.CertOptions{Role: pki.RoleServer})
	_, other := pki.TestIssue(t, ca, pkiDir, "other", pki.CertOptions{Role: pki.RoleServer})
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"cert without key", []string{"--tls-cert", server.Cert}, "--tls-cert and --tls-key go together"},
		{"ca without cert", []string{"--tls-ca", server.Cert}, "--tls-ca needs both"},
		{"missing cert file", []string{"--tls-cert", filepath.Join(pkiDir, "nope.pem"), "--tls-key", server.Key}, "nope.pem"},
		{"key of another certificate", []string{"--tls-cert", server.Cert, "--tls-key", other.Key}, "private key does not match"},
		{"ca file without a certificate", []string{"--tls-cert", server.Cert, "--tls-key", server.Key, "--tls-ca", server.Key}, "holds no CA certificate"},
		{"empty worker name", []string{"--tls-cert", server.Cert, "--tls-key", server.Key, "--tls-worker-name", ""}, "--tls-worker-name"},
		{"dev with tls", []string{"--dev", "--tls-cert", server.Cert, "--tls-key", server.Key}, "--dev makes its own certificates with --dev-tls"},
		{"dev-tls without dev", []string{"--dev-tls"}, "--dev-tls needs --dev"},
		{"empty peer name", []string{"--tls-cert", server.Cert, "--tls-key", server.Key, "--tls-peer-name", ""}, "--tls-peer-name"},
		{"cluster with tls but no ca", []string{"--tls-cert", server.Cert, "--tls-key", server.Key, "--name", "m1", "--bootstrap-expect", "3",
			"--gossip-addr", "127.0.0.1:17946", "--cluster-addr", "127.0.0.1:17947", "--raft-addr", "127.0.0.1:17948"}, "--tls-cert without --tls-ca in a cluster"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "data")
			_, err := runManagerCmd(t, append([]string{"--data-dir", dir, "--api-addr", "127.0.0.1:0", "--log-level", "error"}, tt.args...)...)
			var ue *usageError
			if !errors.As(err, &ue) {
				t.Fatalf("error %v (%T): want a usage error (exit code 2)", err, err)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %q does not say %q", err, tt.want)
			}
			if _, err := os.Stat(dir); !os.IsNotExist(err) {
				t.Errorf("data dir was created before the flags were validated (stat: %v)", err)
			}
		})
	}
}

// TestTLSCertCreate_Errors: bad "tls cert create" command lines are usage
// errors and write nothing.
func TestTLSCertCreate_Errors(t *testing.T) {
	withCA := t.TempDir()
	if _, err := runManagerCmd(t, "tls", "ca", "create", "--dir", withCA); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name  string
		dir   string
		args  []string
		want  string
		usage bool
	}{
		{"no role", withCA, nil, "exactly one of --server, --client, --worker", true},
		{"two roles", withCA, []string{"--server", "--worker"}, "exactly one of", true},
		{"bad ip", withCA, []string{"--server", "--additional-ipaddress", "10.0.0.300"}, `--additional-ipaddress "10.0.0.300"`, true},
		{"address as dns name", withCA, []string{"--server", "--additional-dnsname", "m1:6790"}, "--additional-dnsname", true},
		{"zero days", withCA, []string{"--client", "--days", "0"}, "--days 0", true},
		{"bad domain", withCA, []string{"--client", "--domain", "a/b"}, "--domain", true},
		{"name with a slash", withCA, []string{"--client", "--name", "../x"}, "--name", true},
		{"no CA", t.TempDir(), []string{"--worker"}, `create one with "norsk-manager tls ca create"`, true},
		{"CA key that is not the CA's", withCA, []string{"--worker", "--key", filepath.Join(withCA, "norsk-ca.pem")}, "no PEM data", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before, _ := os.ReadDir(tt.dir)
			_, err := runManagerCmd(t, append([]string{"tls", "cert", "create", "--dir", tt.dir}, tt.args...)...)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error %v: want one saying %q", err, tt.want)
			}
			var ue *usageError
			if errors.As(err, &ue) != tt.usage {
				t.Errorf("usage error: %v, want %v", errors.As(err, &ue), tt.usage)
			}
			after, _ := os.ReadDir(tt.dir)
			if len(after) != len(before) {
				t.Errorf("files written: %d before, %d after", len(before), len(after))
			}
		})
	}
}

// TestTLSCertCreate_Names: --name and --domain name the files, and the
// certificate carries the additional names.
func TestTLSCertCreate_Names(t *testing.T) {
	dir := t.TempDir()
	if _, err := runManagerCmd(t, "tls", "ca", "create", "--dir", dir, "--domain", "prod"); err != nil {
		t.Fatal(err)
	}
	out, err := runManagerCmd(t, "tls", "cert", "create", "--server", "--domain", "prod", "--name", "m1", "--dir", dir,
		"--additional-dnsname", "m1.example.com", "--additional-ipaddress", "10.0.0.1,10.0.0.2")
	if err != nil {
		t.Fatal(err)
	}
	if want := "names: server.prod, localhost, m1.example.com, 127.0.0.1, ::1, 10.0.0.1, 10.0.0.2"; !strings.Contains(out, want) {
		t.Errorf("output %q does not list %q", out, want)
	}
	r, err := pki.NewReloader(pki.ReloaderConfig{Files: pki.Files{
		Cert: filepath.Join(dir, "prod-server-m1.pem"), Key: filepath.Join(dir, "prod-server-m1-key.pem"), CA: filepath.Join(dir, "prod-ca.pem"),
	}})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Leaf().VerifyHostname("m1.example.com"); err != nil {
		t.Error(err)
	}
}
