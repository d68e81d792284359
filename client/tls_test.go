package client_test

import (
	"context"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/norsk-oss/norsk-manager/client"
	"github.com/norsk-oss/norsk-manager/client/clienttest"
	"github.com/norsk-oss/norsk-manager/cluster/pki"
)

// TestNorskManager_TLS: with Settings.TLS each manager's certificate is
// checked for the host of its own address (two managers, dialled as
// 127.0.0.1 and localhost), or for TLSFiles.ServerName when given; a
// manager whose certificate names neither is refused.
func TestNorskManager_TLS(t *testing.T) {
	dir := t.TempDir()
	ca, caPath := pki.TestCA(t, dir)
	serverTLS := func(name string, opts pki.CertOptions) *pki.Reloader {
		_, f := pki.TestIssue(t, ca, dir, name, opts)
		r, err := pki.NewReloader(pki.ReloaderConfig{Files: f})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	loopback := serverTLS("loopback", pki.CertOptions{Role: pki.RoleServer})
	roleOnly := serverTLS("role-only", pki.CertOptions{Role: pki.RoleServer, NoLoopback: true})
	a := clienttest.ServeTLS(t, clienttest.NewManager(nil), "127.0.0.1:0", loopback.ServerConfig(false))
	b := clienttest.ServeTLS(t, clienttest.NewManager(nil), "127.0.0.1:0", loopback.ServerConfig(false))
	_, bPort, _ := net.SplitHostPort(b.Addr)
	c := clienttest.ServeTLS(t, clienttest.NewManager(nil), "127.0.0.1:0", roleOnly.ServerConfig(false))

	cases := []struct {
		name       string
		addrs      string
		serverName string
		ok         bool
	}{
		{"hosts of the addresses", a.Addr + ",localhost:" + bPort, "", true},
		{"certificate without the host", c.Addr, "", false},
		{"server name given", c.Addr, "server.norsk", true},
		{"wrong server name given", a.Addr, "m9.example.com", false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := client.TLSFiles{CACert: caPath, ServerName: tc.serverName}.Config()
			if err != nil {
				t.Fatal(err)
			}
			m, err := client.Connect(context.Background(), client.Settings{URL: tc.addrs, Timeout: 5 * time.Second, TLS: cfg})
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			for range 4 { // round robin: every manager of the list answers
				_, err = m.ListClusterNodes(context.Background())
				if got := status.Code(err) != codes.Unavailable; got != tc.ok {
					t.Fatalf("call error %v; want ok=%v", err, tc.ok)
				}
			}
		})
	}
}

// TestTLSFiles_Config_Errors: files that cannot be used are named.
func TestTLSFiles_Config_Errors(t *testing.T) {
	dir := t.TempDir()
	ca, caPath := pki.TestCA(t, dir)
	_, f := pki.TestIssue(t, ca, dir, "c", pki.CertOptions{Role: pki.RoleClient})
	missing := filepath.Join(dir, "missing.pem")
	cases := []struct {
		name  string
		files client.TLSFiles
		want  string
	}{
		{"missing CA", client.TLSFiles{CACert: missing}, "missing.pem"},
		{"CA file of a key", client.TLSFiles{CACert: f.Key}, "no PEM certificate"},
		{"cert without key", client.TLSFiles{ClientCert: f.Cert}, "give both"},
		{"key of another pair", client.TLSFiles{ClientCert: f.Cert, ClientKey: caPath}, f.Cert},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := tc.files.Config()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v; want one naming %q", err, tc.want)
			}
		})
	}
	cfg, err := client.TLSFiles{CACert: caPath, ClientCert: f.Cert, ClientKey: f.Key, ServerName: "server.norsk"}.Config()
	if err != nil || len(cfg.Certificates) != 1 || cfg.RootCAs == nil || cfg.ServerName != "server.norsk" {
		t.Fatalf("config %+v, %v", cfg, err)
	}
}
