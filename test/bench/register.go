package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/norsk-oss/norsk-manager/proto/commonpb"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
	"github.com/norsk-oss/norsk-manager/proto/workerauth"
	"github.com/norsk-oss/norsk-manager/proto/workerpb"
)

// runRegister measures ClusterMemberRegister → node_started for e.slots
// cluster slots, one after the other, each joined by an in-bench minimal
// worker that stays connected (health every 2 s) for the rest of the run.
func runRegister(ctx context.Context, e *env) error {
	// Every slot registers from 127.0.0.1: the per-address registration
	// rate limit would measure itself.
	m, err := e.startManager(ctx, filepath.Join(e.dir("register"), "data"), "", "--register-rate", "0")
	if err != nil {
		return err
	}
	defer m.stop()
	conn, api, err := dial(m.addr)
	if err != nil {
		return err
	}
	defer conn.Close()
	ev, err := watchEvents(ctx, m.addr)
	if err != nil {
		return err
	}
	defer ev.close()
	slots := make([]*managerpb.RegisterClusterNodeResponse, e.slots)
	for i := range slots {
		if slots[i], err = api.RegisterClusterNode(ctx, &managerpb.RegisterClusterNodeRequest{
			NodeName: fmt.Sprintf("bench-slot-%03d", i), Tags: map[string]string{"bench": "register"}}); err != nil {
			return fmt.Errorf("RegisterClusterNode: %w", err)
		}
	}
	var calls, started []time.Duration
	for i, s := range slots {
		w, err := newMiniWorker(s.GetNodeId().GetNodeId())
		if err != nil {
			return err
		}
		defer w.stop()
		c, st, err := registerTrial(ctx, api, ev, w, s.GetToken())
		if err != nil {
			return fmt.Errorf("slot %d: %w", i, err)
		}
		calls, started = append(calls, c), append(started, st)
	}
	printRegister(e, calls, started)
	return nil
}

// registerTrial registers w's slot and waits for its node_started.
func registerTrial(ctx context.Context, api managerpb.ManagerClient, ev *eventWatch, w *miniWorker, token string) (call, started time.Duration, err error) {
	host, _ := os.Hostname()
	t0 := time.Now()
	resp, err := api.ClusterMemberRegister(ctx, &managerpb.ClusterMemberRegisterRequest{
		Token: token, Address: "127.0.0.1", Port: w.port, WorkerVersion: "bench",
		Hardware: &managerpb.ClusterHardware{Hostname: host, CpuCount: uint32(runtime.NumCPU()), Os: "linux"},
	})
	if err != nil {
		return 0, 0, fmt.Errorf("ClusterMemberRegister: %w", err)
	}
	call = time.Since(t0)
	w.setCredential(resp.GetNodeCredential())
	at, err := ev.waitFor(ctx, eventTimeout, "node_started", func(x *managerpb.EventStreamEvent) bool {
		return nodeStarted(x, w.nodeID)
	})
	if err != nil {
		return 0, 0, err
	}
	return call, at.Sub(t0), nil
}

func printRegister(e *env, calls, started []time.Duration) {
	w := e.out
	fmt.Fprintln(w, "## register")
	fmt.Fprintln(w)
	fmt.Fprintf(w, "A norsk-manager process (fsync on); %d cluster slots registered first (RegisterClusterNode), then joined one after the other "+
		"by in-bench minimal workers (norsk.api.worker.Worker/NodeControllerStream: hello with the credential proof, then health at once and every 2 s), "+
		"each staying connected; time from the ClusterMemberRegister call to node_started on an EventStream subscription.\n\n", e.slots)
	fmt.Fprintln(w, latencyHeader)
	latencyRow(w, "ClusterMemberRegister call returns", calls, 0)
	latencyRow(w, "ClusterMemberRegister → node_started", started, 0)
	fmt.Fprintln(w)
}

// miniWorker is the smallest worker the manager accepts: it serves
// NodeControllerStream, proves its credential in hello, checks the
// manager's proof and pings health (at once, then every 2 s). It runs no
// jobs.
type miniWorker struct {
	workerpb.UnimplementedWorkerServer
	nodeID string
	port   uint32
	srv    *grpc.Server

	credOnce sync.Once
	credSet  chan struct{} // closed once credential is set
	cred     string        // written once before credSet is closed
}

func newMiniWorker(nodeID string) (*miniWorker, error) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	w := &miniWorker{nodeID: nodeID, port: uint32(lis.Addr().(*net.TCPAddr).Port), srv: grpc.NewServer(), credSet: make(chan struct{})}
	workerpb.RegisterWorkerServer(w.srv, w)
	go func() { _ = w.srv.Serve(lis) }()
	return w, nil
}

func (w *miniWorker) stop() { w.srv.Stop() }

// setCredential hands the worker the credential of its registration; a
// session dialled before that waits for it, as the real worker does.
func (w *miniWorker) setCredential(c string) {
	w.credOnce.Do(func() { w.cred = c; close(w.credSet) })
}

func (w *miniWorker) NodeControllerStream(stream grpc.BidiStreamingServer[workerpb.NodeControllerMessage, workerpb.WorkerMessage]) error {
	md, _ := metadata.FromIncomingContext(stream.Context())
	if v := md.Get(workerauth.MetadataNodeID); len(v) != 1 || v[0] != w.nodeID {
		return status.Errorf(codes.Unauthenticated, "not node %s", w.nodeID)
	}
	nonces := md.Get(workerauth.MetadataNonce)
	if len(nonces) != 1 {
		return status.Error(codes.Unauthenticated, "no nonce")
	}
	select {
	case <-w.credSet:
	case <-time.After(10 * time.Second):
		return status.Error(codes.Unavailable, "not registered yet")
	case <-stream.Context().Done():
		return stream.Context().Err()
	}
	mine := workerauth.NewNonce()
	hello := &workerpb.WorkerHello{
		NodeMetadata: &commonpb.NodeMetadata{NodeId: &commonpb.NodeId{NodeId: w.nodeID}},
		Token: &workerpb.WorkerAuthenticationToken{InstanceId: w.nodeID, Cookie: workerauth.WorkerProof(w.cred, w.nodeID, nonces[0]),
			Signature: &commonpb.OptionalString{Value: mine}},
	}
	if err := stream.Send(&workerpb.WorkerMessage{Message: &workerpb.WorkerMessage_Hello{Hello: hello}}); err != nil {
		return err
	}
	resp, err := stream.Recv()
	if err != nil {
		return err
	}
	if !workerauth.Equal(resp.GetHelloResponse().GetSignature(), workerauth.ManagerProof(w.cred, w.nodeID, mine)) {
		return status.Error(codes.Unauthenticated, "hello_response does not prove the credential")
	}
	return w.serve(stream)
}

// serve pings health at once and then every 2 s, as the real worker does
// (the manager counts the node as started at the first ping), and discards
// what the manager sends until the stream ends.
func (w *miniWorker) serve(stream grpc.BidiStreamingServer[workerpb.NodeControllerMessage, workerpb.WorkerMessage]) error {
	health := &workerpb.WorkerMessage{Message: &workerpb.WorkerMessage_Health{Health: &workerpb.Health{}}}
	if err := stream.Send(health); err != nil {
		return err
	}
	done := make(chan struct{})
	defer close(done)
	go func() {
		t := time.NewTicker(2 * time.Second)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				// Only this goroutine sends from now on.
				if stream.Send(health) != nil {
					return
				}
			}
		}
	}()
	for {
		if _, err := stream.Recv(); err != nil {
			return err
		}
	}
}
