package node

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	"github.com/norsk-oss/norsk-manager/proto/managerpb"
	"github.com/norsk-oss/norsk-manager/proto/workerauth"
	"github.com/norsk-oss/norsk-manager/proto/workerpb"
)

// sessionParams are what a session child needs to dial its worker.
type sessionParams struct {
	nodeID string
	target string // host:port
	epoch  uint64
	nonce  string
	// helloTimeout bounds the wait for the worker's hello; initialHealth
	// the gap between hello and the next message; health the gap between
	// any two messages after that.
	helloTimeout, initialHealth, health time.Duration
	dialOptions                         []grpc.DialOption
}

// Messages from a session child to its node grain. Each carries the epoch
// of its session so the grain can ignore a superseded one.
type (
	sessionHello struct {
		epoch uint64
		hello *workerpb.WorkerHello
	}
	workerMessage struct {
		epoch uint64
		msg   *workerpb.WorkerMessage
	}
	sessionDown struct {
		epoch  uint64
		err    error
		reason managerpb.NodeStopping_Reason
	}
)

// Messages from the node grain to its session child.
type (
	// acceptHello lets the session answer the hello: the worker is
	// verified and the epoch is durable.
	acceptHello struct{ signature string }
	// sendToWorker sends one message on the stream.
	sendToWorker struct {
		msg *workerpb.NodeControllerMessage
	}
	// closeGracefully half-closes the stream after the messages queued
	// before it, and stops the session once the worker has ended its side
	// (or after closeGrace).
	closeGracefully struct{}
)

// closeGrace bounds how long a gracefully closing session waits for the
// worker to end the stream.
const closeGrace = 2 * time.Second

// readerDone tells the session actor its reading goroutine has ended.
type readerDone struct{}

// streamReady hands the open stream from the session's goroutine to the
// session actor.
type streamReady struct {
	stream grpc.BidiStreamingClient[workerpb.NodeControllerMessage, workerpb.WorkerMessage]
}

// session is the child actor holding one gRPC stream to a worker (dialled
// back by the manager: the worker is the server). A goroutine owned by the
// actor dials, reads the hello and then every message, and posts them to
// the node grain; the actor serialises sends. The session ends (and tells
// the grain why) on any stream error or when a health watchdog fires.
type session struct {
	p      sessionParams
	parent *actor.PID
	system *actor.ActorSystem

	cancel   context.CancelFunc
	done     chan struct{}
	stream   grpc.BidiStreamingClient[workerpb.NodeControllerMessage, workerpb.WorkerMessage]
	accepted bool
	closing  bool
}

func newSessionProps(p sessionParams) *actor.Props {
	return actor.PropsFromProducer(func() actor.Actor { return &session{p: p} })
}

func (s *session) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *actor.Started:
		s.parent, s.system = ctx.Parent(), ctx.ActorSystem()
		rctx, cancel := context.WithCancel(context.Background())
		s.cancel, s.done = cancel, make(chan struct{})
		go s.run(rctx, ctx.Self())
	case *streamReady:
		s.stream = m.stream
	case *acceptHello:
		s.accepted = true
		s.send(&workerpb.NodeControllerMessage{
			Message: &workerpb.NodeControllerMessage_HelloResponse{HelloResponse: &workerpb.WorkerHelloResponse{Signature: m.signature}},
		})
	case *sendToWorker:
		if s.accepted {
			s.send(m.msg)
		}
	case *closeGracefully:
		s.closing = true
		if s.stream != nil {
			_ = s.stream.CloseSend()
		}
		self, sys := ctx.Self(), ctx.ActorSystem()
		time.AfterFunc(closeGrace, func() { sys.Root.Stop(self) })
	case *readerDone:
		if s.closing {
			ctx.Stop(ctx.Self())
		}
	case *actor.Stopping:
		s.cancel()
		<-s.done
	}
}

func (s *session) send(msg *workerpb.NodeControllerMessage) {
	if s.stream == nil {
		return
	}
	msg.SessionEpoch = s.p.epoch
	if err := s.stream.Send(msg); err != nil {
		// The reader sees the same failure and reports it; make sure it
		// does not wait for a message that will never come.
		s.cancel()
	}
}

// run dials the worker and reads its stream until it fails.
func (s *session) run(ctx context.Context, self *actor.PID) {
	defer close(s.done)
	reason, err := s.serve(ctx, self)
	s.system.Root.Send(s.parent, &sessionDown{epoch: s.p.epoch, err: err, reason: reason})
	s.system.Root.Send(self, &readerDone{})
}

func (s *session) serve(ctx context.Context, self *actor.PID) (managerpb.NodeStopping_Reason, error) {
	opts := append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, s.p.dialOptions...)
	conn, err := grpc.NewClient(s.p.target, opts...)
	if err != nil {
		return managerpb.NodeStopping_STARTUP_TIME_EXCEEDED, fmt.Errorf("dial worker at %s: %w", s.p.target, err)
	}
	defer conn.Close()

	var mu sync.Mutex
	why := managerpb.NodeStopping_STARTUP_TIME_EXCEEDED
	setWhy := func(r managerpb.NodeStopping_Reason) { mu.Lock(); why = r; mu.Unlock() }
	getWhy := func() managerpb.NodeStopping_Reason { mu.Lock(); defer mu.Unlock(); return why }
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	watchdog := time.AfterFunc(s.p.helloTimeout, cancel)
	defer watchdog.Stop()

	sctx = metadata.AppendToOutgoingContext(sctx, workerauth.MetadataNodeID, s.p.nodeID, workerauth.MetadataNonce, s.p.nonce)
	stream, err := workerpb.NewWorkerClient(conn).NodeControllerStream(sctx)
	if err != nil {
		return getWhy(), fmt.Errorf("open worker stream at %s: %w", s.p.target, err)
	}
	s.system.Root.Send(self, &streamReady{stream: stream})
	first, err := stream.Recv()
	if err != nil {
		return getWhy(), fmt.Errorf("worker at %s: waiting for hello: %w", s.p.target, err)
	}
	hello := first.GetHello()
	if hello == nil {
		return getWhy(), fmt.Errorf("worker at %s: first message is not a hello (%T)", s.p.target, first.GetMessage())
	}
	setWhy(managerpb.NodeStopping_INITIALISATION_HEALTH_PING_TIME_EXCEEDED)
	watchdog.Reset(s.p.initialHealth)
	s.system.Root.Send(s.parent, &sessionHello{epoch: s.p.epoch, hello: hello})
	for {
		msg, err := stream.Recv()
		if err != nil {
			if errors.Is(sctx.Err(), context.Canceled) && ctx.Err() == nil {
				return getWhy(), fmt.Errorf("worker at %s sent nothing within the health timeout", s.p.target)
			}
			return managerpb.NodeStopping_HEALTH_PING_TIME_EXCEEDED, fmt.Errorf("worker stream at %s: %w", s.p.target, err)
		}
		setWhy(managerpb.NodeStopping_HEALTH_PING_TIME_EXCEEDED)
		watchdog.Reset(s.p.health)
		s.system.Root.Send(s.parent, &workerMessage{epoch: s.p.epoch, msg: msg})
	}
}
