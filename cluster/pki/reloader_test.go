package pki

import (
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"log/slog"
	"math/big"
	"net"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// serveTLS accepts TLS connections on 127.0.0.1 with cfg until the test
// ends, completing each handshake and writing "ok".
func serveTLS(t *testing.T, cfg *tls.Config) string {
	t.Helper()
	lis, err := tls.Listen("tcp", "127.0.0.1:0", cfg)
	require.NoError(t, err)
	var wg sync.WaitGroup
	t.Cleanup(func() { lis.Close(); wg.Wait() })
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				if c.(*tls.Conn).Handshake() == nil {
					_, _ = c.Write([]byte("ok"))
				}
			}()
		}
	}()
	return lis.Addr().String()
}

// dial connects with cfg and returns the server certificate's serial, or
// the error of the handshake or of the first read (TLS 1.3 reports a
// refused client certificate there).
func dial(addr string, cfg *tls.Config, serverName string) (*big.Int, error) {
	cfg.ServerName = serverName
	c, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr, cfg)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.ReadFull(c, make([]byte, 2)); err != nil {
		return nil, err
	}
	return c.ConnectionState().PeerCertificates[0].SerialNumber, nil
}

func TestReloader_Reload_NewConnectionsSeeNewCert(t *testing.T) {
	dir := t.TempDir()
	ca, caPath := TestCA(t, dir)
	first, files := TestIssue(t, ca, dir, "server", CertOptions{Role: RoleServer})
	files.CA = caPath
	r, err := NewReloader(ReloaderConfig{Files: files, Name: "api"})
	require.NoError(t, err)
	require.Equal(t, first.Cert.NotAfter, r.NotAfter())
	addr := serveTLS(t, r.ServerConfig(false))
	client, err := NewReloader(ReloaderConfig{Files: Files{CA: caPath}})
	require.NoError(t, err)

	serial, err := dial(addr, client.ClientConfig(), "server.norsk")
	require.NoError(t, err)
	require.Equal(t, first.Cert.SerialNumber, serial)

	changed, err := r.Reload()
	require.NoError(t, err)
	require.False(t, changed, "same files")

	second, _ := TestIssue(t, ca, dir, "server", CertOptions{Role: RoleServer})
	changed, err = r.Reload()
	require.NoError(t, err)
	require.True(t, changed)
	serial, err = dial(addr, client.ClientConfig(), "127.0.0.1")
	require.NoError(t, err)
	require.Equal(t, second.Cert.SerialNumber, serial)
}

func TestReloader_Reload_FailureKeepsOld(t *testing.T) {
	dir := t.TempDir()
	ca, _ := TestCA(t, dir)
	first, files := TestIssue(t, ca, dir, "server", CertOptions{Role: RoleServer})
	r, err := NewReloader(ReloaderConfig{Files: files})
	require.NoError(t, err)

	// Half a renewal: the new certificate, the old key.
	next, err := ca.Issue(CertOptions{Role: RoleServer})
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(files.Cert, next.CertPEM, CertFileMode))
	_, err = r.Reload()
	require.ErrorIs(t, err, ErrKeyMismatch)
	require.ErrorContains(t, err, files.Cert)
	require.Equal(t, first.Cert.SerialNumber, r.Leaf().SerialNumber)

	require.NoError(t, os.WriteFile(files.Cert, []byte("junk"), CertFileMode))
	_, err = r.Reload()
	require.ErrorIs(t, err, ErrBadPEM)
	require.NoError(t, os.Remove(files.Key))
	_, err = r.Reload()
	require.ErrorIs(t, err, os.ErrNotExist)
	require.Equal(t, first.Cert.SerialNumber, r.Leaf().SerialNumber)

	// The other half arrives: loaded.
	require.NoError(t, os.WriteFile(files.Key, next.KeyPEM, KeyFileMode))
	require.NoError(t, os.WriteFile(files.Cert, next.CertPEM, CertFileMode))
	changed, err := r.Reload()
	require.NoError(t, err)
	require.True(t, changed)
	require.Equal(t, next.Cert.SerialNumber, r.Leaf().SerialNumber)
}

func TestReloader_ServerConfig_MutualTLS(t *testing.T) {
	dir := t.TempDir()
	ca, caPath := TestCA(t, dir)
	other, _ := TestCA(t, t.TempDir())
	_, sf := TestIssue(t, ca, dir, "server", CertOptions{Role: RoleServer})
	sf.CA = caPath
	srv, err := NewReloader(ReloaderConfig{Files: sf})
	require.NoError(t, err)
	addr := serveTLS(t, srv.ServerConfig(true))

	clientOf := func(t *testing.T, issuer *CA, role Role) *Reloader {
		d := t.TempDir()
		_, f := TestIssue(t, issuer, d, "c", CertOptions{Role: role})
		f.CA = caPath
		r, err := NewReloader(ReloaderConfig{Files: f})
		require.NoError(t, err)
		return r
	}
	caOnly, err := NewReloader(ReloaderConfig{Files: Files{CA: caPath}})
	require.NoError(t, err)
	cases := []struct {
		name    string
		client  *Reloader
		wantErr bool
	}{
		{"client cert of the CA", clientOf(t, ca, RoleClient), false},
		{"worker cert of the CA", clientOf(t, ca, RoleWorker), false},
		{"no client cert", caOnly, true},
		{"client cert of another CA", clientOf(t, other, RoleClient), true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := dial(addr, tc.client.ClientConfig(), "localhost")
			if tc.wantErr {
				require.Error(t, err)
			} else {
				require.NoError(t, err)
			}
		})
	}

	// A client that trusts another CA refuses the server; so does one
	// that expects another name.
	d := t.TempDir()
	_, otherCAPath := TestCA(t, d)
	cf := clientOf(t, ca, RoleClient).Files()
	cf.CA = otherCAPath
	wrongCA, err := NewReloader(ReloaderConfig{Files: cf})
	require.NoError(t, err)
	_, err = dial(addr, wrongCA.ClientConfig(), "localhost")
	require.ErrorContains(t, err, "certificate signed by unknown authority")
	_, err = dial(addr, clientOf(t, ca, RoleClient).ClientConfig(), "worker.norsk")
	require.ErrorContains(t, err, "worker.norsk")
}

func TestReloader_Run_WatchesFilesAndWarnsOfExpiry(t *testing.T) {
	dir := t.TempDir()
	ca, _ := TestCA(t, dir)
	_, files := TestIssue(t, ca, dir, "server", CertOptions{Role: RoleServer, Validity: 48 * time.Hour})
	var mu sync.Mutex
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&lockedWriter{mu: &mu, w: &logs}, nil))
	r, err := NewReloader(ReloaderConfig{Files: files, Logger: log, PollInterval: 10 * time.Millisecond})
	require.NoError(t, err)
	text := func() string { mu.Lock(); defer mu.Unlock(); return logs.String() }
	require.Contains(t, text(), "tls certificate expires soon")

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); r.Run(ctx) }()
	defer func() { cancel(); <-done }()

	next, _ := TestIssue(t, ca, dir, "server", CertOptions{Role: RoleServer})
	// The log line follows the swap: wait for it.
	reloaded := fmt.Sprintf("tls certificates reloaded\" tls=\"\" cert=%s subject=server.norsk serial=%s", files.Cert, next.Cert.SerialNumber.Text(16))
	require.Eventually(t, func() bool { return bytes.Contains([]byte(text()), []byte(reloaded)) }, 10*time.Second, 10*time.Millisecond)
	require.Equal(t, next.Cert.SerialNumber, r.Leaf().SerialNumber)

	// A broken file is reported once and the loaded certificate stays.
	require.NoError(t, os.WriteFile(files.Cert, []byte("junk"), CertFileMode))
	require.Eventually(t, func() bool { return bytes.Contains([]byte(text()), []byte("reload failed")) }, 10*time.Second, 10*time.Millisecond)
	require.Equal(t, next.Cert.SerialNumber, r.Leaf().SerialNumber)
}

func TestNewReloader_Errors(t *testing.T) {
	dir := t.TempDir()
	_, err := NewReloader(ReloaderConfig{Files: Files{Cert: dir + "/a.pem"}})
	require.ErrorContains(t, err, "give both or neither")
	_, err = NewReloader(ReloaderConfig{})
	require.ErrorContains(t, err, "no certificate and no CA")
	_, err = NewReloader(ReloaderConfig{Files: Files{CA: dir + "/missing.pem"}})
	require.ErrorIs(t, err, os.ErrNotExist)
	require.ErrorContains(t, err, "missing.pem")
	require.NoError(t, os.WriteFile(dir+"/empty.pem", nil, CertFileMode))
	_, err = NewReloader(ReloaderConfig{Files: Files{CA: dir + "/empty.pem"}})
	require.ErrorIs(t, err, ErrBadPEM)
}

type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(b)
}
