package worker

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"sync"
	"time"

	"github.com/norsk-oss/norsk-manager/proto/commonpb"
	"github.com/norsk-oss/norsk-manager/proto/workerpb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/norsk-oss/norsk-manager/proto/workerauth"
)

// Metadata keys the manager sets when it opens NodeControllerStream.
const (
	// MetadataNodeID is the node id the manager expects to reach.
	MetadataNodeID = workerauth.MetadataNodeID
	// MetadataNonce is the manager's fresh random nonce for the worker's
	// proof.
	MetadataNonce = workerauth.MetadataNonce
)

// session is one NodeControllerStream call. Its handler goroutine is the
// only one calling Send; a helper goroutine owns Recv.
type session struct {
	epoch  uint64
	nodeID NodeID
	queue  chan *workerpb.WorkerMessage // messages to send, filled by the hub

	dropped uint64 // job info dropped on a full queue; guarded by hub.mu

	// backlog is what the session must send before its queue: set by
	// hub.Promote, then consumed by the session's handler goroutine (the
	// same goroutine), and handed back to the hub by hub.Release.
	backlog []pending

	endOnce sync.Once
	endCh   chan struct{} // closed by end; only ever closed
	endErr  error         // set before endCh is closed
}

// pending is a backlog entry: a lifecycle event (seq > 0) or buffered job
// info.
type pending struct {
	msg  *workerpb.WorkerMessage
	seq  uint64       // the lifecycle event's hub sequence; 0 for job info
	info bufferedInfo // the job info (seq == 0)
}

func newSession(nodeID NodeID, queueLen int) *session {
	return &session{nodeID: nodeID, queue: make(chan *workerpb.WorkerMessage, queueLen), endCh: make(chan struct{})}
}

// offer queues m without blocking; false if the queue is full.
func (s *session) offer(m *workerpb.WorkerMessage) bool {
	select {
	case s.queue <- m:
		return true
	default:
		return false
	}
}

// end asks the session's handler to return err. Idempotent; never blocks.
func (s *session) end(err error) {
	s.endOnce.Do(func() {
		s.endErr = err
		close(s.endCh)
	})
}

// serveSession runs one NodeControllerStream: identity checks, hello,
// hello_response verification, promotion to current session, then the
// message loop. It returns a gRPC status error when it refuses or ends the
// session.
func (a *Agent) serveSession(stream workerpb.Worker_NodeControllerStreamServer) error {
	ctx := stream.Context()
	wantNode, managerNonce := incomingMetadata(ctx)
	log := a.log.With("session_node_id", wantNode, "peer", peerAddr(ctx))

	id, err := a.sessionIdentity(ctx, wantNode, managerNonce)
	if err != nil {
		log.Warn("refusing manager session", "error", err)
		return err
	}
	nodeID := NodeID(wantNode)
	if id != nil {
		nodeID = id.NodeID
	}
	log = a.log.With("node_id", nodeID, "peer", peerAddr(ctx))
	s := newSession(nodeID, a.cfg.SessionQueue+a.cfg.PendingEventLimit)

	helloSeq := a.hub.Seq()
	hello, workerNonce, err := a.buildHello(ctx, nodeID, id, managerNonce)
	if err != nil {
		return status.Errorf(codes.Internal, "worker: build hello: %v", err)
	}
	if err := stream.Send(hello); err != nil {
		return err
	}

	recvCh := make(chan *workerpb.NodeControllerMessage)
	recvErrCh := make(chan error, 1)
	a.goFunc(func() { recvLoop(ctx, stream, recvCh, recvErrCh) })

	if err := a.handshake(ctx, s, id, workerNonce, recvCh, recvErrCh, log); err != nil {
		return err
	}
	if err := a.hub.Promote(s, helloSeq); err != nil {
		log.Warn("refusing manager session", "epoch", s.epoch, "error", err)
		return err
	}
	defer a.hub.Release(s)
	log.Info("manager session established", "epoch", s.epoch, "running_jobs", len(hello.GetHello().GetRunningJobs()))
	err = a.sessionLoop(ctx, stream, s, recvCh, recvErrCh, log)
	log.Info("manager session ended", "epoch", s.epoch, "reason", err)
	return err
}

func recvLoop(ctx context.Context, stream workerpb.Worker_NodeControllerStreamServer,
	recvCh chan<- *workerpb.NodeControllerMessage, recvErrCh chan<- error) {
	for {
		m, err := stream.Recv()
		if err != nil {
			recvErrCh <- err
			return
		}
		select {
		case recvCh <- m:
		case <-ctx.Done():
			recvErrCh <- ctx.Err()
			return
		}
	}
}

// sessionIdentity checks the session's metadata against this worker's
// identity. It returns nil (and no error) for a mock-pool worker.
func (a *Agent) sessionIdentity(ctx context.Context, wantNode, nonce string) (*Identity, error) {
	if !a.cfg.registers() {
		return nil, nil
	}
	id := a.waitIdentity(ctx)
	if id == nil {
		return nil, status.Error(codes.Unavailable, "worker: not registered with a manager yet; retry")
	}
	if wantNode != string(id.NodeID) {
		return nil, status.Errorf(codes.Unauthenticated,
			"worker: this worker is node %q, not %q (metadata %s)", id.NodeID, wantNode, MetadataNodeID)
	}
	if nonce == "" {
		return nil, status.Errorf(codes.Unauthenticated, "worker: metadata %s is missing", MetadataNonce)
	}
	return id, nil
}

// buildHello returns the hello message and, when id is set, the worker
// nonce the manager must sign.
func (a *Agent) buildHello(ctx context.Context, nodeID NodeID, id *Identity, managerNonce string) (*workerpb.WorkerMessage, string, error) {
	load, err := a.load.Sample(ctx)
	if err != nil {
		a.log.Debug("measuring load", "error", err)
	}
	hello := &workerpb.WorkerHello{
		NodeMetadata: &commonpb.NodeMetadata{
			NodeId: &commonpb.NodeId{NodeId: string(nodeID)},
			Tags:   a.cfg.Tags,
		},
		MeasuredLoad:      load,
		RuntimeConditions: runtimeConditions(a.rt),
		Resources:         a.cfg.Resources,
	}
	for _, rj := range a.rt.List() {
		hello.RunningJobs = append(hello.RunningJobs, rj.Proto())
	}
	var workerNonce string
	if id != nil {
		if workerNonce, err = newNonce(); err != nil {
			return nil, "", err
		}
		hello.Token = &workerpb.WorkerAuthenticationToken{
			InstanceId: string(id.NodeID),
			Cookie:     WorkerProof(id.Credential, id.NodeID, managerNonce),
			Signature:  &commonpb.OptionalString{Value: workerNonce},
		}
	}
	return &workerpb.WorkerMessage{Message: &workerpb.WorkerMessage_Hello{Hello: hello}}, workerNonce, nil
}

// handshake waits for hello_response, verifies it when the worker holds a
// credential, and sets s.epoch.
func (a *Agent) handshake(ctx context.Context, s *session, id *Identity, workerNonce string,
	recvCh <-chan *workerpb.NodeControllerMessage, recvErrCh <-chan error, log *slog.Logger) error {
	timer := time.NewTimer(a.cfg.HelloResponseTimeout)
	defer timer.Stop()
	var first *workerpb.NodeControllerMessage
	select {
	case first = <-recvCh:
	case err := <-recvErrCh:
		return err
	case <-timer.C:
		log.Warn("manager sent no hello_response in time", "timeout", a.cfg.HelloResponseTimeout)
		return status.Errorf(codes.DeadlineExceeded, "worker: no hello_response within %s", a.cfg.HelloResponseTimeout)
	case <-a.stopCh:
		return status.Error(codes.Unavailable, "worker: shutting down")
	case <-ctx.Done():
		return ctx.Err()
	}
	hr := first.GetHelloResponse()
	if hr == nil {
		return status.Error(codes.FailedPrecondition, "worker: the first message of a session must be hello_response")
	}
	if id != nil && !ProofEqual(ManagerProof(id.Credential, id.NodeID, workerNonce), hr.GetSignature()) {
		log.Warn("refusing manager session: hello_response signature does not match this node's credential",
			"epoch", first.GetSessionEpoch())
		return status.Error(codes.Unauthenticated, "worker: hello_response signature does not prove this node's credential")
	}
	s.epoch = first.GetSessionEpoch()
	return nil
}

// sessionLoop sends queued events and health, and dispatches commands,
// until the stream ends, the session is superseded or the agent stops.
func (a *Agent) sessionLoop(ctx context.Context, stream workerpb.Worker_NodeControllerStreamServer, s *session,
	recvCh <-chan *workerpb.NodeControllerMessage, recvErrCh <-chan error, log *slog.Logger) error {
	if err := a.sendHealth(ctx, stream); err != nil {
		return err
	}
	ticker := time.NewTicker(a.cfg.HealthInterval)
	defer ticker.Stop()
	// While the backlog is not empty, one entry is sent per round and the
	// queue waits (it holds newer events); commands and health go on.
	backlogReady := make(chan struct{})
	close(backlogReady)
	for {
		queue, sendBacklog := s.queue, (<-chan struct{})(nil)
		if len(s.backlog) > 0 {
			queue, sendBacklog = nil, backlogReady
		}
		select {
		case <-sendBacklog:
			if err := stream.Send(s.backlog[0].msg); err != nil {
				return err
			}
			s.backlog[0] = pending{}
			s.backlog = s.backlog[1:]
		case m := <-queue:
			if err := stream.Send(m); err != nil {
				return err
			}
		case <-ticker.C:
			if err := a.sendHealth(ctx, stream); err != nil {
				return err
			}
		case m := <-recvCh:
			a.dispatch(s, m, log)
		case err := <-recvErrCh:
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		case <-s.endCh:
			return s.endErr
		case <-a.stopCh:
			return status.Error(codes.Unavailable, "worker: shutting down")
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

func (a *Agent) sendHealth(ctx context.Context, stream workerpb.Worker_NodeControllerStreamServer) error {
	load, err := a.load.Sample(ctx)
	if err != nil {
		a.log.Debug("measuring load", "error", err)
	}
	return stream.Send(&workerpb.WorkerMessage{Message: &workerpb.WorkerMessage_Health{
		Health: &workerpb.Health{MeasuredLoad: load, RuntimeConditions: runtimeConditions(a.rt), Seq: a.lease.nextSeq()},
	}})
}

// dispatch obeys a command if s is the current session and the message's
// epoch (when set) is the session's.
func (a *Agent) dispatch(s *session, m *workerpb.NodeControllerMessage, log *slog.Logger) {
	if e := m.GetSessionEpoch(); e != 0 && e != s.epoch {
		log.Warn("ignoring a command whose session_epoch differs from its session's", "epoch", s.epoch, "message_epoch", e)
		return
	}
	if !a.hub.IsCurrent(s) {
		log.Warn("ignoring a command from a superseded session", "epoch", s.epoch)
		return
	}
	switch msg := m.GetMessage().(type) {
	case *workerpb.NodeControllerMessage_ProvisionJob:
		a.provision(msg.ProvisionJob, log)
	case *workerpb.NodeControllerMessage_StopJob:
		a.stop(KeyFromProto(msg.StopJob), msg.StopJob.GetInstanceId(), log)
	case *workerpb.NodeControllerMessage_UpdateJob:
		a.update(msg.UpdateJob, log)
	case *workerpb.NodeControllerMessage_DeleteJob:
		a.deleteJobData(JobID(msg.DeleteJob.GetJobId()), log)
	case *workerpb.NodeControllerMessage_HealthAck:
		a.lease.ack(msg.HealthAck.GetSeq())
	case *workerpb.NodeControllerMessage_HelloResponse:
		log.Debug("ignoring a repeated hello_response")
	default:
		log.Warn("ignoring an unknown manager message")
	}
}

func incomingMetadata(ctx context.Context) (nodeID, nonce string) {
	md, _ := metadata.FromIncomingContext(ctx)
	first := func(k string) string {
		if v := md.Get(k); len(v) > 0 {
			return v[0]
		}
		return ""
	}
	return first(MetadataNodeID), first(MetadataNonce)
}

func peerAddr(ctx context.Context) string {
	if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
		return p.Addr.String()
	}
	return ""
}
