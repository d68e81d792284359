package docker

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
	"github.com/norsk-oss/norsk-manager/worker/internal/emit"
	"github.com/norsk-oss/norsk-manager/worker/internal/supervisor"
)

// Compose stages reported as job_info.
const (
	stageBuild  = commonpb.JobInfoComposeMessage_BUILD
	stageCreate = commonpb.JobInfoComposeMessage_CREATE
	stageDown   = commonpb.JobInfoComposeMessage_DOWN
)

// termResend is how often SIGTERM is sent again during a stop's grace.
const termResend = 250 * time.Millisecond

// engineTimeout bounds one Engine API call that is not a pull or a wait.
const engineTimeout = 30 * time.Second

// job is one (job, role): a project. The supervisor (sup) runs its loop;
// job is the supervisor.Driver that does it with containers. Its methods
// other than those of the Driver are called before sup runs.
type job struct {
	r       *Runtime
	key     worker.JobKey
	log     *slog.Logger
	project string
	network string     // per-project network; "" with host networking or a stack's networks
	stack   *stackSpec // a stack's volumes and networks; nil for a legacy job
	dir     string     // StateDir/jobs/<project>
	svcs    []*service // start order
	sup     *supervisor.Job
}

var (
	_ supervisor.Driver        = (*job)(nil)
	_ supervisor.Handle        = (*run)(nil)
	_ supervisor.HealthWatcher = (*healthRun)(nil)
)

// service is one container of the project; owned by the supervisor's
// goroutine (Driver methods).
type service struct {
	spec *serviceSpec
	log  *slog.Logger
	id   string // container id; "" before creation
}

func (r *Runtime) newJob(key worker.JobKey, specs []*serviceSpec, network string, stack *stackSpec) *job {
	project := projectName(r.id, key)
	j := &job{
		r:       r,
		key:     key,
		log:     r.log.With("job_id", key.JobID, "role", key.Role, "project", project),
		project: project,
		network: network,
		stack:   stack,
		dir:     filepath.Join(r.jobsDir, project),
	}
	for _, spec := range specs {
		j.svcs = append(j.svcs, &service{spec: spec, log: j.log.With("service", spec.Name)})
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
		Done:              j.r.ctx.Done(),
		OnEnd:             func() { j.r.removeJob(j) },
		RestartBackoff:    j.r.cfg.RestartBackoff,
		MaxRestartBackoff: j.r.cfg.MaxRestartBackoff,
		FailStopGrace:     j.r.cfg.FailStopGrace,
		StartNote:         fmt.Sprintf("starting %d containers", len(j.svcs)),
	}
	for _, s := range j.svcs {
		cfg.Services = append(cfg.Services, s.spec.supervised())
	}
	return cfg
}

// supervised returns the supervisor's view of spec; conditions were
// checked by planJob (an unknown one reads as started).
func (spec *serviceSpec) supervised() supervisor.Service {
	svc := supervisor.Service{Name: spec.Name, Restart: spec.Restart, RestartCount: spec.RestartCount, RestartPeriod: spec.RestartPeriod}
	for _, d := range spec.DependsOn {
		cond, _ := supervisor.ParseCondition(spec.Conditions[d])
		svc.DependsOn = append(svc.DependsOn, supervisor.Dependency{Service: d, Condition: cond})
	}
	return svc
}

func (j *job) ports() worker.PortMappings {
	specs := make([]*serviceSpec, len(j.svcs))
	for i, s := range j.svcs {
		specs[i] = s.spec
	}
	return portMappings(specs)
}

// --- supervisor.Driver -------------------------------------------------------

// Prepare implements supervisor.Driver: it pulls missing images (compose
// BUILD) and creates the project (CREATE: files, networks, volumes,
// containers).
func (j *job) Prepare(ctx context.Context) error {
	images, err := j.ensureImages(ctx)
	if err != nil {
		return err
	}
	if err := j.sup.Persist(); err != nil { // phase starting: a restarted worker cleans up
		return err
	}
	def := j.sup.Def()
	vols := len(def.GetVolumes())
	if j.stack != nil {
		vols += len(j.stack.Volumes)
	}
	j.compose(stageCreate, fmt.Sprintf("creating %d containers, %d volumes, %d files%s",
		len(j.svcs), vols, len(def.GetWriteFiles()), j.networkNote()))
	return j.create(ctx, def, images)
}

// Launch implements supervisor.Driver: it starts svc's container (again,
// for a restart), follows its output and returns the run.
func (j *job) Launch(ctx context.Context, svc int) (supervisor.Handle, error) {
	s := j.svcs[svc]
	ctx, cancel := context.WithTimeout(ctx, engineTimeout)
	defer cancel()
	began := time.Now()
	if err := j.r.cli.ContainerStart(ctx, s.id, containerStartOptions); err != nil {
		return nil, err
	}
	s.log.Info("service started", "container", shortID(s.id))
	// Output from this run only (a restarted container keeps the earlier
	// runs' logs): from just before ContainerStart, which is after the
	// previous run's exit was seen. Not the engine's StartedAt: the process
	// can write before the engine records it.
	return j.newRun(s, began), nil
}

// Adopt implements supervisor.Driver: the container found by its labels
// (Restore set s.id), watched and followed from now on.
func (j *job) Adopt(ctx context.Context, svc int) (supervisor.Handle, error) {
	s := j.svcs[svc]
	if s.id == "" {
		return nil, errors.New("its container was removed while no worker watched it")
	}
	return j.newRun(s, time.Now()), nil
}

// Teardown implements supervisor.Driver: compose DOWN.
func (j *job) Teardown(ctx context.Context) { j.down(ctx) }

// Persist implements supervisor.Driver: the job record, with the
// containers' ids.
func (j *job) Persist(sr supervisor.Record) error {
	defJSON, err := protojson.Marshal(sr.Def)
	if err != nil {
		return fmt.Errorf("encode job definition: %w", err)
	}
	rec := &record{
		Version:    recordVersion,
		JobID:      string(j.key.JobID),
		Role:       j.key.Role,
		Project:    j.project,
		Network:    j.network,
		Stack:      j.stack,
		Phase:      sr.Phase,
		StopGrace:  sr.StopGrace,
		FailReason: sr.FailReason,
		Job:        defJSON,
	}
	for i, s := range j.svcs {
		svc := serviceRecord{Spec: s.spec, ContainerID: s.id}
		if i < len(sr.Services) {
			svc.Restarts, svc.Completed = sr.Services[i].Restarts, sr.Services[i].Completed
		}
		rec.Services = append(rec.Services, svc)
	}
	if err := os.MkdirAll(j.dir, 0o700); err != nil {
		return fmt.Errorf("create job directory: %w", err)
	}
	return writeRecord(filepath.Join(j.dir, "job.json"), rec)
}

func (j *job) networkNote() string {
	switch {
	case j.stack != nil && len(j.stack.Networks) > 0:
		return fmt.Sprintf(", %d networks", len(j.stack.Networks))
	case j.network == "":
		return ", host networking"
	}
	return ", network " + j.network
}

// --- job info ----------------------------------------------------------------

func (j *job) compose(stage commonpb.JobInfoComposeMessage_Stage, text string) {
	j.r.emitInfo(emit.Compose(j.key, stage, text))
}

func (j *job) containerEvent(s *service, text string) {
	j.r.emitInfo(emit.ContainerEvent(j.key, s.spec.Name, text))
}

func shortID(id string) string {
	if len(id) > 12 {
		return id[:12]
	}
	return id
}

// errStoppedWhileStarting is Start's error for a job stopped before its
// start phase ended; it is reported as job_stopped, not job_failed.
var errStoppedWhileStarting = supervisor.ErrStoppedWhileStarting
