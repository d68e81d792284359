package process

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"google.golang.org/protobuf/encoding/protojson"

	"github.com/norsk-oss/norsk-manager/proto/commonpb"
	"github.com/norsk-oss/norsk-manager/proto/workerpb"
	"github.com/norsk-oss/norsk-manager/worker"
	"github.com/norsk-oss/norsk-manager/worker/internal/cpuset"
	"github.com/norsk-oss/norsk-manager/worker/internal/emit"
	"github.com/norsk-oss/norsk-manager/worker/internal/supervisor"
	"github.com/norsk-oss/norsk-manager/worker/internal/svcplan"
)

// Compose stages reported as job_info.
const (
	stageCreate = commonpb.JobInfoComposeMessage_CREATE
	stageDown   = commonpb.JobInfoComposeMessage_DOWN
)

// job is one (job, role). The supervisor (sup) runs its loop; job is the
// supervisor.Driver that does it with process groups. Its Driver methods
// run on the supervisor's goroutine, which owns the services' fields.
type job struct {
	r     *Runtime
	key   worker.JobKey
	log   *slog.Logger
	paths jobPaths
	svcs  []*service // start order; their specs never change
	sup   *supervisor.Job
	// user is who the services run as; nil: the worker's own user.
	user *JobUser
	// restoredFrom is the record's services of a restored job (Adopt).
	restoredFrom []serviceRecord
}

var (
	_ supervisor.Driver       = (*job)(nil)
	_ supervisor.Poller       = (*job)(nil)
	_ supervisor.Detacher     = (*job)(nil)
	_ supervisor.ExitObserver = (*job)(nil)
	_ supervisor.Handle       = (*procRun)(nil)
)

// service is one service of a job.
type service struct {
	spec     *serviceSpec
	log      *slog.Logger
	stdout   string
	stderr   string
	exitFile string
	tail     *tailer
	cur      *proc // running process, nil if none
}

// newJob returns the job key with services specs, run in work as user
// (nil: the worker's own user).
func (r *Runtime) newJob(key worker.JobKey, specs []*serviceSpec, work string, user *JobUser) *job {
	j := &job{
		r:     r,
		key:   key,
		log:   r.log.With("job_id", key.JobID, "role", key.Role),
		paths: newJobPaths(r.jobsDir, key),
		user:  user,
	}
	j.paths.work = work
	for _, spec := range specs {
		s := &service{
			spec:     spec,
			log:      j.log.With("service", spec.Name),
			stdout:   j.paths.stdout(spec.Name),
			stderr:   j.paths.stderr(spec.Name),
			exitFile: j.paths.exit(spec.Name),
		}
		name := spec.Name
		s.tail = newTailer(s.stdout, s.stderr, r.cfg.OutputLinesPerSecond, r.cfg.MaxLogBytes, func(text string) {
			j.containerEvent(name, text)
		})
		j.svcs = append(j.svcs, s)
	}
	return j
}

// supervise returns the supervisor's Config for j with definition def.
func (j *job) supervise(def *workerpb.WorkerJob) supervisor.Config {
	cfg := supervisor.Config{
		Key:               j.key,
		Def:               def,
		Driver:            j,
		Emit:              j.r.emit,
		Log:               j.log,
		Ports:             j.ports,
		Done:              j.r.shutdownCh,
		OnEnd:             func() { j.r.removeJob(j) },
		RestartBackoff:    j.r.cfg.RestartBackoff,
		MaxRestartBackoff: j.r.cfg.MaxRestartBackoff,
		FailStopGrace:     j.r.cfg.FailStopGrace,
		StartNote:         "starting services",
	}
	for _, s := range j.svcs {
		svc := supervisor.Service{
			Name:          s.spec.Name,
			Restart:       commonpb.Service_ServiceRestart(commonpb.Service_ServiceRestart_value[s.spec.Restart]),
			RestartCount:  s.spec.RestartCount,
			RestartPeriod: s.spec.RestartPeriod,
		}
		for _, d := range s.spec.DependsOn {
			svc.DependsOn = append(svc.DependsOn, supervisor.Dependency{Service: d, Condition: supervisor.ConditionStarted})
		}
		cfg.Services = append(cfg.Services, svc)
	}
	return cfg
}

// ports returns the resolved port mappings (specs never change).
func (j *job) ports() worker.PortMappings {
	specs := make([]*serviceSpec, len(j.svcs))
	for i, s := range j.svcs {
		specs[i] = s.spec
	}
	return portMappings(specs)
}

// --- supervisor.Driver -------------------------------------------------------

// Prepare implements supervisor.Driver: a fresh job directory, with the
// job's files written into the working directory (compose CREATE).
func (j *job) Prepare(ctx context.Context) error {
	def := j.sup.Def()
	j.compose(stageCreate, fmt.Sprintf("preparing %d services and %d files", len(j.svcs), len(def.GetWriteFiles())))
	if err := j.prepare(def); err != nil {
		return fmt.Errorf("prepare the job directory: %w", err)
	}
	return nil
}

// prepare makes a fresh job directory and working directory with def's
// files. With a job user, the working directory (outside the state
// directory) is filled while only the worker may write to it and then
// given to the user, files and all: nothing the job controls is there
// while the worker writes.
func (j *job) prepare(def *workerpb.WorkerJob) error {
	if j.user != nil {
		if err := reachable(filepath.Dir(j.paths.work), j.user); err != nil {
			return err
		}
	}
	for _, dir := range j.paths.dirs() {
		if err := os.RemoveAll(dir); err != nil {
			return fmt.Errorf("remove stale job directory: %w", err)
		}
	}
	if err := j.paths.mkdirs(); err != nil {
		return err
	}
	for i, wf := range def.GetWriteFiles() {
		if err := writeJobFile(j.paths.work, wf); err != nil {
			return fmt.Errorf("write_files[%d] %q: %w", i, wf.GetPath(), err)
		}
	}
	if j.user != nil {
		if err := chownTree(j.paths.work, j.user); err != nil {
			return fmt.Errorf("give the working directory to the job user %s: %w", j.user, err)
		}
	}
	return nil
}

// chownTree gives dir and everything in it to u (links themselves, never
// what they point to).
func chownTree(dir string, u *JobUser) error {
	return filepath.WalkDir(dir, func(path string, _ os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(path, int(u.UID), int(u.GID))
	})
}

func writeJobFile(workDir string, wf *commonpb.WriteFile) error {
	path := filepath.Join(workDir, filepath.Clean(wf.GetPath()))
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	mode := os.FileMode(0o644)
	if wf.GetMode() != nil {
		mode = os.FileMode(wf.GetMode().GetValue()) & os.ModePerm
	}
	if err := os.WriteFile(path, wf.GetContents(), mode); err != nil {
		return err
	}
	return os.Chmod(path, mode)
}

// Launch implements supervisor.Driver: it spawns the service's process
// group. A pinned job's service (norsk_cpu_list, checked by planCPUs at
// Start) is started from a thread with that affinity mask
// (cpuset.Pinned), so it and everything it forks run on the job's cores
// from their first instruction.
func (j *job) Launch(ctx context.Context, svc int) (supervisor.Handle, error) {
	s := j.svcs[svc]
	env := j.r.cfg.Environ
	if j.user != nil {
		env = svcplan.MergeEnv(env, j.user.env())
	}
	env = svcplan.MergeEnv(env, s.spec.Env)
	var p *proc
	start := func() (err error) {
		p, err = spawn(j.r.cfg.Shell, s.spec.Command, j.paths.work, env, s.stdout, s.stderr, s.exitFile, j.user)
		return err
	}
	var err error
	if cpus := j.sup.Def().GetNorskCpuList(); len(cpus) > 0 {
		err = cpuset.Pinned(cpus, start)
	} else {
		err = start()
	}
	if err != nil {
		return nil, err
	}
	s.cur = p
	s.log.Info("service started", "pid", p.pid)
	return &procRun{j: j, s: s, p: p}, nil
}

// Adopt implements supervisor.Driver: the recorded process if it still
// runs (same pid and start time), else its exit from the exit file; no
// handle (restart it now) if it had no process.
func (j *job) Adopt(ctx context.Context, svc int) (supervisor.Handle, error) {
	s := j.svcs[svc]
	s.tail.skipToEnd()
	sr := j.restoredFrom[svc]
	if sr.PID <= 0 {
		return nil, nil
	}
	if p, ok := adopt(sr.PID, sr.StartTicks, s.exitFile); ok {
		s.cur = p
		s.log.Info("re-adopted service", "pid", p.pid)
		return &procRun{j: j, s: s, p: p}, nil
	}
	st := statusFromFile(s.exitFile)
	s.log.Info("service exited while no worker was watching", "status", st.String())
	return &deadRun{st: st}, nil
}

// Teardown implements supervisor.Driver: the job's directory is removed
// (compose DOWN).
func (j *job) Teardown(ctx context.Context) {
	for _, s := range j.svcs {
		s.tail.close()
	}
	for _, dir := range j.paths.dirs() {
		if err := os.RemoveAll(dir); err != nil {
			j.log.Error("removing job directory", "dir", dir, "error", err)
		}
	}
	j.compose(stageDown, "removed the job's directory")
}

// Persist implements supervisor.Driver: the record, with every running
// service's pid and start time.
func (j *job) Persist(sr supervisor.Record) error {
	defJSON, err := protojson.Marshal(sr.Def)
	if err != nil {
		return fmt.Errorf("encode job definition: %w", err)
	}
	rec := &record{
		Version:    recordVersion,
		JobID:      string(j.key.JobID),
		Role:       j.key.Role,
		Phase:      sr.Phase,
		StopGrace:  sr.StopGrace,
		FailReason: sr.FailReason,
		Job:        defJSON,
		WorkDir:    j.paths.work,
		User:       j.user,
	}
	for i, s := range j.svcs {
		svc := serviceRecord{Spec: s.spec}
		if i < len(sr.Services) {
			svc.Restarts, svc.Completed = sr.Services[i].Restarts, sr.Services[i].Completed
		}
		if s.cur != nil {
			svc.PID, svc.StartTicks = s.cur.pid, s.cur.startTicks
		}
		rec.Services = append(rec.Services, svc)
	}
	return writeRecord(j.paths.record, rec)
}

// PollInterval implements supervisor.Poller.
func (j *job) PollInterval() time.Duration { return j.r.cfg.PollInterval }

// Poll implements supervisor.Poller: every service's new output is read;
// busy when a service's logs are at their cap.
func (j *job) Poll(now time.Time) bool {
	busy := false
	for _, s := range j.svcs {
		if s.tail.poll(now) {
			busy = true
		}
	}
	return busy
}

// Detach implements supervisor.Detacher: the job is left running at
// shutdown (its record is current).
func (j *job) Detach() {
	for _, s := range j.svcs {
		s.tail.close()
	}
}

// Exited implements supervisor.ExitObserver: the rest of the run's
// output is read, and its last stderr line goes into failure reasons.
func (j *job) Exited(svc int, ex supervisor.Exit) supervisor.Exit {
	s := j.svcs[svc]
	s.cur = nil
	s.tail.flush(time.Now())
	if l := s.tail.lastError(); l != "" {
		ex.Detail = fmt.Sprintf("; last stderr: %q", l)
	}
	return ex
}

// --- job info ----------------------------------------------------------------

func (j *job) compose(stage commonpb.JobInfoComposeMessage_Stage, text string) {
	j.r.emitInfo(emit.Compose(j.key, stage, text))
}

func (j *job) containerEvent(svc, text string) {
	j.r.emitInfo(emit.ContainerEvent(j.key, svc, text))
}

// errNotExited is procRun.Wait's error when the job ended or the runtime
// shut down before the process exited.
var errNotExited = errors.New("process: stopped watching before the process exited")
