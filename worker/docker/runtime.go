package docker

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/volume"
	"github.com/docker/docker/client"
	"google.golang.org/protobuf/proto"

	"github.com/norsk-oss/norsk-manager/proto/workerpb"
	"github.com/norsk-oss/norsk-manager/worker"
	"github.com/norsk-oss/norsk-manager/worker/internal/atomicfile"
	"github.com/norsk-oss/norsk-manager/worker/internal/emit"
	"github.com/norsk-oss/norsk-manager/worker/internal/hostports"
	"github.com/norsk-oss/norsk-manager/worker/internal/supervisor"
)

// Runtime runs jobs as projects of Docker containers. Create it with New;
// call Restore once, before Start; call Shutdown when the worker exits.
// Shutdown leaves every container running: the next Runtime over the same
// StateDir re-adopts them.
type Runtime struct {
	cfg      Config
	log      *slog.Logger
	cli      *client.Client
	ownCli   bool   // cli was created by New and is closed by Shutdown
	id       string // runtime id: LabelWorker of everything it creates
	jobsDir  string
	emit     *emit.Emitter
	engine   *engine
	ports    *hostports.Table
	lock     *worker.StateDirLock
	ctx      context.Context // cancelled by Shutdown
	cancel   context.CancelFunc
	shutOnce sync.Once
	wg       sync.WaitGroup

	mu struct {
		sync.Mutex
		jobs     map[worker.JobKey]*job // every job not yet finished
		restored bool
		closed   bool
	}
}

var (
	_ worker.Runtime           = (*Runtime)(nil)
	_ worker.JobDataDeleter    = (*Runtime)(nil)
	_ worker.ConditionReporter = (*Runtime)(nil)
	_ worker.InstanceStopper   = (*Runtime)(nil)
)

// New validates cfg, locks StateDir (a second Runtime over it gets a
// *worker.StateDirInUseError), reads or creates the runtime id
// (StateDir/runtime-id) and checks whether the Docker engine answers
// (within EnginePingTimeout), then every EngineCheckInterval until
// Shutdown. An engine that does not answer is not an error: it is logged
// and reported by Conditions, and new jobs are refused until it answers.
// Errors: an invalid cfg, the lock, an unreadable StateDir, a client that
// cannot be created from the environment (a malformed DOCKER_HOST).
func New(ctx context.Context, cfg Config) (*Runtime, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	lock, err := worker.LockStateDir(cfg.StateDir)
	if err != nil {
		return nil, err
	}
	r, err := newLocked(ctx, cfg, lock)
	if err != nil {
		_ = lock.Release() // the error that matters is err
		return nil, err
	}
	return r, nil
}

func newLocked(ctx context.Context, cfg Config, lock *worker.StateDirLock) (*Runtime, error) {
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	r := &Runtime{
		cfg:     cfg,
		log:     log.With("component", "docker-runtime"),
		cli:     cfg.Client,
		jobsDir: filepath.Join(cfg.StateDir, "jobs"),
		ports:   hostports.NewTable(),
		lock:    lock,
	}
	r.mu.jobs = make(map[worker.JobKey]*job)
	if err := os.MkdirAll(r.jobsDir, 0o700); err != nil {
		return nil, fmt.Errorf("docker: create %s: %w", r.jobsDir, err)
	}
	id, err := runtimeID(cfg.StateDir)
	if err != nil {
		return nil, err
	}
	r.id = id
	if r.cli == nil {
		cli, err := client.NewClientWithOpts(client.FromEnv, client.WithAPIVersionNegotiation())
		if err != nil {
			return nil, fmt.Errorf("docker: engine client: %w", err)
		}
		r.cli, r.ownCli = cli, true
	}
	r.engine = newEngine(r.cli, r.log, cfg.EnginePingTimeout)
	if err := r.engine.check(ctx); err == nil {
		pctx, cancel := context.WithTimeout(ctx, cfg.EnginePingTimeout)
		r.cli.NegotiateAPIVersion(pctx) // else negotiated at the first call that reaches the engine
		cancel()
	} else if ctx.Err() != nil {
		if r.ownCli {
			_ = r.cli.Close()
		}
		return nil, ctx.Err()
	}
	r.ctx, r.cancel = context.WithCancel(context.Background())
	r.emit = emit.New(cfg.EventBuffer, r.ctx.Done(), r.log)
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		r.engine.monitor(r.ctx, cfg.EngineCheckInterval)
	}()
	return r, nil
}

// runtimeID reads StateDir/runtime-id, creating it (16 random hex digits)
// on first use.
func runtimeID(dir string) (string, error) {
	path := filepath.Join(dir, "runtime-id")
	data, err := os.ReadFile(path)
	if err == nil {
		id := strings.TrimSpace(string(data))
		if len(id) != 16 || strings.Trim(id, "0123456789abcdef") != "" {
			return "", fmt.Errorf("docker: %s holds %q, not a runtime id (16 hex digits); remove it only if no container of this worker exists", path, id)
		}
		return id, nil
	}
	if !errors.Is(err, os.ErrNotExist) {
		return "", fmt.Errorf("docker: read runtime id: %w", err)
	}
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("docker: runtime id: %w", err)
	}
	id := hex.EncodeToString(b[:])
	if err := atomicfile.Write(path, []byte(id+"\n"), 0o600); err != nil {
		return "", fmt.Errorf("docker: write runtime id: %w", err)
	}
	return id, nil
}

// ID returns the runtime id: the LabelWorker value of every container,
// network and volume this runtime creates.
func (r *Runtime) ID() string { return r.id }

// Events implements worker.Runtime.
func (r *Runtime) Events() <-chan worker.Event { return r.emit.Ch() }

// Conditions implements worker.ConditionReporter: the Docker engine's
// state (ConditionRuntime) as last checked.
func (r *Runtime) Conditions() []worker.RuntimeCondition {
	return []worker.RuntimeCondition{r.engine.condition()}
}

// Shutdown stops the runtime's goroutines and returns when they have
// exited, then releases StateDir and closes the engine client it created.
// Every container keeps running and every record stays, so a new Runtime
// over the same StateDir re-adopts the jobs; a stop in progress is
// finished by that Runtime. Idempotent. Methods called afterwards return
// worker.ErrRuntimeClosed.
func (r *Runtime) Shutdown() {
	r.shutOnce.Do(func() {
		r.mu.Lock()
		r.mu.closed = true
		r.mu.Unlock()
		r.cancel()
		r.wg.Wait()
		if r.ownCli {
			_ = r.cli.Close()
		}
		if err := r.lock.Release(); err != nil {
			r.log.Warn("releasing the state directory", "error", err)
		}
	})
}

// Start implements worker.Runtime. A new job is refused at once, with
// job_failed naming the engine and the cause (an *EngineError, matching
// ErrEngineUnreachable), while the Docker engine does not answer a ping;
// a job already running is reported again without asking the engine.
//
// A job with product_template runs the template's stack (template.go):
// errors wrap worker.ErrTemplateUnavailable when this worker's catalogue
// (Config.Templates) lacks it, worker.ErrInvalidJob when it also sets
// services or volumes or cannot be resolved.
func (r *Runtime) Start(ctx context.Context, def *workerpb.WorkerJob) (worker.PortMappings, error) {
	if def.GetProductTemplate() != nil {
		return r.startTemplate(ctx, def)
	}
	return r.start(ctx, def, func() ([]*serviceSpec, *stackSpec, error) {
		specs, err := planJob(def, r.cfg.MediaImages)
		return specs, nil, err
	})
}

// plan returns the services (start order) of a job to start and, for a
// stack, its volumes and networks; errors wrap worker.ErrInvalidJob.
type plan func() ([]*serviceSpec, *stackSpec, error)

// start is Start with the job's services planned by plan: from the
// job's services (legacy), or from a stack (a product template).
func (r *Runtime) start(ctx context.Context, def *workerpb.WorkerJob, plan plan) (worker.PortMappings, error) {
	key := worker.KeyOf(def)
	for {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if err := r.checkEngineFor(ctx, key, def.GetInstanceId()); err != nil {
			return nil, err
		}
		j, created, err := r.lookupOrCreate(key, def, plan)
		switch {
		case errors.Is(err, worker.ErrRuntimeClosed):
			return nil, err
		case err != nil:
			r.log.Warn("job cannot start", "job_id", key.JobID, "role", key.Role, "error", err)
			r.emitLifecycle(worker.Event{Kind: worker.EventFailed, Key: key, Instance: def.GetInstanceId(), Reason: err.Error()})
			return nil, err
		case created:
			return j.sup.AwaitStart(ctx)
		}
		ports, running, err := j.sup.ReportAgain(ctx)
		if err != nil || running {
			return ports, err
		}
		// The job ended meanwhile: start it anew.
	}
}

// checkEngineFor pings the engine before a job for key is created; nil if
// key's job exists (or the runtime is closed: Start says so next). A
// failed ping is reported as the job's failure (of instance, the
// provision's instance id).
func (r *Runtime) checkEngineFor(ctx context.Context, key worker.JobKey, instance string) error {
	r.mu.Lock()
	skip := r.mu.closed || r.mu.jobs[key] != nil
	r.mu.Unlock()
	if skip {
		return nil
	}
	err := r.engine.check(ctx)
	switch {
	case err == nil:
		return nil
	case ctx.Err() != nil:
		return ctx.Err()
	}
	r.log.Warn("job cannot start", "job_id", key.JobID, "role", key.Role, "error", err)
	r.emitLifecycle(worker.Event{Kind: worker.EventFailed, Key: key, Instance: instance, Reason: err.Error()})
	return err
}

// lookupOrCreate returns the job running for key, or plans, reserves and
// launches a new one for def (created).
func (r *Runtime) lookupOrCreate(key worker.JobKey, def *workerpb.WorkerJob, plan plan) (j *job, created bool, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case r.mu.closed:
		return nil, false, worker.ErrRuntimeClosed
	case !r.mu.restored:
		return nil, false, errors.New("docker: Restore must be called before Start")
	}
	if j := r.mu.jobs[key]; j != nil {
		return j, false, nil
	}
	specs, stack, err := plan()
	if err != nil {
		return nil, false, err
	}
	if err := validateStack(stack, def.GetVolumes(), specs); err != nil {
		return nil, false, fmt.Errorf("%w: %v", worker.ErrInvalidJob, err)
	}
	if err := checkBinds(specs, r.cfg.ProtectedPaths); err != nil {
		return nil, false, fmt.Errorf("%w: %v", worker.ErrInvalidJob, err)
	}
	// A stack with networks runs on them whatever Config.Network says:
	// its services bind their container ports.
	hostNet := r.cfg.Network == NetworkHost && (stack == nil || len(stack.Networks) == 0)
	for _, s := range specs {
		ports, err := r.ports.Reserve(key, r.cfg.DefaultHostAddress, s.mappings)
		if err != nil {
			r.ports.Release(key)
			return nil, false, fmt.Errorf("resolve ports: service %q %w", s.Name, err)
		}
		s.Ports = ports
		s.Env = serviceEnv(key, s, hostNet)
		s.mappings, s.envVars = nil, nil
	}
	network := ""
	if !hostNet && (stack == nil || len(stack.Networks) == 0) {
		network = projectName(r.id, key)
	}
	j = r.newJob(key, specs, network, stack)
	j.sup = supervisor.New(j.supervise(proto.Clone(def).(*workerpb.WorkerJob)))
	r.mu.jobs[key] = j
	r.run(j)
	return j, true, nil
}

// Stop implements worker.Runtime: StopInstance without an instance id.
func (r *Runtime) Stop(ctx context.Context, key worker.JobKey, grace time.Duration) error {
	return r.StopInstance(ctx, key, "", grace)
}

// StopInstance implements worker.InstanceStopper.
func (r *Runtime) StopInstance(ctx context.Context, key worker.JobKey, instance string, grace time.Duration) error {
	r.mu.Lock()
	if r.mu.closed {
		r.mu.Unlock()
		return worker.ErrRuntimeClosed
	}
	j := r.mu.jobs[key]
	r.mu.Unlock()
	if j == nil {
		if err := ctx.Err(); err != nil {
			return err
		}
		r.emitInfo(emit.Compose(key, stageDown, "not running"))
		r.emitLifecycle(worker.Event{Kind: worker.EventStopped, Key: key, Instance: instance})
		return nil
	}
	// A job finishing on its own meanwhile (its last service ended)
	// answers this stop with its own end, so that a caller never sees the
	// job listed after Stop returned.
	j.sup.RequestStop(ctx, grace)
	select {
	case <-j.sup.Done():
		return nil
	case <-r.ctx.Done():
		return worker.ErrRuntimeClosed
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Update implements worker.Runtime.
func (r *Runtime) Update(ctx context.Context, def *workerpb.WorkerJob) error {
	key := worker.KeyOf(def)
	r.mu.Lock()
	j, closed := r.mu.jobs[key], r.mu.closed
	r.mu.Unlock()
	switch {
	case closed:
		return worker.ErrRuntimeClosed
	case j == nil:
		return fmt.Errorf("update %s: %w", key, worker.ErrJobNotRunning)
	}
	return j.sup.Update(ctx, proto.Clone(def).(*workerpb.WorkerJob))
}

// List implements worker.Runtime: the jobs whose start phase succeeded
// and that have not ended (a job being stopped is listed until it has
// stopped).
func (r *Runtime) List() []worker.RunningJob {
	r.mu.Lock()
	jobs := make([]*job, 0, len(r.mu.jobs))
	for _, j := range r.mu.jobs {
		jobs = append(jobs, j)
	}
	r.mu.Unlock()
	out := make([]worker.RunningJob, 0, len(jobs))
	for _, j := range jobs {
		// A job still starting (pulling, creating) or failed while starting
		// is not reported: the manager takes what List returns (in the
		// hello) as running. A restored job is, in every phase, until it
		// ends (supervisor.Job.Listed), as in the process runtime.
		if j.sup.Listed() {
			out = append(out, j.sup.Snapshot())
		}
	}
	return out
}

// DeleteJobData implements worker.JobDataDeleter: it removes the named
// volumes of every role of job id that is not running on this worker. A
// volume still used by a container (of another program) is left, and the
// error says so.
func (r *Runtime) DeleteJobData(ctx context.Context, id worker.JobID) error {
	r.mu.Lock()
	if r.mu.closed {
		r.mu.Unlock()
		return worker.ErrRuntimeClosed
	}
	running := map[string]bool{}
	for key := range r.mu.jobs {
		if key.JobID == id {
			running[key.Role] = true
		}
	}
	r.mu.Unlock()
	list, err := r.cli.VolumeList(ctx, volume.ListOptions{Filters: filters.NewArgs(
		filters.Arg("label", LabelWorker+"="+r.id), filters.Arg("label", LabelJob+"="+string(id)))})
	if err != nil {
		return fmt.Errorf("docker: list volumes of job %s: %w", id, err)
	}
	var errs []error
	for _, v := range list.Volumes {
		if v.Labels[LabelJob] != string(id) || running[v.Labels[LabelRole]] {
			continue
		}
		if err := r.cli.VolumeRemove(ctx, v.Name, false); err != nil {
			errs = append(errs, fmt.Errorf("remove volume %s (job volume %q): %w", v.Name, v.Labels[LabelVolume], err))
			continue
		}
		r.log.Info("removed volume of deleted job", "job_id", id, "role", v.Labels[LabelRole], "volume", v.Labels[LabelVolume], "name", v.Name)
	}
	return errors.Join(errs...)
}

// run starts j's supervisor goroutine.
func (r *Runtime) run(j *job) {
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		j.sup.Run()
	}()
}

// removeJob forgets j and frees its ports.
func (r *Runtime) removeJob(j *job) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.mu.jobs[j.key] == j {
		delete(r.mu.jobs, j.key)
		r.ports.Release(j.key)
	}
}

// emitLifecycle delivers ev (emit.Emitter.Lifecycle).
func (r *Runtime) emitLifecycle(ev worker.Event) { r.emit.Lifecycle(ev) }

// emitInfo delivers ev if there is room (emit.Emitter.Info).
func (r *Runtime) emitInfo(ev worker.Event) { r.emit.Info(ev) }
