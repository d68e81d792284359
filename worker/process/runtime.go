package process

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/norsk-oss/norsk-manager/proto/workerpb"
	"github.com/norsk-oss/norsk-manager/worker"
	"github.com/norsk-oss/norsk-manager/worker/internal/cpuset"
	"github.com/norsk-oss/norsk-manager/worker/internal/emit"
	"github.com/norsk-oss/norsk-manager/worker/internal/hostports"
	"github.com/norsk-oss/norsk-manager/worker/internal/supervisor"
	"google.golang.org/protobuf/proto"
)

// Runtime runs jobs as local process groups. Create it with New; call
// Restore once, before Start; call Shutdown when the worker exits.
// Shutdown leaves every process running: the next Runtime over the same
// StateDir re-adopts them.
type Runtime struct {
	cfg     Config
	log     *slog.Logger
	jobsDir string
	emit    *emit.Emitter
	ports   *hostports.Table     // reserved host ports
	waker   *waker               // wakes exit watchers at shutdown
	lock    *worker.StateDirLock // held on StateDir from New to Shutdown

	shutdownOnce sync.Once
	shutdownCh   chan struct{} // closed by Shutdown; only ever closed
	wg           sync.WaitGroup

	mu struct {
		sync.Mutex
		jobs     map[worker.JobKey]*job // every job not yet finished
		restored bool                   // Restore was called
	}
}

var (
	_ worker.Runtime         = (*Runtime)(nil)
	_ worker.InstanceStopper = (*Runtime)(nil)
)

// New validates cfg and returns a Runtime. It locks StateDir
// (worker.LockStateDir) until Shutdown, so that two runtimes never adopt
// the same jobs: while another Runtime, in this process or another, holds
// it, New returns a *worker.StateDirInUseError. It creates StateDir/jobs.
// A relative StateDir is made absolute first: each service's shell runs
// in its job's directory and writes its exit file by the runtime's path.
func New(cfg Config) (*Runtime, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	abs, err := filepath.Abs(cfg.StateDir)
	if err != nil {
		return nil, fmt.Errorf("process: StateDir %q: %w", cfg.StateDir, err)
	}
	cfg.StateDir = abs
	if cfg.JobDir != "" {
		if cfg.JobDir, err = filepath.Abs(cfg.JobDir); err != nil {
			return nil, fmt.Errorf("process: JobDir %q: %w", cfg.JobDir, err)
		}
		if Within(cfg.StateDir, cfg.JobDir) {
			return nil, fmt.Errorf("process: JobDir %s is inside StateDir %s: the job user could not reach it, and the jobs must stay out of the state directory", cfg.JobDir, cfg.StateDir)
		}
	}
	if cfg.JobUser != nil && os.Geteuid() != 0 {
		return nil, fmt.Errorf("process: JobUser %s: running services as another user needs root, and this worker runs as uid %d", cfg.JobUser, os.Geteuid())
	}
	lock, err := worker.LockStateDir(cfg.StateDir)
	if err != nil {
		return nil, err
	}
	r, err := newLocked(cfg, lock)
	if err != nil {
		_ = lock.Release() // the error that matters is err
		return nil, err
	}
	return r, nil
}

// newLocked is New once StateDir is locked.
func newLocked(cfg Config, lock *worker.StateDirLock) (*Runtime, error) {
	if cfg.Environ == nil {
		cfg.Environ = []string{defaultPath}
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	r := &Runtime{
		cfg:        cfg,
		log:        log.With("component", "process-runtime"),
		jobsDir:    filepath.Join(cfg.StateDir, "jobs"),
		lock:       lock,
		ports:      hostports.NewTable(),
		shutdownCh: make(chan struct{}),
	}
	r.emit = emit.New(cfg.EventBuffer, r.shutdownCh, r.log)
	r.mu.jobs = make(map[worker.JobKey]*job)
	if err := os.MkdirAll(r.jobsDir, 0o700); err != nil {
		return nil, fmt.Errorf("process: create %s: %w", r.jobsDir, err)
	}
	if err := prepareJobDir(cfg.JobDir); err != nil {
		return nil, err
	}
	if cfg.JobUser != nil {
		if err := reachable(cfg.JobDir, cfg.JobUser); err != nil {
			r.log.Error("process jobs will fail", "error", err)
		}
	}
	w, err := newWaker()
	if err != nil {
		return nil, fmt.Errorf("process: %w", err)
	}
	r.waker = w
	return r, nil
}

// ErrBadJobDir is matched by New's error when Config.JobDir cannot hold
// the services' working directories (cmd/ names --job-dir).
var ErrBadJobDir = errors.New("JobDir")

// Within reports whether path is dir or inside it (both absolute and
// clean), by their names: symbolic links are not resolved.
func Within(dir, path string) bool {
	rel, err := filepath.Rel(dir, path)
	return err == nil && (rel == "." || filepath.IsLocal(rel))
}

// prepareJobDir creates dir (mode 0755) if missing and checks it can hold
// the working directories of the services: owned by this process's user
// and writable by no one else (a job could otherwise plant a symbolic
// link where the worker makes the next job's directory). Nothing to do
// for an empty dir. Whether the job user can reach it is checked by
// each job's Prepare (reachable): a worker that cannot run process jobs
// may still run and report, and each job's failure names the fix.
func prepareJobDir(dir string) error {
	if dir == "" {
		return nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("process: %w: create %s: %w", ErrBadJobDir, dir, err)
	}
	fi, err := os.Stat(dir)
	if err != nil {
		return fmt.Errorf("process: %w: %w", ErrBadJobDir, err)
	}
	switch owner, ok := fileOwner(fi); {
	case !fi.IsDir():
		return fmt.Errorf("process: %w: %s is not a directory", ErrBadJobDir, dir)
	case ok && owner != os.Geteuid():
		return fmt.Errorf("process: %w: %s is owned by uid %d, not by this worker's user (uid %d): that user could tamper with the jobs' directories", ErrBadJobDir, dir, owner, os.Geteuid())
	case fi.Mode().Perm()&0o022 != 0:
		return fmt.Errorf("process: %w: %s is writable by other users (mode %#o): give a directory only the worker may write (chmod go-w)", ErrBadJobDir, dir, fi.Mode().Perm())
	}
	return nil
}

// reachable returns nil if user may search dir and every directory above
// it, else an error that says so and what to do: the services' chdir
// into their working directory happens as user.
func reachable(dir string, user *JobUser) error {
	if err := user.Reach(dir); err != nil {
		return fmt.Errorf("the job directory %s cannot hold the working directories of the job user's services: %w; "+
			"start the worker with a --job-dir every directory above which the job user may search (e.g. under /var/lib)", dir, err)
	}
	return nil
}

// Events implements worker.Runtime.
func (r *Runtime) Events() <-chan worker.Event { return r.emit.Ch() }

// Shutdown stops the runtime's goroutines and returns when they have
// exited, then releases StateDir. Every service keeps running and every
// record stays, so a new Runtime over the same StateDir re-adopts the jobs;
// a stop in progress is finished by that Runtime. Idempotent. Methods
// called afterwards return worker.ErrRuntimeClosed.
func (r *Runtime) Shutdown() {
	r.shutdownOnce.Do(func() {
		r.mu.Lock()
		close(r.shutdownCh)
		r.mu.Unlock()
		r.waker.wake()
		r.wg.Wait()
		r.waker.close()
		if err := r.lock.Release(); err != nil {
			r.log.Warn("releasing the state directory", "error", err)
		}
	})
}

// Start implements worker.Runtime.
func (r *Runtime) Start(ctx context.Context, def *workerpb.WorkerJob) (worker.PortMappings, error) {
	key := worker.KeyOf(def)
	for {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		j, created, err := r.lookupOrCreate(key, def)
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

// lookupOrCreate returns the job running for key, or plans, reserves and
// launches a new one for def (created). Errors are invalid definitions,
// port conflicts and shutdown.
func (r *Runtime) lookupOrCreate(key worker.JobKey, def *workerpb.WorkerJob) (j *job, created bool, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closedLocked() {
		return nil, false, worker.ErrRuntimeClosed
	}
	if !r.mu.restored {
		// Starting first could wipe the directory of a job a previous worker
		// left running.
		return nil, false, errors.New("process: Restore must be called before Start")
	}
	if j := r.mu.jobs[key]; j != nil {
		return j, false, nil
	}
	if t := def.GetProductTemplate(); t != nil {
		// Not the job's services: a template job run without its stack
		// would be reported running while running nothing of it.
		return nil, false, fmt.Errorf("%w: no template %q (version %q); this worker runs the process runtime, and product templates need a Docker worker (--runtime=docker --template-dir)",
			worker.ErrTemplateUnavailable, t.GetName(), t.GetVersion())
	}
	specs, err := planServices(def)
	if err != nil {
		return nil, false, err
	}
	allowed, err := cpuset.Allowed()
	if err != nil {
		return nil, false, err
	}
	cpus, err := planCPUs(def, allowed)
	if err != nil {
		return nil, false, err
	}
	if err := r.reservePortsLocked(key, specs); err != nil {
		return nil, false, fmt.Errorf("resolve ports: %w", err)
	}
	for _, s := range specs {
		s.Env = serviceEnv(key, s, cpus)
		s.mappings = nil
	}
	j = r.newJob(key, specs, r.workDir(key), r.cfg.JobUser)
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
	if r.closedLocked() {
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
	return j.sup.Stop(ctx, grace)
}

// Update implements worker.Runtime.
func (r *Runtime) Update(ctx context.Context, def *workerpb.WorkerJob) error {
	key := worker.KeyOf(def)
	r.mu.Lock()
	j := r.mu.jobs[key]
	closed := r.closedLocked()
	r.mu.Unlock()
	switch {
	case closed:
		return worker.ErrRuntimeClosed
	case j == nil:
		return fmt.Errorf("update %s: %w", key, worker.ErrJobNotRunning)
	}
	return j.sup.Update(ctx, proto.Clone(def).(*workerpb.WorkerJob))
}

// List implements worker.Runtime.
func (r *Runtime) List() []worker.RunningJob {
	r.mu.Lock()
	jobs := make([]*job, 0, len(r.mu.jobs))
	for _, j := range r.mu.jobs {
		jobs = append(jobs, j)
	}
	r.mu.Unlock()
	out := make([]worker.RunningJob, 0, len(jobs))
	for _, j := range jobs {
		out = append(out, j.sup.Snapshot())
	}
	return out
}

// Restore implements worker.Runtime: it reads every job record under
// StateDir/jobs, re-adopts live processes and applies the restart policy
// to services that died while no worker watched them. A record it cannot
// read is logged and left in place for an operator; it does not fail
// Restore. Calling Restore again is a no-op.
func (r *Runtime) Restore(ctx context.Context) error {
	r.mu.Lock()
	if r.closedLocked() {
		r.mu.Unlock()
		return worker.ErrRuntimeClosed
	}
	if r.mu.restored {
		r.mu.Unlock()
		return nil
	}
	r.mu.restored = true
	r.mu.Unlock()
	entries, err := os.ReadDir(r.jobsDir)
	if err != nil {
		return fmt.Errorf("process: list %s: %w", r.jobsDir, err)
	}
	for _, e := range entries {
		if err := ctx.Err(); err != nil {
			return err
		}
		if !e.IsDir() {
			continue
		}
		r.restoreDir(filepath.Join(r.jobsDir, e.Name()))
	}
	return nil
}

func (r *Runtime) restoreDir(dir string) {
	path := filepath.Join(dir, "job.json")
	rec, err := readRecord(path)
	if errors.Is(err, os.ErrNotExist) {
		// A job whose cleanup was interrupted: nothing to adopt.
		r.log.Info("removing a job directory without a record", "dir", dir)
		_ = os.RemoveAll(dir)
		return
	}
	if err != nil {
		r.log.Error("cannot restore job; leaving its directory for an operator", "dir", dir, "error", err)
		return
	}
	def, err := rec.job()
	if err != nil {
		r.log.Error("cannot restore job; leaving its directory for an operator", "dir", dir, "error", err)
		return
	}
	key := rec.key()
	if newJobPaths(r.jobsDir, key).root != dir {
		r.log.Error("job record does not belong to its directory; leaving it for an operator", "dir", dir, "job_id", key.JobID, "role", key.Role)
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.mu.jobs[key] != nil {
		return
	}
	specs := make([]*serviceSpec, len(rec.Services))
	for i, s := range rec.Services {
		specs[i] = s.Spec
		r.ports.Hold(key, s.Spec.Ports)
	}
	work := rec.WorkDir
	if work == "" {
		// A record of a worker from before JobDir: its services ran in
		// the job's directory, as the worker's user, and keep doing so.
		work = newJobPaths(r.jobsDir, key).work
	}
	if rec.User == nil && r.cfg.JobUser != nil {
		r.log.Warn("job started by an older worker runs as the worker's own user, in the state directory, and can read the node's secrets; restart the job to run it as the job user",
			"job_id", key.JobID, "role", key.Role, "job_user", r.cfg.JobUser.Name)
	}
	j := r.newJob(key, specs, work, rec.User)
	j.restoredFrom = rec.Services
	srec := supervisor.Record{Phase: rec.Phase, StopGrace: rec.StopGrace, FailReason: rec.FailReason, Def: def}
	if srec.Phase == supervisor.PhaseStopping && srec.FailReason != "" {
		srec.Phase = supervisor.PhaseFailing // an older worker's record
	}
	for _, s := range rec.Services {
		srec.Services = append(srec.Services, supervisor.ServiceRecord{Restarts: s.Restarts, Completed: s.Completed})
	}
	j.sup = supervisor.Restored(j.supervise(def), srec)
	r.mu.jobs[key] = j
	r.run(j)
}

// run starts j's supervisor goroutine.
func (r *Runtime) run(j *job) {
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		j.sup.Run()
	}()
}

// workDir returns the working directory of key's services: in JobDir
// when set, else in its directory under StateDir.
func (r *Runtime) workDir(key worker.JobKey) string {
	p := newJobPaths(r.jobsDir, key)
	if r.cfg.JobDir == "" {
		return p.work
	}
	return filepath.Join(r.cfg.JobDir, filepath.Base(p.root))
}

// closedLocked reports whether Shutdown was called. Caller holds r.mu.
func (r *Runtime) closedLocked() bool {
	select {
	case <-r.shutdownCh:
		return true
	default:
		return false
	}
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
