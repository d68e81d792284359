package ha

// Mutual TLS between managers (docs/design/security.md, "Raft and actor
// ports"). Helpers start with pt so that they never collide with the
// package's others.

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/base64"
	"fmt"
	"io"
	"net"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/remote"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/norsk-oss/norsk-manager/client"
	"github.com/norsk-oss/norsk-manager/cluster/pki"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
	"github.com/norsk-oss/norsk-manager/test/testproc"
)

var ptPeerName = pki.RoleName(pki.RoleServer, pki.DefaultDomain)

// ptReloader loads files (with the CA bundle trust) for a test client.
func ptReloader(t *testing.T, f pki.Files, trust string) *pki.Reloader {
	t.Helper()
	f.CA = trust
	r, err := pki.NewReloader(pki.ReloaderConfig{Files: f})
	require.NoError(t, err)
	return r
}

// ptRawTLS dials addr with cfg and returns the serial of the server's
// certificate and the error of the handshake or of a first read that
// waits a second (TLS 1.3 reports a refused client certificate there): a
// read that times out (Raft waits for a command) or returns data (gRPC
// sends its settings first) means the server accepted the client (nil).
func ptRawTLS(addr string, cfg *tls.Config) (string, error) {
	c, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr, cfg)
	if err != nil {
		return "", err
	}
	defer c.Close()
	serial := c.ConnectionState().PeerCertificates[0].SerialNumber.Text(16)
	_ = c.SetReadDeadline(time.Now().Add(time.Second))
	n, err := c.Read(make([]byte, 1))
	if ne, ok := err.(net.Error); n > 0 || ok && ne.Timeout() {
		return serial, nil
	}
	return serial, err
}

// ptActorCall calls the protoactor remote's ListProcesses on addr with
// creds: an Unavailable error means the connection was refused;
// Unimplemented (the manager serves no unary method there) that it was
// accepted.
func ptActorCall(t *testing.T, addr string, creds credentials.TransportCredentials) error {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(creds), grpc.WithAuthority(ptPeerName))
	require.NoError(t, err)
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	_, err = remote.NewRemotingClient(conn).ListProcesses(ctx, &remote.ListProcessesRequest{Pattern: "x"})
	return err
}

// ptMembers returns m's view of the members by name.
func ptMembers(m *testproc.Manager) (map[string]*managerpb.ClusterMember, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	resp, err := m.Members(ctx)
	if err != nil {
		return nil, err
	}
	out := map[string]*managerpb.ClusterMember{}
	for _, mem := range resp.GetMembers() {
		out[mem.GetName()] = mem
	}
	return out, nil
}

// TestHA_PeerTLS runs three managers with mutual TLS (one server
// certificate and the CA, as README "Securing a cluster" does) and a
// fourth process that has the gossip key but a certificate of another CA:
// it appears in the gossip, the leader refuses its Raft port and never
// makes it a voter, no grain is placed on it, and the cluster keeps
// committing. Raw clients to the Raft and actor ports are refused
// (plaintext, another CA, a client certificate of the cluster CA), a
// manager's certificate is accepted. Then the certificate is renewed in
// place and SIGHUP makes every port serve it without a restart; a
// restarted manager rejoins over the renewed certificates.
func TestHA_PeerTLS(t *testing.T) {
	if testing.Short() {
		t.Skip("HA test: starts manager processes")
	}
	dir := t.TempDir()
	ca, caPath := pki.TestCA(t, dir)
	_, srv := pki.TestIssue(t, ca, dir, "server", pki.CertOptions{Role: pki.RoleServer})
	_, clientFiles := pki.TestIssue(t, ca, dir, "client", pki.CertOptions{Role: pki.RoleClient})
	otherDir := t.TempDir()
	otherCA, otherCAPath := pki.TestCA(t, otherDir)
	_, rogueFiles := pki.TestIssue(t, otherCA, otherDir, "rogue", pki.CertOptions{Role: pki.RoleServer})
	gossipKey := make([]byte, 32)
	_, _ = rand.Read(gossipKey)
	key := base64.StdEncoding.EncodeToString(gossipKey)

	cfg, err := client.TLSFiles{CACert: caPath, ClientCert: clientFiles.Cert, ClientKey: clientFiles.Key}.Config()
	require.NoError(t, err)
	c := testproc.NewCluster(t, 3, "--tls-cert", srv.Cert, "--tls-key", srv.Key, "--tls-ca", caPath, "--gossip-key", key)
	c.TLS = cfg
	for _, m := range c.Managers {
		m.TLS = cfg
	}
	c.StartAll()
	leader := c.Leader(60 * time.Second)
	cl := c.Client()
	createAcked(t, cl, "before-rogue")

	// The rogue: the gossip key, a server certificate of another CA that
	// it also trusts.
	rogueRaft := testproc.Addr(testproc.FreePort(t))
	rogue := testproc.Start(t, "rogue", "norsk-manager",
		"--data-dir", filepath.Join(t.TempDir(), "rogue"), "--api-addr", testproc.Addr(testproc.FreePort(t)), "--name", "rogue",
		"--gossip-addr", testproc.Addr(testproc.FreePort(t)), "--cluster-addr", testproc.Addr(testproc.FreePort(t)), "--raft-addr", rogueRaft,
		"--cluster-timings", "local", "--log-level", "debug", "--join", c.Join(), "--gossip-key", key,
		"--tls-cert", rogueFiles.Cert, "--tls-key", rogueFiles.Key, "--tls-ca", otherCAPath)

	testproc.Await(t, 60*time.Second, "the leader refuses the rogue's raft port", func() error {
		if !rogue.Running() {
			t.Fatalf("rogue exited:\n%s", rogue.Output())
		}
		for _, line := range strings.Split(leader.Proc().Output(), "\n") {
			if strings.Contains(line, "raft address refused mutual tls") && strings.Contains(line, rogueRaft) {
				return nil
			}
		}
		return fmt.Errorf("no refusal of %s in %s's log", rogueRaft, leader.Name)
	})
	testproc.Await(t, 30*time.Second, "the rogue alive in the gossip, three voters", func() error {
		ms, err := ptMembers(leader)
		if err != nil {
			return err
		}
		if r := ms["rogue"]; r == nil || r.GetGossipState() != "alive" {
			return fmt.Errorf("rogue not alive in the gossip: %v", r)
		}
		return nil
	})
	// Writes whose grains hash all over the ring commit (none lands on
	// the rogue), and it is never a voter meanwhile.
	for i := range 12 {
		createAcked(t, cl, fmt.Sprintf("with-rogue-%d", i))
		ms, err := ptMembers(leader)
		require.NoError(t, err)
		require.False(t, ms["rogue"].GetVoter(), "the rogue became a voter")
		voters := 0
		for _, m := range ms {
			if m.GetVoter() {
				voters++
			}
		}
		require.Equal(t, 3, voters)
	}
	for i := range 12 {
		_, err := cl.JobByID(context.Background(), client.JobID(fmt.Sprintf("with-rogue-%d", i)))
		require.NoError(t, err)
	}
	require.True(t, rogue.Running())

	t.Run("raw clients", func(t *testing.T) {
		good := ptReloader(t, srv, caPath)
		for _, port := range []struct{ name, addr string }{{"raft", leader.RaftAddr}, {"actor", leader.ActorAddr}} {
			cases := []struct {
				name string
				cfg  *tls.Config
				ok   bool
			}{
				{"no client certificate", &tls.Config{RootCAs: good.PeerClientConfig(ptPeerName).RootCAs, ServerName: ptPeerName}, false},
				{"server certificate of another CA", ptReloader(t, rogueFiles, caPath).PeerClientConfig(ptPeerName), false},
				{"client certificate of the cluster CA", ptReloader(t, clientFiles, caPath).PeerClientConfig(ptPeerName), false},
				{"a manager's certificate", good.PeerClientConfig(ptPeerName), true},
			}
			for _, tc := range cases {
				t.Run(port.name+"/"+tc.name, func(t *testing.T) {
					if port.name == "actor" {
						tc.cfg.NextProtos = []string{"h2"}
					}
					_, err := ptRawTLS(port.addr, tc.cfg)
					if tc.ok {
						require.NoError(t, err)
					} else {
						require.Error(t, err)
					}
				})
			}
		}
		// Plaintext to the Raft port: no answer, the connection closes.
		conn, err := net.DialTimeout("tcp", leader.RaftAddr, 5*time.Second)
		require.NoError(t, err)
		defer conn.Close()
		_, _ = conn.Write([]byte{0, 1, 2, 3, 4, 5, 6, 7})
		_ = conn.SetReadDeadline(time.Now().Add(15 * time.Second))
		_, err = io.ReadFull(conn, make([]byte, 64))
		require.Error(t, err)
		// gRPC to the actor port: plaintext and another CA are refused, a
		// manager's certificate gets an answer.
		err = ptActorCall(t, leader.ActorAddr, insecure.NewCredentials())
		require.Equal(t, codes.Unavailable, status.Code(err), "plaintext: %v", err)
		err = ptActorCall(t, leader.ActorAddr, credentials.NewTLS(ptReloader(t, rogueFiles, caPath).PeerClientConfig(ptPeerName)))
		require.Equal(t, codes.Unavailable, status.Code(err), "another CA: %v", err)
		err = ptActorCall(t, leader.ActorAddr, credentials.NewTLS(good.PeerClientConfig(ptPeerName)))
		require.Equal(t, codes.Unimplemented, status.Code(err), "a manager's certificate: %v", err)
		require.True(t, leader.Proc().Running(), "%s survives the calls", leader.Name)
	})

	t.Run("renewal without restart", func(t *testing.T) {
		good := ptReloader(t, srv, caPath)
		before, err := ptRawTLS(leader.RaftAddr, good.PeerClientConfig(ptPeerName))
		require.NoError(t, err)
		renewed, _ := pki.TestIssue(t, ca, dir, "server", pki.CertOptions{Role: pki.RoleServer})
		want := renewed.Cert.SerialNumber.Text(16)
		require.NotEqual(t, before, want)
		for _, m := range c.Managers {
			require.NoError(t, m.Proc().Cmd.Process.Signal(syscall.SIGHUP))
		}
		_, err = good.Reload()
		require.NoError(t, err)
		for _, m := range c.Managers {
			for _, addr := range []string{m.RaftAddr, m.ActorAddr} {
				testproc.Await(t, 30*time.Second, m.Name+" serves the renewed certificate on "+addr, func() error {
					h2 := good.PeerClientConfig(ptPeerName)
					if addr == m.ActorAddr {
						h2.NextProtos = []string{"h2"}
					}
					serial, err := ptRawTLS(addr, h2)
					if err != nil {
						return err
					}
					if serial != want {
						return fmt.Errorf("serial %s, want %s", serial, want)
					}
					return nil
				})
			}
		}
		// New links between managers use it: a follower restarted dials
		// and is dialled afresh.
		var follower *testproc.Manager
		for _, m := range c.Managers {
			if m != leader {
				follower = m
				break
			}
		}
		follower.Kill()
		follower.Start()
		follower.WaitServing(60 * time.Second)
		createAcked(t, follower.Client(), "after-renewal")
		for _, m := range c.Managers {
			_, err := m.Client().JobByID(context.Background(), "after-renewal")
			require.NoError(t, err, m.Name)
		}
	})
}

// TestHA_ActorPortRefusesUnary: protoactor's unary methods on the actor
// port (which panic in the pinned version) are refused, so a plaintext
// call from anyone who reaches the port does not end a manager.
func TestHA_ActorPortRefusesUnary(t *testing.T) {
	if testing.Short() {
		t.Skip("HA test: starts manager processes")
	}
	c := testproc.NewCluster(t, 1)
	c.StartAll()
	m := c.Managers[0]
	for range 2 {
		err := ptActorCall(t, m.ActorAddr, insecure.NewCredentials())
		require.Equal(t, codes.Unimplemented, status.Code(err), "%v", err)
	}
	require.True(t, m.Proc().Running())
	createAcked(t, c.Client(), "after-calls")
}
