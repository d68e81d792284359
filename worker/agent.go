package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/norsk-oss/norsk-manager/proto/workerpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/reflection"
)

// serverStopTimeout bounds the graceful stop of the gRPC server at
// shutdown, after every session was asked to end.
const serverStopTimeout = 5 * time.Second

// Agent is the worker agent: it registers with the manager (when it has a
// token), serves NodeControllerStream, and drives a Runtime. Create it with
// New and call Run once.
type Agent struct {
	cfg  Config
	log  *slog.Logger
	rt   Runtime
	load *loadSampler
	hub  *hub
	ops  *keyQueue
	// lease is the fence's lease (fence.go); set by Run once the state
	// directory is locked, before any session or the fence starts.
	lease *lease

	running atomic.Bool
	wg      sync.WaitGroup // every goroutine the agent starts

	readyCh    chan struct{} // closed when the server listens; only ever closed
	stopCh     chan struct{} // closed when Run begins to stop; only ever closed
	identityCh chan struct{} // closed when an identity is first known; only ever closed

	mu struct {
		sync.Mutex
		identity *Identity       // nil until registered (never set for a mock-pool worker)
		addr     net.Addr        // set before readyCh is closed
		opsCtx   context.Context // Run's context: job commands run under it
		// starting cancels the context of the Start in flight per key, so
		// that a stop_job does not wait behind it (see stop).
		starting map[JobKey]map[*context.CancelFunc]struct{}
		// fenced holds, per key, the instance the fence is stopping: its
		// EventStopped goes out with ActiveJobKey.fenced (fence.go).
		fenced map[JobKey]string
	}
}

// New validates cfg and returns an Agent. It does no I/O.
func New(cfg Config) (*Agent, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	log = log.With("component", "worker")
	a := &Agent{
		cfg:        cfg,
		log:        log,
		rt:         cfg.Runtime,
		load:       newLoadSampler(cfg.StateDir),
		hub:        newHub(log, cfg.PendingEventLimit, newInfoBuffer(cfg.OfflineInfoLines, cfg.OfflineInfoBytes, cfg.OfflineInfoTotalBytes)),
		readyCh:    make(chan struct{}),
		stopCh:     make(chan struct{}),
		identityCh: make(chan struct{}),
	}
	a.ops = newKeyQueue(a.goFunc)
	return a, nil
}

// Run locks Config.StateDir (LockStateDir, held until Run returns),
// restores the runtime's jobs, listens on Config.Listen, registers with
// the manager (with a Token) and serves manager sessions until ctx is
// cancelled. It returns nil after a cancellation, once every goroutine it
// started has exited; every job keeps running (a worker stopping never
// stops jobs). It returns an error, after the same cleanup, if another
// worker holds the state directory (a *StateDirInUseError), the listener
// fails, Restore fails, the stored identity is unreadable (matching
// ErrBadStoredIdentity) or missing without a Token (ErrNoStoredIdentity),
// present in a mock-pool worker's state directory
// (ErrIdentityWithoutManager), or a manager refuses the registration (a
// *RegistrationError, which matches ErrRegistrationRejected and explains
// what an operator should do). The one case in which Run stops jobs: a
// refusal saying that this worker's own node is gone for good (its slot
// deregistered, or the node terminated: RegistrationError.NodeRetired);
// Run then stops every job before returning, since no manager will manage
// them again (retire.go). Run does not log the error it returns: reporting
// it is the caller's job. Run may be called only once.
func (a *Agent) Run(ctx context.Context) error {
	if !a.running.CompareAndSwap(false, true) {
		return errors.New("worker: Agent.Run called twice")
	}
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	a.mu.Lock()
	a.mu.opsCtx = runCtx
	a.mu.Unlock()

	lock, err := LockStateDir(a.cfg.StateDir)
	if err != nil {
		return err
	}
	defer func() {
		if err := lock.Release(); err != nil {
			a.log.Warn("releasing the state directory", "error", err)
		}
	}()
	if err := a.loadStoredIdentity(); err != nil {
		return err
	}
	a.lease = newLease(a.log, a.cfg.StateDir)
	if err := a.rt.Restore(runCtx); err != nil {
		return fmt.Errorf("worker: restore jobs: %w", err)
	}
	lis, err := net.Listen("tcp", a.cfg.Listen)
	if err != nil {
		return fmt.Errorf("worker: listen on %s: %w", a.cfg.Listen, err)
	}
	srv := a.newServer()
	errCh := make(chan error, 2)
	a.goFunc(func() { a.pumpEvents(runCtx) })
	a.goFunc(func() { a.runFence(runCtx) })
	a.goFunc(func() {
		if err := srv.Serve(lis); err != nil {
			errCh <- fmt.Errorf("worker: serve: %w", err)
		}
	})
	a.mu.Lock()
	a.mu.addr = lis.Addr()
	a.mu.Unlock()
	close(a.readyCh)
	a.log.Info("worker listening", "addr", lis.Addr().String(), "mock_pool", !a.cfg.registers(), "tls", a.cfg.ServerTLS != nil)

	if a.cfg.registers() {
		a.goFunc(func() {
			if err := a.registerLoop(runCtx); err != nil && runCtx.Err() == nil {
				errCh <- err
			}
		})
	}
	select {
	case <-runCtx.Done():
		a.log.Info("worker stopping; jobs keep running")
	case err = <-errCh:
		if rej := retiredNode(err); rej != nil {
			a.stopRetired(runCtx, cancel, srv, rej)
			return err
		}
		// The caller reports err; logging it here too would show it twice.
		a.log.Info("worker stopping on an error; jobs keep running")
	}
	cancel()
	close(a.stopCh)
	a.ops.Close()
	a.stopServer(srv)
	a.wg.Wait()
	return err
}

// stopRetired ends Run after a refusal that retired this worker's node:
// sessions end first (no command may start a job any more), then every job
// is stopped (retire) while the event pump still runs, then the rest of
// Run's goroutines end.
func (a *Agent) stopRetired(runCtx context.Context, cancel context.CancelFunc, srv *grpc.Server, rej *RegistrationError) {
	close(a.stopCh)
	a.stopServer(srv)
	a.retire(runCtx, rej)
	cancel()
	a.ops.Close()
	a.wg.Wait()
}

// Ready returns a channel closed once Run listens; Addr is valid then.
func (a *Agent) Ready() <-chan struct{} { return a.readyCh }

// Addr returns the address the gRPC server listens on, or nil before Ready.
func (a *Agent) Addr() net.Addr {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.mu.addr
}

// Identity returns the node identity, and false while the worker is not
// registered (always false for a mock-pool worker).
func (a *Agent) Identity() (Identity, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.mu.identity == nil {
		return Identity{}, false
	}
	return *a.mu.identity, true
}

// workerMaxConcurrentStreams bounds the calls in flight on one connection
// to the worker's dial-back port.
const workerMaxConcurrentStreams = 16

func (a *Agent) newServer() *grpc.Server {
	opts := []grpc.ServerOption{
		// Stop (after the graceful timeout) still waits for handlers, so no
		// session goroutine outlives Run.
		grpc.WaitForHandlers(true),
		// Only managers dial a worker, each with one session stream and
		// health checks (docs/design/security.md, "Limits").
		grpc.MaxConcurrentStreams(workerMaxConcurrentStreams),
		grpc.KeepaliveParams(keepalive.ServerParameters{Time: 15 * time.Second, Timeout: 10 * time.Second}),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 5 * time.Second, PermitWithoutStream: true}),
	}
	if a.cfg.ServerTLS != nil {
		opts = append(opts, grpc.Creds(credentials.NewTLS(a.cfg.ServerTLS)))
	}
	srv := grpc.NewServer(opts...)
	workerpb.RegisterWorkerServer(srv, &workerServer{a: a})
	hs := health.NewServer()
	hs.SetServingStatus(workerpb.Worker_ServiceDesc.ServiceName, healthpb.HealthCheckResponse_SERVING)
	healthpb.RegisterHealthServer(srv, hs)
	reflection.Register(srv)
	return srv
}

// stopServer stops the gRPC server: gracefully (sessions were told to end
// by stopCh) within serverStopTimeout, then forcibly.
func (a *Agent) stopServer(srv *grpc.Server) {
	done := make(chan struct{})
	a.goFunc(func() {
		srv.GracefulStop()
		close(done)
	})
	timer := time.NewTimer(serverStopTimeout)
	defer timer.Stop()
	select {
	case <-done:
	case <-timer.C:
		srv.Stop()
	}
}

// goFunc runs f in a goroutine tracked by the agent's WaitGroup.
func (a *Agent) goFunc(f func()) {
	a.wg.Add(1)
	go func() {
		defer a.wg.Done()
		f()
	}()
}

// pumpEvents forwards runtime events to the hub until ctx ends.
func (a *Agent) pumpEvents(ctx context.Context) {
	events := a.rt.Events()
	for {
		select {
		case ev := <-events:
			if ev.Kind == EventStopped && a.takeFenced(ev.Key, ev.Instance) {
				ev.Fenced = true
			}
			a.logEvent(ev)
			a.hub.Publish(ev)
		case <-ctx.Done():
			return
		}
	}
}

func (a *Agent) logEvent(ev Event) {
	switch ev.Kind {
	case EventStarted:
		a.log.Info("job started", "job_id", ev.Key.JobID, "role", ev.Key.Role, "instance_id", ev.Instance)
	case EventStopped:
		a.log.Info("job stopped", "job_id", ev.Key.JobID, "role", ev.Key.Role, "instance_id", ev.Instance, "fenced", ev.Fenced)
	case EventFailed:
		a.log.Warn("job failed", "job_id", ev.Key.JobID, "role", ev.Key.Role, "instance_id", ev.Instance, "reason", ev.Reason)
	}
}

// opsContext is the context job commands run under: Run's, so that a
// command outlives the session that sent it.
func (a *Agent) opsContext() context.Context {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.mu.opsCtx
}

// provision starts a job, serialised with other commands for its key. The
// outcome reaches the manager as runtime events. log carries the session's
// context.
func (a *Agent) provision(job *workerpb.WorkerJob, log *slog.Logger) {
	key := KeyOf(job)
	log = log.With("job_id", key.JobID, "role", key.Role, "instance_id", job.GetInstanceId())
	if key.JobID == "" {
		log.Warn("ignoring provision_job without a job id")
		return
	}
	// The context is registered now, not when the queued Start runs, so
	// that a stop_job received after this message cancels it even while it
	// waits in the queue.
	ctx, cancel := context.WithCancel(a.opsContext())
	a.mu.Lock()
	if a.mu.starting == nil {
		a.mu.starting = make(map[JobKey]map[*context.CancelFunc]struct{})
	}
	if a.mu.starting[key] == nil {
		a.mu.starting[key] = make(map[*context.CancelFunc]struct{})
	}
	a.mu.starting[key][&cancel] = struct{}{}
	a.mu.Unlock()
	a.ops.Do(key, func() {
		defer func() {
			a.mu.Lock()
			delete(a.mu.starting[key], &cancel)
			if len(a.mu.starting[key]) == 0 {
				delete(a.mu.starting, key)
			}
			a.mu.Unlock()
			cancel()
		}()
		if ctx.Err() != nil && a.opsContext().Err() == nil {
			log.Info("not starting the job: a stop for it came after the provision")
			return
		}
		if t := job.GetProductTemplate(); t != nil {
			log.Info("provisioning job", "product_template", t.GetName(), "version", t.GetVersion())
		} else {
			log.Info("provisioning job", "services", len(job.GetServices()))
		}
		_, err := a.rt.Start(ctx, job)
		switch {
		case errors.Is(err, context.Canceled) && a.opsContext().Err() == nil:
			log.Info("no longer waiting for the job to start: a stop is queued behind it")
		case err != nil:
			log.Warn("job did not start", "error", err)
		}
	})
}

// stop stops a job, serialised with other commands for its key. A Start
// of the key still in flight stops being waited for (its context is
// cancelled; the runtime goes on starting the job and reports the outcome
// on its events), so that the Stop reaches the runtime during a long start
// (an image pull) instead of after it; a runtime can then cut the start
// short. instance is the stop_job's instance id (empty: unknown): a
// runtime that implements InstanceStopper echoes it in the job_stopped of
// a stop that finds nothing running.
func (a *Agent) stop(key JobKey, instance string, log *slog.Logger) {
	log = log.With("job_id", key.JobID, "role", key.Role, "instance_id", instance)
	a.mu.Lock()
	for cancel := range a.mu.starting[key] {
		(*cancel)()
	}
	a.mu.Unlock()
	a.ops.Do(key, func() {
		log.Info("stopping job", "grace", a.cfg.StopGrace)
		var err error
		if s, ok := a.rt.(InstanceStopper); ok {
			err = s.StopInstance(a.opsContext(), key, instance, a.cfg.StopGrace)
		} else {
			err = a.rt.Stop(a.opsContext(), key, a.cfg.StopGrace)
		}
		if err != nil {
			log.Warn("stopping job", "error", err)
		}
	})
}

// update stores a job's new definition without restarting it.
func (a *Agent) update(job *workerpb.WorkerJob, log *slog.Logger) {
	key := KeyOf(job)
	log = log.With("job_id", key.JobID, "role", key.Role)
	a.ops.Do(key, func() {
		if err := a.rt.Update(a.opsContext(), job); err != nil {
			log.Warn("ignoring update_job", "error", err)
			return
		}
		log.Info("job definition updated (running services are not restarted)")
	})
}

// deleteJobData lets the runtime drop what it keeps for every role of a
// job the manager deleted (Runtime implementations of JobDataDeleter),
// after every command queued before it for any role of the job and before
// any queued after it. A runtime that keeps nothing for a job beyond its
// runs does not implement JobDataDeleter; the message is then only logged.
// Failures are logged and not retried (the manager does not send
// delete_job again either). The call runs off the session's loop, under
// Run's context.
func (a *Agent) deleteJobData(id JobID, log *slog.Logger) {
	log = log.With("job_id", id)
	if id == "" {
		log.Warn("ignoring delete_job without a job id")
		return
	}
	d, ok := a.rt.(JobDataDeleter)
	if !ok {
		log.Debug("job deleted on the manager; the runtime keeps nothing for it")
		return
	}
	a.ops.DoJob(id, func() {
		log.Info("job deleted on the manager; deleting its data")
		if err := d.DeleteJobData(a.opsContext(), id); err != nil {
			log.Warn("deleting the data of a deleted job", "error", err)
		}
	})
}

// workerServer adapts the agent to the generated WorkerServer interface.
type workerServer struct {
	workerpb.UnimplementedWorkerServer
	a *Agent
}

// NodeControllerStream serves one manager session.
func (w *workerServer) NodeControllerStream(stream workerpb.Worker_NodeControllerStreamServer) error {
	return w.a.serveSession(stream)
}
