package pki

import (
	"crypto/tls"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestLoadOrCreateSelfSigned(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "worker-tls.pem")
	// A temporary file left by a kill during an earlier first boot.
	stale := path + ".tmp-123"
	require.NoError(t, os.WriteFile(stale, []byte("half"), 0o600))
	require.NoError(t, os.Chtimes(stale, time.Now().Add(-time.Hour), time.Now().Add(-time.Hour)))

	first, err := LoadOrCreateSelfSigned(path, "worker.norsk", nil)
	require.NoError(t, err)
	require.True(t, first.Created)
	require.Len(t, first.Fingerprint, FingerprintSize)
	require.Equal(t, "worker.norsk", first.Cert.Subject.CommonName)
	st, err := os.Stat(path)
	require.NoError(t, err)
	require.Equal(t, KeyFileMode, st.Mode().Perm(), "the file holds the key")
	_, err = os.Stat(stale)
	require.ErrorIs(t, err, os.ErrNotExist)
	left, _ := filepath.Glob(path + ".tmp-*")
	require.Empty(t, left)

	again, err := LoadOrCreateSelfSigned(path, "worker.norsk", nil)
	require.NoError(t, err)
	require.False(t, again.Created)
	require.Equal(t, first.Fingerprint, again.Fingerprint, "reused across restarts")

	// The same file serves as certificate and key of a Reloader.
	r, err := NewReloader(ReloaderConfig{Files: Files{Cert: path, Key: path}})
	require.NoError(t, err)
	require.Equal(t, first.Cert.Raw, r.Leaf().Raw)

	t.Run("two processes at the first boot get one key", func(t *testing.T) {
		p := filepath.Join(t.TempDir(), "worker-tls.pem")
		got := make(chan []byte, 8)
		var wg sync.WaitGroup
		for range 8 {
			wg.Go(func() {
				s, err := LoadOrCreateSelfSigned(p, "worker.norsk", nil)
				if err != nil {
					t.Error(err)
					got <- nil
					return
				}
				got <- s.Fingerprint
			})
		}
		wg.Wait()
		close(got)
		onDisk, err := LoadOrCreateSelfSigned(p, "worker.norsk", nil)
		require.NoError(t, err)
		for fp := range got {
			require.Equal(t, onDisk.Fingerprint, fp)
		}
	})
	t.Run("corrupt file: an error, never overwritten", func(t *testing.T) {
		bad := filepath.Join(t.TempDir(), "worker-tls.pem")
		require.NoError(t, os.WriteFile(bad, []byte("not pem"), 0o600))
		_, err := LoadOrCreateSelfSigned(bad, "worker.norsk", nil)
		require.ErrorContains(t, err, bad)
		b, _ := os.ReadFile(bad)
		require.Equal(t, "not pem", string(b))
	})
	t.Run("key of another certificate: refused", func(t *testing.T) {
		other, err := LoadOrCreateSelfSigned(filepath.Join(t.TempDir(), "o.pem"), "worker.norsk", nil)
		require.NoError(t, err)
		a, _ := os.ReadFile(path)
		b, _ := os.ReadFile(other.Path)
		cert, _ := splitPEM(t, a)
		_, key := splitPEM(t, b)
		mixed := filepath.Join(t.TempDir(), "mixed.pem")
		require.NoError(t, os.WriteFile(mixed, append(cert, key...), 0o600))
		_, err = LoadOrCreateSelfSigned(mixed, "worker.norsk", nil)
		require.ErrorIs(t, err, ErrKeyMismatch)
	})
}

// splitPEM returns the certificate and the key part of a self-signed file.
func splitPEM(t *testing.T, b []byte) (cert, key []byte) {
	t.Helper()
	for i := range b {
		if string(b[i:min(i+len("-----BEGIN EC"), len(b))]) == "-----BEGIN EC" {
			return b[:i], b[i:]
		}
	}
	t.Fatal("no key block")
	return nil, nil
}

func TestPinnedClientConfig(t *testing.T) {
	dir := t.TempDir()
	ca, caPath := TestCA(t, dir)
	worker, err := LoadOrCreateSelfSigned(filepath.Join(dir, "w.pem"), "worker.norsk", nil)
	require.NoError(t, err)
	impostor, err := LoadOrCreateSelfSigned(filepath.Join(dir, "i.pem"), "worker.norsk", nil)
	require.NoError(t, err)
	serve := func(t *testing.T, path, trust string) string {
		r, err := NewReloader(ReloaderConfig{Files: Files{Cert: path, Key: path, CA: trust}})
		require.NoError(t, err)
		return serveTLS(t, r.ServerConfig(true))
	}
	_, mgr := TestIssue(t, ca, dir, "server", CertOptions{Role: RoleServer})
	mgr.CA = caPath
	manager, err := NewReloader(ReloaderConfig{Files: mgr})
	require.NoError(t, err)

	cases := []struct {
		name    string
		serve   string // the server's self-signed file
		trust   string // the server's CA for client certificates
		client  func() *tls.Config
		wantErr error
		wantMsg string
	}{
		{name: "the pinned certificate", serve: worker.Path,
			client: func() *tls.Config { return PinnedClientConfig(worker.Fingerprint, nil) }},
		{name: "another self-signed certificate", serve: impostor.Path,
			client: func() *tls.Config { return PinnedClientConfig(worker.Fingerprint, nil) }, wantErr: ErrPinMismatch,
			wantMsg: FormatFingerprint(impostor.Fingerprint)},
		{name: "a certificate of the CA is not the pin either", serve: mgr.Cert,
			client: func() *tls.Config { return PinnedClientConfig(worker.Fingerprint, nil) }, wantErr: ErrPinMismatch},
		{name: "pinned, the worker requires the manager's certificate", serve: worker.Path, trust: caPath,
			client: func() *tls.Config { return manager.PinnedClientConfig(worker.Fingerprint) }},
		{name: "pinned, no client certificate for a worker that requires one", serve: worker.Path, trust: caPath,
			client: func() *tls.Config { return PinnedClientConfig(worker.Fingerprint, nil) }, wantMsg: "certificate required"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var addr string
			if tc.serve == mgr.Cert {
				addr = serveTLS(t, manager.ServerConfig(false))
			} else {
				addr = serve(t, tc.serve, tc.trust)
			}
			_, err := dial(addr, tc.client(), "")
			if tc.wantErr == nil && tc.wantMsg == "" {
				require.NoError(t, err)
				return
			}
			require.Error(t, err)
			if tc.wantErr != nil {
				require.ErrorIs(t, err, tc.wantErr)
			}
			if tc.wantMsg != "" {
				require.ErrorContains(t, err, tc.wantMsg)
			}
		})
	}
}

func TestReloader_ServerConfigClientCertIfGiven(t *testing.T) {
	dir := t.TempDir()
	ca, caPath := TestCA(t, dir)
	other, _ := TestCA(t, t.TempDir())
	_, sf := TestIssue(t, ca, dir, "server", CertOptions{Role: RoleServer})
	sf.CA = caPath
	srv, err := NewReloader(ReloaderConfig{Files: sf})
	require.NoError(t, err)
	addr := serveTLS(t, srv.ServerConfigClientCertIfGiven())

	client := func(t *testing.T, issuer *CA) *tls.Config {
		f := Files{CA: caPath}
		if issuer != nil {
			_, f = TestIssue(t, issuer, t.TempDir(), "c", CertOptions{Role: RoleClient})
			f.CA = caPath
		}
		r, err := NewReloader(ReloaderConfig{Files: f})
		require.NoError(t, err)
		return r.ClientConfig()
	}
	cases := []struct {
		name    string
		issuer  *CA
		wantErr string
	}{
		{"no client certificate: connects (the interceptor decides)", nil, ""},
		{"a certificate of the CA", ca, ""},
		{"a certificate of another CA: refused at the handshake", other, "unknown certificate authority"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := dial(addr, client(t, tc.issuer), "server.norsk")
			if tc.wantErr == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorContains(t, err, tc.wantErr)
		})
	}
}
