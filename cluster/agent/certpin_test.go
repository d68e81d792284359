package agent

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"net"
	"path/filepath"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/norsk-oss/norsk-manager/cluster/pki"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
	"github.com/norsk-oss/norsk-manager/proto/workerauth"
	"github.com/norsk-oss/norsk-manager/proto/workerpb"
)

func TestCheckClientCert(t *testing.T) {
	addr := &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 1}
	at := func(auth credentials.AuthInfo) context.Context {
		return peer.NewContext(context.Background(), &peer.Peer{Addr: addr, AuthInfo: auth})
	}
	noCert := at(credentials.TLSInfo{State: tls.ConnectionState{}})
	withCert := at(credentials.TLSInfo{State: tls.ConnectionState{VerifiedChains: [][]*x509.Certificate{{{}}}}})
	register := managerpb.Manager_ClusterMemberRegister_FullMethodName
	for _, tc := range []struct {
		name   string
		ctx    context.Context
		method string
		want   codes.Code
	}{
		{"registration without a client certificate", noCert, register, codes.OK},
		{"registration without a peer at all", context.Background(), register, codes.OK},
		{"an API method without a client certificate", noCert, managerpb.Manager_CreateJob_FullMethodName, codes.Unauthenticated},
		{"a stream without a client certificate", noCert, managerpb.Manager_EventStream_FullMethodName, codes.Unauthenticated},
		{"the ACL bootstrap without a client certificate", noCert, managerpb.Manager_AclBootstrap_FullMethodName, codes.Unauthenticated},
		{"health without a client certificate", noCert, healthpb.Health_Check_FullMethodName, codes.Unauthenticated},
		{"the internal service without a client certificate", noCert, clusterServicePrefix + "Append", codes.Unauthenticated},
		{"no peer", context.Background(), managerpb.Manager_CreateJob_FullMethodName, codes.Unauthenticated},
		{"not TLS", at(nil), managerpb.Manager_CreateJob_FullMethodName, codes.Unauthenticated},
		{"an API method with a verified certificate", withCert, managerpb.Manager_CreateJob_FullMethodName, codes.OK},
		{"registration with a verified certificate", withCert, register, codes.OK},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := checkClientCert(tc.ctx, tc.method)
			require.Equal(t, tc.want, status.Code(err), "%v", err)
			if err != nil {
				require.Contains(t, status.Convert(err).Message(), "needs a client certificate of the cluster CA")
			}
		})
	}
}

// countingListener counts the connections it accepts.
type countingListener struct {
	net.Listener
	accepted atomic.Int64
}

func (l *countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.accepted.Add(1)
	}
	return c, err
}

// newSelfSignedWorker is a fakeWorker serving TLS on addr ("127.0.0.1:0"
// for any port) with the self-signed certificate in file (made if
// missing), as --self-signed does.
func newSelfSignedWorker(t *testing.T, addr, file string) (*fakeWorker, *countingListener, []byte) {
	t.Helper()
	ss, err := pki.LoadOrCreateSelfSigned(file, "worker.norsk", nil)
	require.NoError(t, err)
	certs, err := pki.NewReloader(pki.ReloaderConfig{Files: pki.Files{Cert: ss.Path, Key: ss.Path}})
	require.NoError(t, err)
	l, err := net.Listen("tcp", addr)
	require.NoError(t, err)
	lis := &countingListener{Listener: l}
	w := &fakeWorker{t: t, lis: lis, srv: grpc.NewServer(grpc.Creds(credentials.NewTLS(certs.ServerConfig(false)))),
		running: map[[2]string]*workerpb.WorkerJob{}, port: uint32(l.Addr().(*net.TCPAddr).Port)}
	workerpb.RegisterWorkerServer(w.srv, w)
	go w.srv.Serve(lis)
	t.Cleanup(w.srv.Stop)
	return w, lis, ss.Fingerprint
}

// TestClusterSlots_PinnedCertificate: a worker registering with the
// fingerprint of its self-signed certificate is dialled back over TLS
// accepting that certificate only; the pin does not change on a
// re-registration; another certificate at the node's address gets no
// session even with the node's credential.
func TestClusterSlots_PinnedCertificate(t *testing.T) {
	ctx := context.Background()
	_, c := startAgent(t, t.TempDir())
	reg, err := c.RegisterClusterNode(ctx, &managerpb.RegisterClusterNodeRequest{NodeName: "cloud-1"})
	require.NoError(t, err)
	id := reg.GetNodeId().GetNodeId()
	keyFile := filepath.Join(t.TempDir(), "worker-tls.pem")
	w, _, pin := newSelfSignedWorker(t, "127.0.0.1:0", keyFile)
	_, _, otherPin := newSelfSignedWorker(t, "127.0.0.1:0", filepath.Join(t.TempDir(), "other.pem"))

	_, err = c.ClusterMemberRegister(ctx, &managerpb.ClusterMemberRegisterRequest{Token: reg.GetToken(), Address: "127.0.0.1", Port: w.port,
		WorkerCertSha256: pin[:16]})
	requireCode(t, err, codes.InvalidArgument, "worker_cert_sha256")

	first, err := c.ClusterMemberRegister(ctx, &managerpb.ClusterMemberRegisterRequest{Token: reg.GetToken(), Address: "127.0.0.1", Port: w.port,
		WorkerCertSha256: pin})
	require.NoError(t, err)
	w.setCredential(id, first.GetNodeCredential())
	eventually(t, "the pinned worker online", func() bool { return nodeState(t, c, id) == managerpb.NodeLifecycle_NODE_LIFECYCLE_STARTED })

	for _, tc := range []struct {
		name string
		sha  []byte
	}{{"another certificate", otherPin}, {"no certificate fingerprint", nil}} {
		t.Run("re-registration with "+tc.name+" refused", func(t *testing.T) {
			_, err := c.ClusterMemberRegister(ctx, &managerpb.ClusterMemberRegisterRequest{NodeCredential: first.GetNodeCredential(),
				Address: "127.0.0.1", Port: w.port, WorkerCertSha256: tc.sha})
			requireCode(t, err, codes.PermissionDenied, "pinned", "new slot")
			require.Equal(t, workerauth.ReasonCertChanged, reasonOf(err))
		})
	}
	again, err := c.ClusterMemberRegister(ctx, &managerpb.ClusterMemberRegisterRequest{NodeCredential: first.GetNodeCredential(),
		Address: "127.0.0.1", Port: w.port, WorkerCertSha256: pin})
	require.NoError(t, err, "the same certificate re-registers")
	require.Equal(t, id, again.GetNodeId().GetNodeId())
	eventually(t, "online after re-registering", func() bool { return nodeState(t, c, id) == managerpb.NodeLifecycle_NODE_LIFECYCLE_STARTED })
	sessions := w.sessionCount()

	// Another worker, holding the node's credential but another key, takes
	// the node's address: the manager's dials reach it and are refused by
	// the pin, before any hello.
	addr := w.lis.Addr().String()
	w.srv.Stop()
	impostor, counted, _ := newSelfSignedWorker(t, addr, filepath.Join(t.TempDir(), "impostor.pem"))
	impostor.setCredential(id, first.GetNodeCredential())
	eventually(t, "the manager dialling the impostor twice (or opening a session)", func() bool {
		return counted.accepted.Load() >= 2 || impostor.sessionCount() > 0
	})
	require.Zero(t, impostor.sessionCount(), "a session opened to a certificate that is not the pinned one")
	impostor.srv.Stop()

	// The real worker (its key file kept) comes back on its address: the
	// session is up again.
	back, _, _ := newSelfSignedWorker(t, addr, keyFile)
	back.setCredential(id, first.GetNodeCredential())
	eventually(t, "the pinned worker's session back", func() bool { return back.sessionCount() > 0 })
	require.Positive(t, sessions)
}

// reasonOf returns the workerauth reason of a status error ("" if none).
func reasonOf(err error) string {
	for _, d := range status.Convert(err).Details() {
		if ei, ok := d.(interface{ GetReason() string }); ok {
			return ei.GetReason()
		}
	}
	return ""
}
