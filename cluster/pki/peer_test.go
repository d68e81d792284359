package pki

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestReloader_PeerConfigs(t *testing.T) {
	dir := t.TempDir()
	ca, caPath := TestCA(t, dir)
	other, otherPath := TestCA(t, t.TempDir())
	peerName := RoleName(RoleServer, DefaultDomain)

	reloader := func(t *testing.T, issuer *CA, role Role, trust string) *Reloader {
		d := t.TempDir()
		_, f := TestIssue(t, issuer, d, "peer", CertOptions{Role: role})
		f.CA = trust
		r, err := NewReloader(ReloaderConfig{Files: f})
		require.NoError(t, err)
		return r
	}
	srv := reloader(t, ca, RoleServer, caPath)
	addr := serveTLS(t, srv.PeerServerConfig(peerName))

	cases := []struct {
		name    string
		client  *Reloader
		wantErr string // "" accepted
	}{
		{"server certificate of the CA", reloader(t, ca, RoleServer, caPath), ""},
		{"worker certificate of the CA: not a manager", reloader(t, ca, RoleWorker, caPath), "bad certificate"},
		{"client certificate of the CA: not a manager", reloader(t, ca, RoleClient, caPath), "bad certificate"},
		{"server certificate of another CA", reloader(t, other, RoleServer, caPath), "unknown certificate authority"},
		{"trusts another CA only", reloader(t, ca, RoleServer, otherPath), "certificate signed by unknown authority"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg := tc.client.PeerClientConfig(peerName)
			require.Equal(t, peerName, cfg.ServerName)
			_, err := dial(addr, cfg, peerName)
			if tc.wantErr == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorContains(t, err, tc.wantErr)
		})
	}

	t.Run("dialling a worker's port: refused as no manager", func(t *testing.T) {
		wsrv := reloader(t, ca, RoleWorker, caPath)
		waddr := serveTLS(t, wsrv.ServerConfig(true))
		_, err := dial(waddr, reloader(t, ca, RoleServer, caPath).PeerClientConfig(peerName), peerName)
		require.ErrorContains(t, err, peerName)
	})
	t.Run("no CA: no handshake", func(t *testing.T) {
		_, f := TestIssue(t, ca, t.TempDir(), "noca", CertOptions{Role: RoleServer})
		r, err := NewReloader(ReloaderConfig{Files: f})
		require.NoError(t, err)
		_, err = dial(addr, r.PeerClientConfig(peerName), peerName)
		require.ErrorContains(t, err, "certificate signed by unknown authority", "no system roots")
		noCAAddr := serveTLS(t, r.PeerServerConfig(peerName))
		_, err = dial(noCAAddr, reloader(t, ca, RoleServer, caPath).PeerClientConfig(peerName), peerName)
		require.Error(t, err)
	})
}
