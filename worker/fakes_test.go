package worker_test

import (
	"context"
	"errors"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/norsk-oss/norsk-manager/proto/commonpb"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
	"github.com/norsk-oss/norsk-manager/proto/workerpb"
	"github.com/norsk-oss/norsk-manager/worker"
	"github.com/norsk-oss/norsk-manager/worker/process"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

const waitTimeout = 10 * time.Second

// fakeManager serves Manager/ClusterMemberRegister on 127.0.0.1.
type fakeManager struct {
	managerpb.UnimplementedManagerServer
	addr string

	mu struct {
		sync.Mutex
		reqs     []*managerpb.ClusterMemberRegisterRequest
		failures []error // returned (and consumed) before succeeding
		reject   error   // returned forever when set
		changed  chan struct{}
	}
	nodeID, credential string
}

func newFakeManager(t *testing.T, nodeID, credential string) *fakeManager {
	t.Helper()
	m := &fakeManager{nodeID: nodeID, credential: credential}
	m.mu.changed = make(chan struct{})
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	m.addr = lis.Addr().String()
	srv := grpc.NewServer()
	managerpb.RegisterManagerServer(srv, m)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		_ = srv.Serve(lis)
	}()
	t.Cleanup(func() {
		srv.Stop()
		wg.Wait()
	})
	return m
}

func (m *fakeManager) ClusterMemberRegister(_ context.Context, req *managerpb.ClusterMemberRegisterRequest) (*managerpb.ClusterMemberRegisterResponse, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.mu.reqs = append(m.mu.reqs, req)
	close(m.mu.changed)
	m.mu.changed = make(chan struct{})
	if m.mu.reject != nil {
		return nil, m.mu.reject
	}
	if len(m.mu.failures) > 0 {
		err := m.mu.failures[0]
		m.mu.failures = m.mu.failures[1:]
		return nil, err
	}
	return &managerpb.ClusterMemberRegisterResponse{
		NodeId:         &commonpb.NodeId{NodeId: m.nodeID},
		NodeCredential: m.credential,
		NodeName:       "slot-" + m.nodeID,
	}, nil
}

// waitRequests waits until n registrations were received and returns them.
func (m *fakeManager) waitRequests(t *testing.T, n int) []*managerpb.ClusterMemberRegisterRequest {
	t.Helper()
	deadline := time.NewTimer(waitTimeout)
	defer deadline.Stop()
	for {
		m.mu.Lock()
		reqs, changed := append([]*managerpb.ClusterMemberRegisterRequest(nil), m.mu.reqs...), m.mu.changed
		m.mu.Unlock()
		if len(reqs) >= n {
			return reqs
		}
		select {
		case <-changed:
		case <-deadline.C:
			t.Fatalf("timed out waiting for %d registrations; have %d", n, len(reqs))
		}
	}
}

// mgrSession is the manager's side of one NodeControllerStream, driven by
// a test. A reader goroutine turns Recv into a channel.
type mgrSession struct {
	stream grpc.BidiStreamingClient[workerpb.NodeControllerMessage, workerpb.WorkerMessage]
	cancel context.CancelFunc
	nonce  string
	msgs   chan *workerpb.WorkerMessage
	errCh  chan error // receives the stream's end, once
	wg     sync.WaitGroup
	end    error // set after errCh was read
	ended  bool
}

// dialSession opens a stream to the worker at addr with the given
// metadata (empty values are left out).
func dialSession(t *testing.T, addr, nodeID, nonce string) *mgrSession {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var kv []string
	if nodeID != "" {
		kv = append(kv, worker.MetadataNodeID, nodeID)
	}
	if nonce != "" {
		kv = append(kv, worker.MetadataNonce, nonce)
	}
	ctx = metadata.AppendToOutgoingContext(ctx, kv...)
	stream, err := workerpb.NewWorkerClient(conn).NodeControllerStream(ctx)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	s := &mgrSession{stream: stream, cancel: cancel, nonce: nonce, msgs: make(chan *workerpb.WorkerMessage, 4096), errCh: make(chan error, 1)}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		for {
			m, err := stream.Recv()
			if err != nil {
				s.errCh <- err
				return
			}
			s.msgs <- m
		}
	}()
	t.Cleanup(func() {
		cancel()
		s.wg.Wait()
		_ = conn.Close()
	})
	return s
}

// next returns the next message, or fails the test if the stream ends or
// nothing arrives in time.
func (s *mgrSession) next(t *testing.T) *workerpb.WorkerMessage {
	t.Helper()
	timer := time.NewTimer(waitTimeout)
	defer timer.Stop()
	select {
	case m := <-s.msgs:
		return m
	case err := <-s.errCh:
		s.ended, s.end = true, err
		t.Fatalf("stream ended: %v", err)
	case <-timer.C:
		t.Fatal("no message from the worker in time")
	}
	return nil
}

// waitFor returns the first message matching pred, skipping others.
func (s *mgrSession) waitFor(t *testing.T, what string, pred func(*workerpb.WorkerMessage) bool) *workerpb.WorkerMessage {
	t.Helper()
	deadline := time.Now().Add(waitTimeout)
	for time.Now().Before(deadline) {
		if m := s.next(t); pred(m) {
			return m
		}
	}
	t.Fatalf("timed out waiting for %s", what)
	return nil
}

// waitEnd waits for the worker to end the stream and returns its status.
func (s *mgrSession) waitEnd(t *testing.T) error {
	t.Helper()
	if s.ended {
		return s.end
	}
	timer := time.NewTimer(waitTimeout)
	defer timer.Stop()
	for {
		select {
		case <-s.msgs:
		case err := <-s.errCh:
			s.ended, s.end = true, err
			return err
		case <-timer.C:
			t.Fatal("the worker did not end the stream")
		}
	}
}

func (s *mgrSession) send(t *testing.T, m *workerpb.NodeControllerMessage) {
	t.Helper()
	if err := s.stream.Send(m); err != nil {
		t.Fatalf("send: %v", err)
	}
}

// hello reads the worker's hello.
func (s *mgrSession) hello(t *testing.T) *workerpb.WorkerHello {
	t.Helper()
	m := s.next(t)
	h := m.GetHello()
	if h == nil {
		t.Fatalf("first message is not hello: %v", m)
	}
	return h
}

// respond answers hello with a signature made from credential (none if
// empty) and epoch.
func (s *mgrSession) respond(t *testing.T, h *workerpb.WorkerHello, credential string, epoch uint64) {
	t.Helper()
	sig := ""
	if credential != "" {
		sig = worker.ManagerProof(credential, worker.NodeID(h.GetNodeMetadata().GetNodeId().GetNodeId()), h.GetToken().GetSignature().GetValue())
	}
	s.send(t, &workerpb.NodeControllerMessage{
		Message:      &workerpb.NodeControllerMessage_HelloResponse{HelloResponse: &workerpb.WorkerHelloResponse{Signature: sig}},
		SessionEpoch: epoch,
	})
}

// open dials, reads hello, checks the worker's proof and answers with a
// good signature; it returns the hello.
func open(t *testing.T, addr, nodeID, credential string, epoch uint64) (*mgrSession, *workerpb.WorkerHello) {
	t.Helper()
	s := dialSession(t, addr, nodeID, "nonce-"+time.Now().Format("150405.000000000"))
	h := s.hello(t)
	if credential != "" {
		want := worker.WorkerProof(credential, worker.NodeID(nodeID), s.nonce)
		if got := h.GetToken().GetCookie(); got != want {
			t.Fatalf("worker proof %q, want %q", got, want)
		}
	}
	s.respond(t, h, credential, epoch)
	s.waitFor(t, "first health", func(m *workerpb.WorkerMessage) bool { return m.GetHealth() != nil })
	return s, h
}

func provision(job *workerpb.WorkerJob, epoch uint64) *workerpb.NodeControllerMessage {
	return &workerpb.NodeControllerMessage{Message: &workerpb.NodeControllerMessage_ProvisionJob{ProvisionJob: job}, SessionEpoch: epoch}
}

func stopJob(key worker.JobKey, epoch uint64) *workerpb.NodeControllerMessage {
	return &workerpb.NodeControllerMessage{Message: &workerpb.NodeControllerMessage_StopJob{StopJob: key.Proto()}, SessionEpoch: epoch}
}

func isStarted(key worker.JobKey) func(*workerpb.WorkerMessage) bool {
	return func(m *workerpb.WorkerMessage) bool {
		return m.GetJobStarted() != nil && worker.KeyFromProto(m.GetJobStarted().GetJobKey()) == key
	}
}

func isStopped(key worker.JobKey) func(*workerpb.WorkerMessage) bool {
	return func(m *workerpb.WorkerMessage) bool {
		return m.GetJobStopped() != nil && worker.KeyFromProto(m.GetJobStopped()) == key
	}
}

func isFailed(key worker.JobKey) func(*workerpb.WorkerMessage) bool {
	return func(m *workerpb.WorkerMessage) bool {
		return m.GetJobFailed() != nil && worker.KeyFromProto(m.GetJobFailed().GetJobKey()) == key
	}
}

func code(err error) codes.Code { return status.Code(err) }

// newRuntime returns a process runtime over dir; its jobs are killed and
// it is shut down when the test ends (after the agent, registered later,
// has stopped).
func newRuntime(t *testing.T, dir string) *process.Runtime {
	t.Helper()
	cfg := process.DevConfig()
	cfg.StateDir = dir
	cfg.Logger = worker.TestLogger(t)
	rt, err := process.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// Keys are stopped at once; events go nowhere after the agent ends,
		// so drain them meanwhile.
		ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
		defer cancel()
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-rt.Events():
				case <-ctx.Done():
					return
				}
			}
		}()
		for _, rj := range rt.List() {
			_ = rt.Stop(ctx, rj.Key(), 0)
		}
		cancel()
		wg.Wait()
		rt.Shutdown()
	})
	return rt
}

func sleeper(id string) *workerpb.WorkerJob {
	return &workerpb.WorkerJob{
		JobId: &commonpb.JobId{JobId: id},
		Role:  "primary",
		Services: []*commonpb.Service{{
			Name:    "app",
			Command: "echo hello from $NORSK_JOB_ID; exec sleep 30",
			Parameters: &commonpb.ServiceParameters{PortMappings: []*commonpb.PortMapping{{
				ContainerPort: 8080, Protocol: commonpb.ProtocolFamily_TCP,
			}}},
		}},
	}
}

// deleterRuntime is a process runtime that also implements
// worker.JobDataDeleter. It records, in order, the Start, Stop and
// DeleteJobData calls it completes, and what was running for the job when
// DeleteJobData was called. While stopGate is open (not closed), Stop waits
// before stopping.
type deleterRuntime struct {
	*process.Runtime
	stopGate chan struct{} // closed: Stop proceeds

	mu struct {
		sync.Mutex
		calls        []string                  // "start j/r", "stop j/r", "delete j"
		runningAtDel map[worker.JobID][]string // roles listed when DeleteJobData(j) ran
		changed      chan struct{}
	}
}

var _ worker.JobDataDeleter = (*deleterRuntime)(nil)

func newDeleterRuntime(t *testing.T) *deleterRuntime {
	t.Helper()
	r := &deleterRuntime{Runtime: newRuntime(t, t.TempDir()), stopGate: make(chan struct{})}
	close(r.stopGate)
	r.mu.runningAtDel = map[worker.JobID][]string{}
	r.mu.changed = make(chan struct{})
	return r
}

// holdStops makes Stop wait until the returned function is called (at the
// latest when the test ends).
func (r *deleterRuntime) holdStops(t *testing.T) (release func()) {
	gate := make(chan struct{})
	r.mu.Lock()
	r.stopGate = gate
	r.mu.Unlock()
	var once sync.Once
	release = func() { once.Do(func() { close(gate) }) }
	t.Cleanup(release)
	return release
}

func (r *deleterRuntime) record(call string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.mu.calls = append(r.mu.calls, call)
	close(r.mu.changed)
	r.mu.changed = make(chan struct{})
}

func (r *deleterRuntime) Start(ctx context.Context, job *workerpb.WorkerJob) (worker.PortMappings, error) {
	pm, err := r.Runtime.Start(ctx, job)
	r.record("start " + worker.KeyOf(job).String())
	return pm, err
}

func (r *deleterRuntime) Stop(ctx context.Context, key worker.JobKey, grace time.Duration) error {
	return r.StopInstance(ctx, key, "", grace)
}

// StopInstance overrides the embedded runtime's (worker.InstanceStopper),
// which the agent calls instead of Stop.
func (r *deleterRuntime) StopInstance(ctx context.Context, key worker.JobKey, instance string, grace time.Duration) error {
	r.mu.Lock()
	gate := r.stopGate
	r.mu.Unlock()
	select {
	case <-gate:
	case <-ctx.Done():
		return ctx.Err()
	}
	err := r.Runtime.StopInstance(ctx, key, instance, grace)
	r.record("stop " + key.String())
	return err
}

func (r *deleterRuntime) DeleteJobData(_ context.Context, id worker.JobID) error {
	var roles []string
	for _, rj := range r.List() {
		if rj.Key().JobID == id {
			roles = append(roles, rj.Key().Role)
		}
	}
	r.mu.Lock()
	r.mu.runningAtDel[id] = roles
	r.mu.Unlock()
	r.record("delete " + string(id))
	if id == "fails" {
		return errors.New("volume in use")
	}
	return nil
}

func (r *deleterRuntime) calls() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.mu.calls...)
}

// waitCall waits until call was recorded and returns every call so far.
func (r *deleterRuntime) waitCall(t *testing.T, call string) []string {
	t.Helper()
	return r.waitCallN(t, call, 1)
}

// waitCallN waits until call was recorded n times and returns every call
// so far.
func (r *deleterRuntime) waitCallN(t *testing.T, call string, n int) []string {
	t.Helper()
	deadline := time.NewTimer(waitTimeout)
	defer deadline.Stop()
	for {
		r.mu.Lock()
		calls, changed := append([]string(nil), r.mu.calls...), r.mu.changed
		r.mu.Unlock()
		if count(calls, call) >= n {
			return calls
		}
		select {
		case <-changed:
		case <-deadline.C:
			t.Fatalf("timed out waiting for the runtime call %q (%d times); calls %v", call, n, calls)
		}
	}
}

func count(calls []string, call string) int {
	n := 0
	for _, c := range calls {
		if c == call {
			n++
		}
	}
	return n
}

func deleteJob(id string, epoch uint64) *workerpb.NodeControllerMessage {
	return &workerpb.NodeControllerMessage{Message: &workerpb.NodeControllerMessage_DeleteJob{DeleteJob: &commonpb.JobId{JobId: id}}, SessionEpoch: epoch}
}
