package clienttest

import (
	"crypto/tls"
	"errors"
	"net"
	"sync"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/norsk-oss/norsk-manager/proto/managerpb"
)

// Server is a gRPC server serving one managerpb.ManagerServer on loopback.
type Server struct {
	// Addr is the "127.0.0.1:port" the server listens on.
	Addr string

	gs       *grpc.Server
	health   *health.Server
	doneCh   chan struct{} // closed when Serve has returned
	stopOnce sync.Once
}

// Serve starts a gRPC server for srv, with grpc.health.v1 reporting
// SERVING (see SetServing), listening on addr ("127.0.0.1:0" picks a
// free port; an address of an earlier, stopped Server restarts "the same
// manager"). The server is stopped when the test ends; t.Fatal is called if
// addr cannot be bound.
func Serve(t testing.TB, srv managerpb.ManagerServer, addr string) *Server {
	t.Helper()
	return serve(t, srv, addr)
}

// ServeTLS is Serve over TLS with cfg (a manager started with
// --tls-cert), for tests of clients' TLS settings.
func ServeTLS(t testing.TB, srv managerpb.ManagerServer, addr string, cfg *tls.Config) *Server {
	t.Helper()
	return serve(t, srv, addr, grpc.Creds(credentials.NewTLS(cfg)))
}

func serve(t testing.TB, srv managerpb.ManagerServer, addr string, opts ...grpc.ServerOption) *Server {
	t.Helper()
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("clienttest: listen on %s: %v", addr, err)
	}
	s := &Server{Addr: lis.Addr().String(), gs: grpc.NewServer(opts...), health: health.NewServer(), doneCh: make(chan struct{})}
	managerpb.RegisterManagerServer(s.gs, srv)
	healthpb.RegisterHealthServer(s.gs, s.health)
	s.SetServing(true)
	go func() {
		defer close(s.doneCh)
		if err := s.gs.Serve(lis); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
			t.Errorf("clienttest: serve on %s: %v", s.Addr, err)
		}
	}()
	t.Cleanup(s.Stop)
	return s
}

// SetServing sets the server's grpc.health.v1 status (overall and for the
// Manager service): SERVING, or NOT_SERVING as a manager without a Raft
// leader reports.
func (s *Server) SetServing(ok bool) {
	st := healthpb.HealthCheckResponse_NOT_SERVING
	if ok {
		st = healthpb.HealthCheckResponse_SERVING
	}
	s.health.SetServingStatus("", st)
	s.health.SetServingStatus(managerpb.Manager_ServiceDesc.ServiceName, st)
}

// Stop stops the server abruptly, as a crashing manager would: listeners and
// connections are closed and open streams fail with codes.Unavailable on the
// client. Stop is idempotent and returns once the server has stopped.
func (s *Server) Stop() {
	s.stopOnce.Do(s.gs.Stop)
	<-s.doneCh
}

// UnusedAddr returns a loopback address nothing listens on (a port that was
// free a moment ago), for tests of a manager that is down.
func UnusedAddr(t testing.TB) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("clienttest: listen: %v", err)
	}
	addr := lis.Addr().String()
	if err := lis.Close(); err != nil {
		t.Fatalf("clienttest: close listener: %v", err)
	}
	return addr
}
