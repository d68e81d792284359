package client

import (
	"context"
	"fmt"
	"iter"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	// Client-side health checking (the service config's healthCheckConfig):
	// a manager whose grpc.health.v1 status is NOT_SERVING (no Raft leader)
	// is skipped by the balancer.
	_ "google.golang.org/grpc/health"
	"google.golang.org/grpc/peer"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/norsk-oss/norsk-manager/proto/managerpb"
)

// JobID identifies a job (norsk.api.common.JobId on the wire).
type JobID string

// NodeID identifies a node (norsk.api.common.NodeId on the wire).
type NodeID string

// managerService is the full gRPC name of the Manager service.
const managerService = "norsk.api.manager.Manager"

// NorskManager is a connection to one Norsk Manager or to a set of managers
// of one cluster. It mirrors the SDK's NorskManager class: one method per
// Manager RPC, each returning a *CallError (see the package documentation)
// on failure.
//
// A NorskManager is safe for concurrent use. It holds one gRPC channel; Close
// releases it.
//
// Writes that fail with codes.Unavailable are not retried: the manager may
// have lost its quorum after the write was committed, so the write may or may
// not have been applied. A caller that retries a CreateJob must therefore
// accept codes.AlreadyExists, and one that retries an UpdateJob should re-read
// the job (JobByID) first, as the hash may already have moved.
type NorskManager struct {
	conn  *grpc.ClientConn
	api   managerpb.ManagerClient
	addrs []string
	dials *dialTracker
	// probeOpts dial one manager for a health check (probeHealth): the
	// connection's transport, dialer and Settings.DialOptions, without its
	// resolver and service config.
	probeOpts []grpc.DialOption
	timeout   time.Duration
	logger    *slog.Logger

	closeOnce sync.Once
	closeErr  error
}

// Connect validates settings and creates the connection. Connect does not
// wait for a manager: the channel connects in the background and the first
// call reports codes.Unavailable if no manager listed in Settings.URL
// answers. ctx is only checked for cancellation. Connect fails when settings
// are invalid (see Settings.Validate) or a DialOption is rejected by gRPC.
func Connect(ctx context.Context, settings Settings) (*NorskManager, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("client: connect: %w", err)
	}
	if err := settings.Validate(); err != nil {
		return nil, err
	}
	addrs, err := ParseURL(settings.URL)
	if err != nil {
		return nil, fmt.Errorf("client: Settings.URL: %w", err)
	}
	dials := newDialTracker(settings.TLS == nil)
	creds := insecure.NewCredentials()
	if settings.TLS != nil {
		creds = credentials.NewTLS(settings.TLS)
	}
	transport := []grpc.DialOption{
		grpc.WithTransportCredentials(creds),
		grpc.WithContextDialer(dials.dial),
	}
	if settings.TLS != nil && settings.TLS.ServerName != "" {
		// gRPC checks the certificate for the connection's authority,
		// not tls.Config.ServerName.
		transport = append(transport, grpc.WithAuthority(settings.TLS.ServerName))
	}
	opts := append(slices.Clone(transport),
		grpc.WithResolvers(&staticResolver{addrs: addrs}),
		grpc.WithDefaultServiceConfig(serviceConfig(len(addrs))),
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff: backoff.Config{
				BaseDelay:  250 * time.Millisecond,
				Multiplier: 1.6,
				Jitter:     0.2,
				MaxDelay:   5 * time.Second,
			},
			MinConnectTimeout: 5 * time.Second,
		}),
	)
	opts = append(opts, tokenDialOption(settings.Token)...)
	opts = append(opts, settings.DialOptions...)
	conn, err := grpc.NewClient(resolverScheme+":///manager", opts...)
	if err != nil {
		return nil, fmt.Errorf("client: connect to %s: %w", strings.Join(addrs, ","), err)
	}
	logger := settings.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	conn.Connect()
	return &NorskManager{
		conn:      conn,
		api:       managerpb.NewManagerClient(conn),
		addrs:     addrs,
		dials:     dials,
		probeOpts: append(transport, settings.DialOptions...),
		timeout:   settings.Timeout,
		logger:    logger.With("component", "norsk-manager-client"),
	}, nil
}

// serviceConfig is the default gRPC service config: round_robin over the
// managers that report SERVING on grpc.health.v1 (client-side health
// checking: a manager without a Raft leader reports NOT_SERVING and is
// skipped; a manager without the health service counts as serving), and a
// retry policy on Unavailable for the read-only methods that tries up to
// every manager once more (at least 2, at most 5 attempts: the gRPC limit).
// When no manager serves, calls fail at once with Unavailable.
func serviceConfig(managers int) string {
	// Read-only methods change nothing, so a second attempt on another
	// manager is always safe.
	readOnly := []string{"Version", "JobById", "JobSearch", "ListNodes", "ListClusterNodes", "ClusterMembers", "GetBundle", "ListBundles", "GetPool", "ListPools", "ListAuditEntries"}
	attempts := min(max(managers+1, 2), 5)
	names := make([]string, 0, len(readOnly))
	for _, m := range readOnly {
		names = append(names, fmt.Sprintf(`{"service":%q,"method":%q}`, managerService, m))
	}
	return fmt.Sprintf(`{
  "loadBalancingConfig": [{"round_robin": {}}],
  "healthCheckConfig": {"serviceName": %q},
  "methodConfig": [{
    "name": [%s],
    "retryPolicy": {
      "maxAttempts": %d,
      "initialBackoff": "0.05s",
      "maxBackoff": "1s",
      "backoffMultiplier": 2,
      "retryableStatusCodes": ["UNAVAILABLE"]
    }
  }]
}`, managerService, strings.Join(names, ","), attempts)
}

// Addresses returns the manager addresses the connection uses, normalised
// as by ParseURL. The caller must not modify the slice.
func (m *NorskManager) Addresses() []string { return m.addrs }

// Close closes the connection. Calls in flight and open streams end with
// codes.Canceled; later calls fail the same way. Close is idempotent and
// returns the error of the first close, if any.
func (m *NorskManager) Close() error {
	m.closeOnce.Do(func() {
		if err := m.conn.Close(); err != nil {
			m.closeErr = fmt.Errorf("client: close: %w", err)
		}
	})
	return m.closeErr
}

// callContext bounds ctx by the per-call timeout, if any.
func (m *NorskManager) callContext(ctx context.Context) (context.Context, context.CancelFunc) {
	if m.timeout > 0 {
		return context.WithTimeout(ctx, m.timeout)
	}
	return context.WithCancel(ctx)
}

// unary runs one unary call of method under the per-call timeout and wraps
// its error.
func unary[Req, Resp any](ctx context.Context, m *NorskManager, method string, req Req,
	fn func(context.Context, Req, ...grpc.CallOption) (Resp, error)) (Resp, error) {
	resp, _, err := unaryFrom(ctx, m, method, req, fn)
	return resp, err
}

// unaryFrom is unary that also returns the address of the manager that
// answered ("" if unknown).
func unaryFrom[Req, Resp any](ctx context.Context, m *NorskManager, method string, req Req,
	fn func(context.Context, Req, ...grpc.CallOption) (Resp, error)) (Resp, string, error) {
	ctx, cancel := m.callContext(ctx)
	defer cancel()
	var p peer.Peer
	resp, err := fn(ctx, req, grpc.Peer(&p))
	if err != nil {
		var zero Resp
		return zero, "", m.callErr(ctx, method, err, &p)
	}
	addr := ""
	if p.Addr != nil {
		addr = p.Addr.String()
	}
	return resp, addr, nil
}

// Version returns the manager's version information: the Norsk API level
// it implements and its own build.
func (m *NorskManager) Version(ctx context.Context) (*managerpb.VersionInfo, error) {
	return unary(ctx, m, "Version", &emptypb.Empty{}, m.api.Version)
}

// VersionFrom is Version that also returns the address of the manager that
// answered (one of Addresses; "" if gRPC did not report it).
func (m *NorskManager) VersionFrom(ctx context.Context) (*managerpb.VersionInfo, string, error) {
	return unaryFrom(ctx, m, "Version", &emptypb.Empty{}, m.api.Version)
}

// CreateStatusChannel opens the manager's status channel and yields its
// events (a Hello, then log events) until ctx is done, the stream ends (the
// sequence stops without an error) or it fails (the error is yielded last,
// as a *CallError). Nothing is sent before the first iteration. The
// per-call timeout does not apply.
func (m *NorskManager) CreateStatusChannel(ctx context.Context) iter.Seq2[*managerpb.NorskStatusEvent, error] {
	return func(yield func(*managerpb.NorskStatusEvent, error) bool) {
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		stream, err := m.api.CreateStatusChannel(ctx, &emptypb.Empty{})
		if err != nil {
			yield(nil, m.callErr(ctx, "CreateStatusChannel", err, nil))
			return
		}
		recvAll(ctx, m, stream, "CreateStatusChannel", yield)
	}
}

// recvAll yields every message of stream, then the stream's error (as a
// *CallError) unless it ended cleanly, until yield returns false. ctx is
// the call's (it bounds the health probes of a local Unavailable).
func recvAll[T any](ctx context.Context, m *NorskManager, stream grpc.ServerStreamingClient[T], method string, yield func(*T, error) bool) {
	for {
		msg, err := stream.Recv()
		if err != nil {
			if !isEOF(err) {
				yield(nil, m.callErr(ctx, method, err, nil))
			}
			return
		}
		if !yield(msg, nil) {
			return
		}
	}
}
