package pki

import (
	"crypto/x509"
	"errors"
	"net"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestRoleName(t *testing.T) {
	require.Equal(t, "server.norsk", RoleName(RoleServer, ""))
	require.Equal(t, "worker.example.com", RoleName(RoleWorker, "example.com"))
}

func TestCA_Issue_Roles(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	ca, err := CreateCA(CAOptions{Now: clock})
	require.NoError(t, err)
	require.True(t, ca.Cert.IsCA)
	require.True(t, ca.Cert.MaxPathLenZero)
	require.Equal(t, now.Add(DefaultCAValidity).Unix(), ca.Cert.NotAfter.Unix())
	roots := x509.NewCertPool()
	roots.AddCert(ca.Cert)

	cases := []struct {
		name      string
		opts      CertOptions
		ekus      []x509.ExtKeyUsage
		dns       []string
		ips       []string
		notAfter  time.Time
		serveAuth bool
	}{
		{
			name: "server defaults", opts: CertOptions{Role: RoleServer},
			ekus: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
			dns:  []string{"server.norsk", "localhost"}, ips: []string{"127.0.0.1", "::1"},
			notAfter: now.Add(DefaultCertValidity), serveAuth: true,
		},
		{
			name: "server with names, domain and days",
			opts: CertOptions{Role: RoleServer, Domain: "prod", Validity: 30 * 24 * time.Hour,
				DNSNames: []string{"m1.example.com", "localhost"}, IPAddresses: []net.IP{net.ParseIP("10.0.0.1"), net.ParseIP("127.0.0.1")}},
			ekus:     []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
			dns:      []string{"server.prod", "localhost", "m1.example.com"},
			ips:      []string{"127.0.0.1", "::1", "10.0.0.1"},
			notAfter: now.Add(30 * 24 * time.Hour), serveAuth: true,
		},
		{
			name: "client", opts: CertOptions{Role: RoleClient},
			ekus: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}, dns: []string{"client.norsk"},
			notAfter: now.Add(DefaultCertValidity),
		},
		{
			name: "worker without loopback", opts: CertOptions{Role: RoleWorker, NoLoopback: true},
			ekus: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}, dns: []string{"worker.norsk"},
			notAfter: now.Add(DefaultCertValidity), serveAuth: true,
		},
		{
			name: "validity cut to the CA's", opts: CertOptions{Role: RoleWorker, Validity: 10 * DefaultCAValidity},
			ekus: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
			dns:  []string{"worker.norsk", "localhost"}, ips: []string{"127.0.0.1", "::1"},
			notAfter: ca.Cert.NotAfter, serveAuth: true,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tc.opts.Now = clock
			is, err := ca.Issue(tc.opts)
			require.NoError(t, err)
			c := is.Cert
			require.Equal(t, tc.ekus, c.ExtKeyUsage)
			require.Equal(t, tc.dns, c.DNSNames)
			var ips []string
			for _, ip := range c.IPAddresses {
				ips = append(ips, ip.String())
			}
			require.Equal(t, tc.ips, ips)
			require.Equal(t, tc.notAfter.Unix(), c.NotAfter.Unix())
			require.False(t, c.IsCA)
			require.Equal(t, ca.Cert.SubjectKeyId, c.AuthorityKeyId)

			// It verifies against its CA for its role's usages, and not for
			// the others.
			verify := func(u x509.ExtKeyUsage, name string) error {
				_, err := c.Verify(x509.VerifyOptions{Roots: roots, CurrentTime: now, KeyUsages: []x509.ExtKeyUsage{u}, DNSName: name})
				return err
			}
			require.NoError(t, verify(x509.ExtKeyUsageClientAuth, ""))
			if tc.serveAuth {
				require.NoError(t, verify(x509.ExtKeyUsageServerAuth, tc.dns[0]))
			} else {
				require.Error(t, verify(x509.ExtKeyUsageServerAuth, ""))
			}
			require.Error(t, verify(x509.ExtKeyUsageServerAuth, "other.example.com"))
			// Expired after NotAfter, not valid before NotBefore.
			_, err = c.Verify(x509.VerifyOptions{Roots: roots, CurrentTime: c.NotAfter.Add(time.Second), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
			require.Error(t, err)

			// The PEM round-trips and the key is the certificate's.
			parsed, err := parseCertPEM(is.CertPEM)
			require.NoError(t, err)
			require.Equal(t, c.Raw, parsed.Raw)
			require.NoError(t, checkPair(is.CertPEM, is.KeyPEM))
		})
	}
}

func TestCA_Issue_NotByAnotherCA(t *testing.T) {
	ca1, err := CreateCA(CAOptions{})
	require.NoError(t, err)
	ca2, err := CreateCA(CAOptions{})
	require.NoError(t, err)
	is, err := ca2.Issue(CertOptions{Role: RoleClient})
	require.NoError(t, err)
	roots := x509.NewCertPool()
	roots.AddCert(ca1.Cert)
	_, err = is.Cert.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
	require.Error(t, err)
}

func TestCA_Issue_Errors(t *testing.T) {
	now := time.Now()
	ca, err := CreateCA(CAOptions{Validity: time.Hour, Now: func() time.Time { return now }})
	require.NoError(t, err)
	_, err = ca.Issue(CertOptions{Role: "admin"})
	require.ErrorContains(t, err, `unknown role "admin"`)
	_, err = ca.Issue(CertOptions{Role: RoleServer, DNSNames: []string{""}})
	require.ErrorContains(t, err, "empty DNS name")
	_, err = ca.Issue(CertOptions{Role: RoleServer, Now: func() time.Time { return now.Add(2 * time.Hour) }})
	require.ErrorContains(t, err, "the CA expired")
}

func TestParseCA(t *testing.T) {
	ca, err := CreateCA(CAOptions{})
	require.NoError(t, err)
	other, err := CreateCA(CAOptions{})
	require.NoError(t, err)
	leaf, err := ca.Issue(CertOptions{Role: RoleServer})
	require.NoError(t, err)

	got, err := ParseCA(ca.CertPEM, ca.KeyPEM)
	require.NoError(t, err)
	require.Equal(t, ca.Cert.Raw, got.Cert.Raw)

	_, err = ParseCA(ca.CertPEM, other.KeyPEM)
	require.ErrorIs(t, err, ErrKeyMismatch)
	_, err = ParseCA(leaf.CertPEM, leaf.KeyPEM)
	require.ErrorIs(t, err, ErrNotCA)
	_, err = ParseCA([]byte("junk"), ca.KeyPEM)
	require.ErrorIs(t, err, ErrBadPEM)
	_, err = ParseCA(ca.CertPEM, ca.CertPEM)
	require.ErrorIs(t, err, ErrBadPEM)
}

func TestWriteNew(t *testing.T) {
	dir := t.TempDir()
	files := []File{
		{Path: filepath.Join(dir, "a.pem"), Data: []byte("cert"), Mode: CertFileMode},
		{Path: filepath.Join(dir, "a-key.pem"), Data: []byte("key"), Mode: KeyFileMode},
	}
	require.NoError(t, WriteNew(files))
	for _, f := range files {
		st, err := os.Stat(f.Path)
		require.NoError(t, err)
		require.Equal(t, f.Mode, st.Mode().Perm(), f.Path)
		b, err := os.ReadFile(f.Path)
		require.NoError(t, err)
		require.Equal(t, f.Data, b)
	}

	// A second write refuses, names every existing file and writes none.
	again := append(slices.Clone(files), File{Path: filepath.Join(dir, "b.pem"), Data: []byte("x"), Mode: CertFileMode})
	again[0].Data = []byte("other")
	err := WriteNew(again)
	require.ErrorIs(t, err, ErrFileExists)
	var fe *FilesExistError
	require.True(t, errors.As(err, &fe))
	require.Equal(t, []string{files[0].Path, files[1].Path}, fe.Paths)
	require.ErrorContains(t, err, files[0].Path)
	b, _ := os.ReadFile(files[0].Path)
	require.Equal(t, "cert", string(b))
	_, err = os.Stat(filepath.Join(dir, "b.pem"))
	require.True(t, os.IsNotExist(err), "nothing written")

	// A failure midway removes what was created.
	err = WriteNew([]File{
		{Path: filepath.Join(dir, "c.pem"), Data: []byte("c"), Mode: CertFileMode},
		{Path: filepath.Join(dir, "missing", "c-key.pem"), Data: []byte("k"), Mode: KeyFileMode},
	})
	require.Error(t, err)
	_, err = os.Stat(filepath.Join(dir, "c.pem"))
	require.True(t, os.IsNotExist(err), "rolled back")
}
