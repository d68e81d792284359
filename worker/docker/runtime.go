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

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/volume"
	"github.com/docker/docker/client"
	"google.golang.org/protobuf/proto"

	"github.com/norsk-oss/norsk-manager/proto/workerpb"
	"github.com/norsk-oss/norsk-manager/worker"
	"github.com/norsk-oss/norsk-manager/worker/internal/atomicfile"
	"github.com/norsk-oss/norsk-manager/worker/internal/emit"
	"github.com/norsk-oss/norsk-manager/worker/internal/hostports"
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
	_ worker.Runtime        = (*Runtime)(nil)
	_ worker.JobDataDeleter = (*Runtime)(nil)
)

// pingTimeout bounds the check that the Docker engine answers in New.
const pingTimeout = 10 * time.Second

// New validates cfg, locks StateDir (a second Runtime over it gets a
// *worker.StateDirInUseError), reads or creates the runtime id
// (StateDir/runtime-id) and checks that the Docker engine answers. Errors:
// an invalid cfg, the lock, an unreadable StateDir, or an engine that does
// not answer within 10 s ("is dockerd running?").
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
	pctx, cancel := context.WithTimeout(ctx, pingTimeout)
	defer cancel()
	if _, err := r.cli.Ping(pctx); err != nil {
		if r.ownCli {
			_ = r.cli.Close()
		}
		return nil, fmt.Errorf("docker: the engine at %s does not answer (is dockerd running? DOCKER_HOST selects another engine): %w", r.cli.DaemonHost(), err)
	}
	r.cli.NegotiateAPIVersion(pctx)
	r.ctx, r.cancel = context.WithCancel(context.Background())
	r.emit = emit.New(cfg.EventBuffer, r.ctx.Done(), r.log)
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
			r.emitLifecycle(worker.Event{Kind: worker.EventFailed, Key: key, Reason: err.Error()})
			return nil, err
		case created:
			return j.awaitStart(ctx)
		}
		ports, running, err := j.reportAgain(ctx)
		if err != nil || running {
			return ports, err
		}
		// The job ended meanwhile: start it anew.
	}
}

// lookupOrCreate returns the job running for key, or plans, reserves and
// launches a new one for def (created).
func (r *Runtime) lookupOrCreate(key worker.JobKey, def *workerpb.WorkerJob) (j *job, created bool, err error) {
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
	specs, err := planJob(def, r.cfg.MediaImages)
	if err != nil {
		return nil, false, err
	}
	hostNet := r.cfg.Network == NetworkHost
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
	if !hostNet {
		network = projectName(r.id, key)
	}
	j = r.newJob(key, proto.Clone(def).(*workerpb.WorkerJob), specs, network)
	r.mu.jobs[key] = j
	r.wg.Add(1)
	go j.runFresh()
	return j, true, nil
}

// Stop implements worker.Runtime.
func (r *Runtime) Stop(ctx context.Context, key worker.JobKey, grace time.Duration) error {
	r.mu.Lock()
	if r.mu.closed {
		r.mu.Unlock()
		return worker.ErrRuntimeClosed
	}
	j := r.mu.jobs[key]
	r.mu.Unlock()
	if j == nil || !j.requestStop(ctx, grace) {
		if err := ctx.Err(); err != nil {
			return err
		}
		r.emitInfo(emit.Compose(key, stageDown, "not running"))
		r.emitLifecycle(worker.Event{Kind: worker.EventStopped, Key: key})
		return nil
	}
	select {
	case <-j.doneCh:
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
	return j.requestUpdate(ctx, proto.Clone(def).(*workerpb.WorkerJob))
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
		// A job still starting (pulling, creating) or being failed is not
		// reported: the manager takes what List returns (in the hello) as
		// running.
		select {
		case <-j.startedCh:
			if j.startErr == nil {
				out = append(out, j.snapshot())
			}
		default:
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

// Restore implements worker.Runtime: it reads every job record under
// StateDir/jobs, finds the project's containers by their labels,
// re-adopts the running ones without restarting them, applies the restart
// policy to those that exited while no worker watched them, and finishes
// stops and failures a previous worker left half done. Containers carrying
// this runtime's id but no record (a worker killed between creating them
// and writing the record) are removed. A record that cannot be read is
// logged and left for an operator. Calling Restore again is a no-op.
func (r *Runtime) Restore(ctx context.Context) error {
	r.mu.Lock()
	switch {
	case r.mu.closed:
		r.mu.Unlock()
		return worker.ErrRuntimeClosed
	case r.mu.restored:
		r.mu.Unlock()
		return nil
	}
	r.mu.restored = true
	r.mu.Unlock()
	containers, err := r.cli.ContainerList(ctx, container.ListOptions{All: true,
		Filters: filters.NewArgs(filters.Arg("label", LabelWorker+"="+r.id))})
	if err != nil {
		return fmt.Errorf("docker: list this worker's containers: %w", err)
	}
	byProject := map[string][]container.Summary{}
	for _, c := range containers {
		byProject[c.Labels[LabelProject]] = append(byProject[c.Labels[LabelProject]], c)
	}
	entries, err := os.ReadDir(r.jobsDir)
	if err != nil {
		return fmt.Errorf("docker: list %s: %w", r.jobsDir, err)
	}
	for _, e := range entries {
		if err := ctx.Err(); err != nil {
			return err
		}
		if !e.IsDir() {
			continue
		}
		if r.restoreDir(filepath.Join(r.jobsDir, e.Name()), e.Name(), byProject[e.Name()]) {
			delete(byProject, e.Name())
		}
	}
	for project, cs := range byProject {
		for _, c := range cs {
			r.log.Warn("removing a container without a job record", "project", project, "container", strings.Join(c.Names, ","),
				"job_id", c.Labels[LabelJob], "role", c.Labels[LabelRole], "service", c.Labels[LabelService])
			if err := r.cli.ContainerRemove(ctx, c.ID, container.RemoveOptions{Force: true}); err != nil && !client.IsErrNotFound(err) {
				r.log.Error("removing a container without a job record", "container", c.ID, "error", err)
			}
		}
		r.removeNetwork(ctx, project)
	}
	return nil
}

// restoreDir re-adopts the project in dir; it reports whether the project's
// containers are accounted for (adopted, or left for an operator).
func (r *Runtime) restoreDir(dir, project string, containers []container.Summary) bool {
	rec, err := readRecord(filepath.Join(dir, "job.json"))
	if errors.Is(err, os.ErrNotExist) {
		r.log.Info("removing a job directory without a record", "dir", dir)
		_ = os.RemoveAll(dir)
		return false
	}
	if err == nil && rec.Project != project {
		err = fmt.Errorf("record of project %s in the directory of project %s", rec.Project, project)
	}
	var def *workerpb.WorkerJob
	if err == nil {
		def, err = rec.job()
	}
	if err != nil {
		r.log.Error("cannot restore job; leaving its directory and containers for an operator", "dir", dir, "error", err)
		return true
	}
	key := rec.key()
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.mu.jobs[key] != nil {
		return true
	}
	specs := make([]*serviceSpec, len(rec.Services))
	for i, s := range rec.Services {
		specs[i] = s.Spec
		r.ports.Hold(key, s.Spec.Ports)
	}
	j := r.newJob(key, def, specs, rec.Network)
	r.mu.jobs[key] = j
	if rec.Phase == phaseRunning {
		close(j.startedCh) // listed (in the hello) from now on
	}
	r.wg.Add(1)
	go j.runRestored(rec, containers)
	return true
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
