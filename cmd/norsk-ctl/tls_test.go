package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/norsk-oss/norsk-manager/cluster/pki"
)

// TestCtl_TLSFlagErrors: TLS files that cannot be used are usage errors
// (exit 2) naming the file, for the operator commands and worker mode,
// before anything is dialled or a state dir touched.
func TestCtl_TLSFlagErrors(t *testing.T) {
	dir := t.TempDir()
	ca, caPath := pki.TestCA(t, dir)
	_, w := pki.TestIssue(t, ca, dir, "worker", pki.CertOptions{Role: pki.RoleWorker})
	missing := filepath.Join(dir, "missing.pem")
	stateDir := filepath.Join(t.TempDir(), "state")
	worker := []string{"--mode=worker", "--listen=127.0.0.1:0", "--state-dir=" + stateDir}
	tests := []struct {
		name string
		env  map[string]string
		args []string
		want string
	}{
		{"missing CA", nil, []string{"--ca-cert", missing, "slot", "list"}, "missing.pem"},
		{"missing CA from the environment", map[string]string{ctlEnvCACert: missing}, []string{"slot", "list"}, "missing.pem"},
		{"client cert without key", nil, []string{"--ca-cert", caPath, "--client-cert", w.Cert, "slot", "list"}, "give both"},
		{"CA file of a key", nil, []string{"--ca-cert", w.Key, "slot", "list"}, "no PEM certificate"},
		{"worker: cert without key", nil, append(worker, "--tls-cert", w.Cert), "--tls-cert and --tls-key go together"},
		{"worker: client cert", nil, append(worker, "--ca-cert", caPath, "--client-cert", w.Cert, "--client-key", w.Key), "a worker presents its --tls-cert"},
		{"worker: missing CA", nil, append(worker, "--ca-cert", missing, "--tls-cert", w.Cert, "--tls-key", w.Key), "missing.pem"},
		{"worker: self-signed and a certificate", nil, append(worker, "--self-signed", "--tls-cert", w.Cert, "--tls-key", w.Key), "--self-signed and --tls-cert/--tls-key exclude each other"},
		{"worker: self-signed, missing CA", nil, append(worker, "--self-signed", "--ca-cert", missing), "missing.pem"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for k, v := range tt.env {
				t.Setenv(k, v)
			}
			r := runCtl(t, testCtx(), "", tt.args...)
			if r.code != ctlExitUsage || !strings.Contains(r.stderr, tt.want) {
				t.Errorf("exit %d, stderr %q; want exit %d and %q", r.code, r.stderr, ctlExitUsage, tt.want)
			}
			if strings.Contains(r.stderr, "worker listening") {
				t.Errorf("the worker started:\n%s", r.stderr)
			}
			if _, err := os.Stat(stateDir); !os.IsNotExist(err) {
				t.Errorf("the state dir was created (stat: %v)", err)
			}
		})
	}
}
