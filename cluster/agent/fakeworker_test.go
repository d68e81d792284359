package agent

import (
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/norsk-oss/norsk-manager/proto/commonpb"
	"github.com/norsk-oss/norsk-manager/proto/workerauth"
	"github.com/norsk-oss/norsk-manager/proto/workerpb"
)

// fakeWorker is a minimal worker for manager tests: it serves
// NodeControllerStream, proves its credential, pings health, answers
// provision_job with job_started and stop_job with job_stopped, and
// remembers what it runs.
type fakeWorker struct {
	workerpb.UnimplementedWorkerServer
	t    *testing.T
	lis  net.Listener
	srv  *grpc.Server
	port uint32

	mu         sync.Mutex
	nodeID     string
	credential string
	running    map[[2]string]*workerpb.WorkerJob
	received   []*workerpb.NodeControllerMessage
	sessions   int
	epochs     []uint64
	// silent stops health pings (the session then times out).
	silent atomic.Bool
	// healthSeq numbers the health pings (Health.seq, as a worker that
	// fences); 0 while unset, as an older worker.
	healthSeq atomic.Bool
	seq       atomic.Uint64
	// resources is sent in hello (nil: none, as an older worker).
	resources *commonpb.NodeResources
	// refuse, when set and returning a reason, answers a provision_job
	// with job_failed carrying it (as a runtime that cannot start the job).
	refuse func(*workerpb.WorkerJob) string
	// helloGate, when set, holds each session's hello until it is closed
	// (the session is counted, and its hello built, before).
	helloGate chan struct{}
	// dropStops, while positive, makes the worker take a stop_job without
	// acting on it or answering (as one whose answer was lost), counting
	// down.
	dropStops atomic.Int32
}

func newFakeWorker(t *testing.T) *fakeWorker {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	w := &fakeWorker{t: t, lis: lis, srv: grpc.NewServer(), running: map[[2]string]*workerpb.WorkerJob{},
		port: uint32(lis.Addr().(*net.TCPAddr).Port)}
	workerpb.RegisterWorkerServer(w.srv, w)
	go w.srv.Serve(lis)
	t.Cleanup(w.srv.Stop)
	return w
}

// setResources sets what the next hellos report (nil: none).
func (w *fakeWorker) setResources(r *commonpb.NodeResources) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.resources = r
}

// sessionCount is the number of streams the manager opened.
func (w *fakeWorker) sessionCount() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.sessions
}

func (w *fakeWorker) setCredential(node, cred string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.nodeID, w.credential = node, cred
}

func (w *fakeWorker) NodeControllerStream(stream grpc.BidiStreamingServer[workerpb.NodeControllerMessage, workerpb.WorkerMessage]) error {
	md, _ := metadata.FromIncomingContext(stream.Context())
	nonce := first(md.Get(workerauth.MetadataNonce))
	w.mu.Lock()
	w.sessions++
	hello := &workerpb.WorkerHello{NodeMetadata: &commonpb.NodeMetadata{NodeId: &commonpb.NodeId{NodeId: w.nodeID}}, Resources: w.resources}
	if w.credential != "" {
		hello.Token = &workerpb.WorkerAuthenticationToken{InstanceId: w.nodeID, Cookie: workerauth.WorkerProof(w.credential, w.nodeID, nonce),
			Signature: &commonpb.OptionalString{Value: "worker-nonce"}}
	}
	for _, j := range w.running {
		hello.RunningJobs = append(hello.RunningJobs, &workerpb.WorkerRunningJob{Job: j})
	}
	cred, node, gate := w.credential, w.nodeID, w.helloGate
	w.mu.Unlock()
	if gate != nil {
		select {
		case <-gate:
		case <-stream.Context().Done():
			return stream.Context().Err()
		}
	}
	if err := stream.Send(&workerpb.WorkerMessage{Message: &workerpb.WorkerMessage_Hello{Hello: hello}}); err != nil {
		return err
	}
	resp, err := stream.Recv()
	if err != nil {
		return err
	}
	if cred != "" && resp.GetHelloResponse().GetSignature() != workerauth.ManagerProof(cred, node, "worker-nonce") {
		return status.Error(codes.Unauthenticated, "bad manager proof")
	}
	w.mu.Lock()
	w.epochs = append(w.epochs, resp.GetSessionEpoch())
	w.mu.Unlock()
	sendMu := sync.Mutex{}
	send := func(m *workerpb.WorkerMessage) error { sendMu.Lock(); defer sendMu.Unlock(); return stream.Send(m) }
	done := make(chan struct{})
	defer close(done)
	go func() {
		t := time.NewTicker(200 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				if w.silent.Load() {
					continue
				}
				h := &workerpb.Health{}
				if w.healthSeq.Load() {
					h.Seq = w.seq.Add(1)
				}
				if send(&workerpb.WorkerMessage{Message: &workerpb.WorkerMessage_Health{Health: h}}) != nil {
					return
				}
			}
		}
	}()
	for {
		m, err := stream.Recv()
		if err != nil {
			return err
		}
		w.mu.Lock()
		w.received = append(w.received, m)
		w.mu.Unlock()
		switch x := m.GetMessage().(type) {
		case *workerpb.NodeControllerMessage_ProvisionJob:
			key := [2]string{x.ProvisionJob.GetJobId().GetJobId(), x.ProvisionJob.GetRole()}
			w.mu.Lock()
			if w.refuse != nil {
				if why := w.refuse(x.ProvisionJob); why != "" {
					w.mu.Unlock()
					_ = send(&workerpb.WorkerMessage{Message: &workerpb.WorkerMessage_JobFailed{JobFailed: &workerpb.WorkerJobFailed{
						JobKey: &commonpb.ActiveJobKey{JobId: x.ProvisionJob.GetJobId(), Role: x.ProvisionJob.GetRole()},
						Reason: why, InstanceId: x.ProvisionJob.GetInstanceId()}}})
					continue
				}
			}
			w.running[key] = x.ProvisionJob
			w.mu.Unlock()
			_ = send(&workerpb.WorkerMessage{Message: &workerpb.WorkerMessage_JobStarted{JobStarted: &workerpb.WorkerJobStarted{
				JobKey: &commonpb.ActiveJobKey{JobId: x.ProvisionJob.GetJobId(), Role: x.ProvisionJob.GetRole()}}}})
		case *workerpb.NodeControllerMessage_StopJob:
			if w.dropStops.Add(-1) >= 0 {
				continue
			}
			w.dropStops.Store(0)
			w.mu.Lock()
			delete(w.running, [2]string{x.StopJob.GetJobId().GetJobId(), x.StopJob.GetRole()})
			w.mu.Unlock()
			_ = send(&workerpb.WorkerMessage{Message: &workerpb.WorkerMessage_JobStopped{JobStopped: x.StopJob}})
		}
	}
}

func (w *fakeWorker) isRunning(job, role string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	_, ok := w.running[[2]string{job, role}]
	return ok
}

func first(v []string) string {
	if len(v) == 0 {
		return ""
	}
	return v[0]
}

// deletedJobs returns the job ids of the delete_job messages received, in
// order.
func (w *fakeWorker) deletedJobs() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	var ids []string
	for _, m := range w.received {
		if d := m.GetDeleteJob(); d != nil {
			ids = append(ids, d.GetJobId())
		}
	}
	return ids
}
