package replication_test

import (
	"context"
	"crypto/tls"
	"io"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/norsk-oss/norsk-manager/cluster/pki"
	"github.com/norsk-oss/norsk-manager/cluster/replication"
	"github.com/norsk-oss/norsk-manager/persistence"
)

// peerName is the name every manager's certificate carries.
var peerName = pki.RoleName(pki.RoleServer, pki.DefaultDomain)

// testPKI is a CA and the reloaders of the certificates it issued, in a
// temporary directory.
type testPKI struct {
	t      *testing.T
	dir    string
	ca     *pki.CA
	caPath string
}

func newTestPKI(t *testing.T) *testPKI {
	dir := t.TempDir()
	ca, caPath := pki.TestCA(t, dir)
	return &testPKI{t: t, dir: dir, ca: ca, caPath: caPath}
}

// reloader issues a certificate of role named name and loads it with the
// CA bundle trust.
func (p *testPKI) reloader(name string, role pki.Role, trust string) *pki.Reloader {
	_, f := pki.TestIssue(p.t, p.ca, p.dir, name, pki.CertOptions{Role: role})
	f.CA = trust
	r, err := pki.NewReloader(pki.ReloaderConfig{Files: f, Name: name})
	require.NoError(p.t, err)
	return r
}

func peerTLS(r *pki.Reloader) *replication.PeerTLS {
	return &replication.PeerTLS{Server: r.PeerServerConfig(peerName), Client: func() *tls.Config { return r.PeerClientConfig(peerName) }}
}

// rawTLS dials addr with cfg and returns the error of the handshake or of
// a first read that waits up to a second (TLS 1.3 reports a refused client
// certificate there); a read that times out means accepted (nil), and
// the serial of the server's certificate.
func rawTLS(t *testing.T, addr string, cfg *tls.Config) (string, error) {
	t.Helper()
	c, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr, cfg)
	if err != nil {
		return "", err
	}
	defer c.Close()
	serial := c.ConnectionState().PeerCertificates[0].SerialNumber.Text(16)
	_ = c.SetReadDeadline(time.Now().Add(time.Second))
	_, err = c.Read(make([]byte, 1))
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		return serial, nil
	}
	return serial, err
}

// TestReplication_TLS: three managers replicate over mutual TLS; their
// Raft ports refuse plaintext, a certificate of another CA and a
// certificate of the CA that is not a manager's; the leader's probe
// refuses a Raft node of another CA (so it is never added as a voter);
// and a renewed certificate serves the next connection without a restart.
func TestReplication_TLS(t *testing.T) {
	p := newTestPKI(t)
	certs := map[string]*pki.Reloader{}
	c := newTestClusterTLS(t, 3, func(name string) *replication.PeerTLS {
		certs[name] = p.reloader(name, pki.RoleServer, p.caPath)
		return peerTLS(certs[name])
	})
	for _, nd := range c.nodes {
		require.True(t, nd.rep.TLS(), nd.name)
	}
	f := c.followers()[0]
	_, err := f.rep.Journal().Append(ctx(t), persistence.JobKey("j"), 0, change("v1"))
	require.NoError(t, err)
	for _, nd := range c.nodes {
		b, _, err := nd.rep.Journal().Load(ctx(t), persistence.JobKey("j"))
		require.NoError(t, err, nd.name)
		require.Equal(t, "v1", desc(t, b), nd.name)
	}
	l := c.leader()

	other := newTestPKI(t)
	t.Run("rogue clients refused", func(t *testing.T) {
		cases := []struct {
			name string
			cfg  *tls.Config
			want string
		}{
			{"no client certificate", &tls.Config{RootCAs: certs["m1"].PeerClientConfig(peerName).RootCAs, ServerName: peerName}, "certificate required"},
			{"server certificate of another CA", other.reloader("rogue", pki.RoleServer, p.caPath).PeerClientConfig(peerName), "unknown certificate authority"},
			{"worker certificate of the CA", p.reloader("w", pki.RoleWorker, p.caPath).PeerClientConfig(peerName), "bad certificate"},
		}
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				_, err := rawTLS(t, l.raft, tc.cfg)
				require.ErrorContains(t, err, tc.want)
			})
		}
		// Plaintext: raft's own framing gets no answer; the connection
		// is closed when the handshake fails.
		conn, err := net.DialTimeout("tcp", l.raft, 5*time.Second)
		require.NoError(t, err)
		defer conn.Close()
		_, _ = conn.Write([]byte{0, 1, 2, 3, 4, 5, 6, 7}) // rpcAppendEntries and junk
		_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
		n, err := io.ReadFull(conn, make([]byte, 64))
		require.Error(t, err, "plaintext answered with %d bytes", n)
		// A manager's own certificate is accepted.
		_, err = rawTLS(t, l.raft, certs["m2"].PeerClientConfig(peerName))
		require.NoError(t, err)
	})

	t.Run("probe", func(t *testing.T) {
		for _, nd := range c.nodes {
			require.NoError(t, l.rep.Probe(context.Background(), nd.raft), nd.name)
		}
		// A Raft node with a certificate of another CA: neither side
		// accepts the other.
		rogue := &node{name: "rogue", raft: freeAddr(t)}
		rc := &testCluster{t: t, tls: func(string) *replication.PeerTLS {
			return peerTLS(other.reloader("rogue-m", pki.RoleServer, other.caPath))
		}}
		rc.start(rogue)
		require.ErrorContains(t, l.rep.Probe(context.Background(), rogue.raft), "unknown authority")
		require.Error(t, rogue.rep.Probe(context.Background(), l.raft))
		// Nothing listening.
		require.Error(t, l.rep.Probe(context.Background(), freeAddr(t)))
	})

	t.Run("renewal without restart", func(t *testing.T) {
		before, err := rawTLS(t, l.raft, certs["m2"].PeerClientConfig(peerName))
		require.NoError(t, err)
		renewed, _ := pki.TestIssue(t, p.ca, p.dir, l.name, pki.CertOptions{Role: pki.RoleServer})
		changed, err := certs[l.name].Reload()
		require.NoError(t, err)
		require.True(t, changed)
		after, err := rawTLS(t, l.raft, certs["m2"].PeerClientConfig(peerName))
		require.NoError(t, err)
		require.NotEqual(t, before, after)
		require.Equal(t, renewed.Cert.SerialNumber.Text(16), after)
		// And the cluster still commits through the renewed leader.
		_, err = f.rep.Journal().Append(ctx(t), persistence.JobKey("j"), 1, change("v2"))
		require.NoError(t, err)
	})
}
