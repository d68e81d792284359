package docker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/api/types/mount"
	"github.com/docker/docker/api/types/network"
	"github.com/docker/docker/api/types/volume"
	"github.com/docker/docker/client"
	"github.com/docker/docker/pkg/jsonmessage"
	"github.com/docker/go-connections/nat"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/norsk-oss/norsk-manager/proto/commonpb"
	"github.com/norsk-oss/norsk-manager/proto/workerpb"
	"github.com/norsk-oss/norsk-manager/worker"
	"github.com/norsk-oss/norsk-manager/worker/internal/emit"
	"github.com/norsk-oss/norsk-manager/worker/internal/hostports"
	"github.com/norsk-oss/norsk-manager/worker/internal/svcplan"
)

// Compose stages reported as job_info.
const (
	stageBuild  = commonpb.JobInfoComposeMessage_BUILD
	stageCreate = commonpb.JobInfoComposeMessage_CREATE
	stageStart  = commonpb.JobInfoComposeMessage_START
	stageStop   = commonpb.JobInfoComposeMessage_STOP
	stageDown   = commonpb.JobInfoComposeMessage_DOWN
)

// termResend is how often SIGTERM is sent again during a stop's grace.
const termResend = 250 * time.Millisecond

// engineTimeout bounds one Engine API call that is not a pull or a wait.
const engineTimeout = 30 * time.Second

// job is one (job, role): a project. Its loop goroutine owns everything
// below except mu's fields: other goroutines talk to it through channels.
type job struct {
	r       *Runtime
	key     worker.JobKey
	log     *slog.Logger
	project string
	network string // per-project network; "" with host networking
	dir     string // StateDir/jobs/<project>
	svcs    []*service

	ctx    context.Context // cancelled when the job leaves the runtime or at shutdown
	cancel context.CancelFunc
	// startCtx (a child of ctx) bounds the engine calls that start
	// containers: a Stop during the start phase cancels it, so that a
	// long pull does not hold the stop up.
	startCtx    context.Context
	startCancel context.CancelFunc
	startMu     sync.Mutex
	startDone   bool           // the start phase has ended (startMu)
	pendingStop *time.Duration // grace of a Stop that came during the start phase (startMu)

	exitCh    chan exitReport
	stopCh    chan time.Duration            // Stop, with its grace
	updateCh  chan updateRequest            // Update
	againCh   chan chan worker.PortMappings // Start of a running job
	startedCh chan struct{}                 // closed when the start phase ends; only ever closed
	startErr  error                         // set before startedCh is closed
	quitCh    chan struct{}                 // closed when the loop finishes the job; only ever closed
	doneCh    chan struct{}                 // closed once the job has left the runtime; only ever closed

	phase      phase
	stopGrace  time.Duration
	failReason string

	mu struct {
		sync.Mutex
		def *workerpb.WorkerJob
	}
}

type updateRequest struct {
	def   *workerpb.WorkerJob
	reply chan error
}

// service is one container of the project; owned by the job's loop.
type service struct {
	spec      *serviceSpec
	log       *slog.Logger
	id        string      // container id; "" before creation
	run       int         // counts starts of the container; exits of older runs are ignored
	running   bool        // started and its exit not yet handled
	restarts  []time.Time // restarts within the restart window
	completed bool        // exited successfully and will not restart
	restartAt time.Time   // pending restart; zero if none
	output    *output     // follows the current run's output
}

// exitReport is an exit seen by a watcher.
type exitReport struct {
	svc *service
	run int
	st  exitState
}

func (r *Runtime) newJob(key worker.JobKey, def *workerpb.WorkerJob, specs []*serviceSpec, network string) *job {
	project := projectName(r.id, key)
	ctx, cancel := context.WithCancel(r.ctx)
	j := &job{
		r:         r,
		key:       key,
		log:       r.log.With("job_id", key.JobID, "role", key.Role, "project", project),
		project:   project,
		network:   network,
		dir:       filepath.Join(r.jobsDir, project),
		ctx:       ctx,
		cancel:    cancel,
		exitCh:    make(chan exitReport, len(specs)+1),
		stopCh:    make(chan time.Duration),
		updateCh:  make(chan updateRequest),
		againCh:   make(chan chan worker.PortMappings),
		startedCh: make(chan struct{}),
		quitCh:    make(chan struct{}),
		doneCh:    make(chan struct{}),
		phase:     phaseStarting,
	}
	j.startCtx, j.startCancel = context.WithCancel(ctx)
	j.mu.def = def
	for _, spec := range specs {
		j.svcs = append(j.svcs, &service{spec: spec, log: j.log.With("service", spec.Name)})
	}
	return j
}

// --- requests from other goroutines ----------------------------------------

func (j *job) awaitStart(ctx context.Context) (worker.PortMappings, error) {
	select {
	case <-j.startedCh:
		if j.startErr != nil {
			return nil, j.startErr
		}
		return j.ports(), nil
	case <-j.r.ctx.Done():
		return nil, worker.ErrRuntimeClosed
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (j *job) reportAgain(ctx context.Context) (ports worker.PortMappings, running bool, err error) {
	select {
	case <-j.startedCh:
	case <-j.r.ctx.Done():
		return nil, false, worker.ErrRuntimeClosed
	case <-ctx.Done():
		return nil, false, ctx.Err()
	}
	if j.startErr != nil {
		return nil, false, j.startErr
	}
	reply := make(chan worker.PortMappings, 1)
	select {
	case j.againCh <- reply:
		return <-reply, true, nil
	case <-j.doneCh:
		return nil, false, nil
	case <-j.r.ctx.Done():
		return nil, false, worker.ErrRuntimeClosed
	case <-ctx.Done():
		return nil, false, ctx.Err()
	}
}

// requestStop hands a stop to the job; false if the job ended first. A
// stop during the start phase cancels the start and is carried out when
// the start phase ends (errStoppedWhileStarting).
func (j *job) requestStop(ctx context.Context, grace time.Duration) bool {
	j.startMu.Lock()
	if !j.startDone {
		j.pendingStop = &grace
		j.startMu.Unlock()
		j.startCancel()
		return true
	}
	j.startMu.Unlock()
	select {
	case j.stopCh <- grace:
		return true
	case <-j.quitCh:
	case <-j.r.ctx.Done():
	case <-ctx.Done():
	}
	return false
}

func (j *job) requestUpdate(ctx context.Context, def *workerpb.WorkerJob) error {
	req := updateRequest{def: def, reply: make(chan error, 1)}
	select {
	case j.updateCh <- req:
		return <-req.reply
	case <-j.quitCh:
		return fmt.Errorf("update %s: %w", j.key, worker.ErrJobNotRunning)
	case <-j.r.ctx.Done():
		return worker.ErrRuntimeClosed
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (j *job) snapshot() worker.RunningJob {
	j.mu.Lock()
	def := proto.Clone(j.mu.def).(*workerpb.WorkerJob)
	j.mu.Unlock()
	return worker.RunningJob{Job: def, Ports: j.ports()}
}

func (j *job) ports() worker.PortMappings {
	specs := make([]*serviceSpec, len(j.svcs))
	for i, s := range j.svcs {
		specs[i] = s.spec
	}
	return portMappings(specs)
}

func (j *job) def() *workerpb.WorkerJob {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.mu.def
}

// instance returns the job's instance id (WorkerJob.instance_id of the
// provision that started it, kept in its record; empty: unknown), which
// its lifecycle events carry.
func (j *job) instance() string { return j.def().GetInstanceId() }

// --- the loop ---------------------------------------------------------------

// runFresh is the goroutine of a job created by Start.
func (j *job) runFresh() {
	defer j.r.wg.Done()
	j.startErr = j.startAll()
	close(j.startedCh)
	if j.startErr == nil {
		j.loop()
	}
}

// loop serves the job until it ends or the runtime shuts down.
func (j *job) loop() {
	for {
		restartC, stopTimer := j.restartTimer()
		ended := false
		select {
		case ex := <-j.exitCh:
			ended = j.onExit(ex)
		case <-restartC:
			ended = j.onRestartDue()
		case grace := <-j.stopCh:
			j.stop(grace)
			ended = true
		case req := <-j.updateCh:
			req.reply <- j.onUpdate(req.def)
		case reply := <-j.againCh:
			ports := j.ports()
			j.r.emitLifecycle(worker.Event{Kind: worker.EventStarted, Key: j.key, Instance: j.instance(), Ports: ports})
			reply <- ports
		case <-j.r.ctx.Done():
			ended = true // containers keep running; the record is current
		}
		stopTimer()
		if ended {
			return
		}
	}
}

// startAll pulls missing images, creates the project (files, network,
// volumes, containers) and starts the containers in order. On failure the
// job is failed (its containers removed) before it returns.
func (j *job) startAll() error {
	fail := func(err error) error {
		if grace, ok := j.endStartPhase(); ok {
			j.stop(grace)
			return errStoppedWhileStarting
		}
		j.fail(err.Error())
		return err
	}
	images, err := j.ensureImages()
	if err != nil {
		return fail(err)
	}
	if err := j.persist(); err != nil { // phase starting: a restarted worker cleans up
		return fail(err)
	}
	def := j.def()
	j.compose(stageCreate, fmt.Sprintf("creating %d containers, %d volumes, %d files%s",
		len(j.svcs), len(def.GetVolumes()), len(def.GetWriteFiles()), j.networkNote()))
	if err := j.create(images); err != nil {
		return fail(err)
	}
	if err := j.persist(); err != nil {
		return fail(err)
	}
	j.compose(stageStart, fmt.Sprintf("starting %d containers", len(j.svcs)))
	for _, s := range j.svcs {
		if err := j.startContainer(s); err != nil {
			return fail(fmt.Errorf("start service %q: %w", s.spec.Name, err))
		}
	}
	if grace, ok := j.endStartPhase(); ok {
		j.stop(grace)
		return errStoppedWhileStarting
	}
	j.phase = phaseRunning
	if err := j.persist(); err != nil {
		j.log.Error("saving job record", "error", err)
	}
	j.log.Info("job started", "services", len(j.svcs))
	j.r.emitLifecycle(worker.Event{Kind: worker.EventStarted, Key: j.key, Instance: j.instance(), Ports: j.ports()})
	return nil
}

// errStoppedWhileStarting is Start's error for a job stopped before its
// start phase ended; it is reported as job_stopped, not job_failed.
var errStoppedWhileStarting = errors.New("docker: the job was stopped while it was starting")

// endStartPhase marks the start phase as ended; it returns the grace of a
// Stop that came during it, if one did.
func (j *job) endStartPhase() (time.Duration, bool) {
	j.startMu.Lock()
	defer j.startMu.Unlock()
	j.startDone = true
	if j.pendingStop == nil {
		return 0, false
	}
	return *j.pendingStop, true
}

func (j *job) networkNote() string {
	if j.network == "" {
		return ", host networking"
	}
	return ", network " + j.network
}

// ensureImages inspects every image of the project and pulls the missing
// ones (compose stage BUILD). It returns the inspected images by
// reference.
func (j *job) ensureImages() (map[string]image.InspectResponse, error) {
	out := map[string]image.InspectResponse{}
	var refs []string
	for _, s := range j.svcs {
		if _, seen := out[s.spec.Image]; !seen {
			out[s.spec.Image] = image.InspectResponse{}
			refs = append(refs, s.spec.Image)
		}
	}
	j.compose(stageBuild, fmt.Sprintf("checking %d images", len(refs)))
	for _, ref := range refs {
		ctx, cancel := context.WithTimeout(j.startCtx, engineTimeout)
		info, err := j.r.cli.ImageInspect(ctx, ref)
		cancel()
		if err == nil {
			out[ref] = info
			continue
		}
		if !client.IsErrNotFound(err) {
			return nil, fmt.Errorf("inspect image %s: %w", ref, err)
		}
		if info, err = j.pull(ref); err != nil {
			return nil, err
		}
		out[ref] = info
	}
	return out, nil
}

// pull pulls ref (bounded by Config.PullTimeout) and inspects it.
func (j *job) pull(ref string) (image.InspectResponse, error) {
	began := time.Now()
	j.compose(stageBuild, "pulling image "+ref)
	j.log.Info("pulling image", "image", ref)
	ctx, cancel := context.WithTimeout(j.startCtx, j.r.cfg.PullTimeout)
	defer cancel()
	rc, err := j.r.cli.ImagePull(ctx, ref, image.PullOptions{})
	if err == nil {
		err = readPull(rc, pullProgressEvery, func(p pullProgress) {
			j.compose(stageBuild, fmt.Sprintf("pulling image %s: %s", ref, p))
		})
		_ = rc.Close()
	}
	if err != nil {
		if ctx.Err() == context.DeadlineExceeded {
			err = fmt.Errorf("gave up after %s (PullTimeout): %w", j.r.cfg.PullTimeout, err)
		}
		return image.InspectResponse{}, fmt.Errorf("pull image %s: %w", ref, err)
	}
	info, err := j.r.cli.ImageInspect(ctx, ref)
	if err != nil {
		return image.InspectResponse{}, fmt.Errorf("inspect pulled image %s: %w", ref, err)
	}
	j.compose(stageBuild, fmt.Sprintf("pulled image %s in %s", ref, time.Since(began).Round(time.Millisecond)))
	return info, nil
}

// pullProgressEvery is how often a pull in progress is reported.
const pullProgressEvery = 5 * time.Second

// pullProgress sums the layers of a pull as the engine reports them.
type pullProgress struct {
	layers, done   int
	current, total int64 // bytes downloaded, of the layers whose size is known
}

// String reads like "3 of 7 layers done, 120.0 of 300.0 MB".
func (p pullProgress) String() string {
	return fmt.Sprintf("%d of %d layers done, %.1f of %.1f MB", p.done, p.layers, float64(p.current)/1e6, float64(p.total)/1e6)
}

// readPull reads the engine's pull stream (JSON messages) to its end,
// calling report with the progress at most once per every, and returns
// the error the stream reports, if any.
func readPull(r io.Reader, every time.Duration, report func(pullProgress)) error {
	type layer struct {
		current, total int64
		done           bool
	}
	layers := map[string]*layer{}
	var order []string
	last := time.Now()
	dec := json.NewDecoder(r)
	for {
		var m jsonmessage.JSONMessage
		if err := dec.Decode(&m); err == io.EOF {
			return nil
		} else if err != nil {
			return fmt.Errorf("read the engine's pull progress: %w", err)
		}
		if m.Error != nil {
			return m.Error
		}
		if m.ErrorMessage != "" {
			return errors.New(m.ErrorMessage)
		}
		if m.ID == "" || m.Progress == nil && m.Status != "Pull complete" && m.Status != "Already exists" {
			continue
		}
		l := layers[m.ID]
		if l == nil {
			l = &layer{}
			layers[m.ID] = l
			order = append(order, m.ID)
		}
		switch {
		case m.Status == "Pull complete" || m.Status == "Already exists":
			l.done = true
		case m.Status == "Downloading" && m.Progress != nil:
			l.current, l.total = m.Progress.Current, max(l.total, m.Progress.Total)
		}
		if time.Since(last) >= every {
			last = time.Now()
			var p pullProgress
			for _, id := range order {
				l := layers[id]
				p.layers++
				if l.done {
					p.done++
					l.current = l.total
				}
				p.current += l.current
				p.total += l.total
			}
			report(p)
		}
	}
}

// create writes the job's files, removes leftovers of an earlier run of the
// project, and creates the network, the volumes and the containers.
func (j *job) create(images map[string]image.InspectResponse) error {
	def := j.def()
	if err := j.writeFiles(def); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(j.startCtx, engineTimeout)
	defer cancel()
	if err := j.removeContainers(ctx); err != nil {
		return fmt.Errorf("remove containers of an earlier run: %w", err)
	}
	if j.network != "" {
		j.r.removeNetwork(ctx, j.network)
		_, err := j.r.cli.NetworkCreate(ctx, j.network, network.CreateOptions{Driver: "bridge", Labels: j.labels("")})
		if err != nil {
			return fmt.Errorf("create network %s: %w", j.network, err)
		}
	}
	for _, v := range def.GetVolumes() {
		labels := j.labels("")
		labels[LabelVolume] = v
		name := volumeName(j.r.id, j.key, v)
		if _, err := j.r.cli.VolumeCreate(ctx, volume.CreateOptions{Name: name, Labels: labels}); err != nil {
			return fmt.Errorf("create volume %s for job volume %q: %w", name, v, err)
		}
	}
	for _, s := range j.svcs {
		id, err := j.createContainer(ctx, s, images[s.spec.Image])
		if err != nil {
			return fmt.Errorf("create container of service %q: %w", s.spec.Name, err)
		}
		s.id = id
	}
	return nil
}

// writeFiles writes write_files[i] to dir/files/<i>, the source of its
// bind mounts.
func (j *job) writeFiles(def *workerpb.WorkerJob) error {
	files := filepath.Join(j.dir, "files")
	if err := os.RemoveAll(files); err != nil {
		return fmt.Errorf("remove stale files: %w", err)
	}
	if err := os.MkdirAll(files, 0o755); err != nil {
		return fmt.Errorf("create job directory: %w", err)
	}
	for i, wf := range def.GetWriteFiles() {
		mode := os.FileMode(0o644)
		if wf.GetMode() != nil {
			mode = os.FileMode(wf.GetMode().GetValue()) & os.ModePerm
		}
		p := j.filePath(i)
		if err := os.WriteFile(p, wf.GetContents(), mode); err != nil {
			return fmt.Errorf("write_files[%d] %q: %w", i, wf.GetPath(), err)
		}
		if err := os.Chmod(p, mode); err != nil {
			return fmt.Errorf("write_files[%d] %q: %w", i, wf.GetPath(), err)
		}
	}
	return nil
}

func (j *job) filePath(i int) string {
	return filepath.Join(j.dir, "files", fmt.Sprintf("%d", i))
}

// labels returns the labels of the project's objects; svc is "" for the
// network and volumes.
func (j *job) labels(svc string) map[string]string {
	l := map[string]string{
		LabelWorker:  j.r.id,
		LabelProject: j.project,
		LabelJob:     string(j.key.JobID),
		LabelRole:    j.key.Role,
	}
	if svc != "" {
		l[LabelService] = svc
	}
	return l
}

func (j *job) createContainer(ctx context.Context, s *service, img image.InspectResponse) (string, error) {
	spec := s.spec
	cfg := &container.Config{
		Image:  spec.Image,
		Env:    spec.Env,
		Labels: j.labels(spec.Name),
	}
	if spec.Cmd != nil {
		cfg.Cmd = spec.Cmd
	}
	hc := &container.HostConfig{
		RestartPolicy: container.RestartPolicy{Name: container.RestartPolicyDisabled},
		ShmSize:       spec.ShmSize,
		Resources:     container.Resources{CpusetCpus: spec.CPUSet},
	}
	var nc *network.NetworkingConfig
	if j.network == "" {
		hc.NetworkMode = network.NetworkHost
	} else {
		hc.NetworkMode = container.NetworkMode(j.network)
		nc = &network.NetworkingConfig{EndpointsConfig: map[string]*network.EndpointSettings{
			j.network: {Aliases: []string{spec.Name}},
		}}
		cfg.ExposedPorts = nat.PortSet{}
		hc.PortBindings = nat.PortMap{}
		for _, p := range spec.Ports {
			for _, n := range hostports.Networks(p.Protocol) {
				port := nat.Port(fmt.Sprintf("%d/%s", p.ContainerPort, n))
				cfg.ExposedPorts[port] = struct{}{}
				hc.PortBindings[port] = append(hc.PortBindings[port], nat.PortBinding{HostIP: p.Host, HostPort: fmt.Sprintf("%d", p.Published)})
			}
		}
	}
	for _, v := range spec.Volumes {
		hc.Mounts = append(hc.Mounts, mount.Mount{Type: mount.TypeVolume, Source: volumeName(j.r.id, j.key, v.Volume), Target: v.Target, ReadOnly: v.ReadOnly})
	}
	workDir := "/"
	if img.Config != nil && img.Config.WorkingDir != "" {
		workDir = img.Config.WorkingDir
	}
	seen := map[string]bool{}
	for _, v := range hc.Mounts {
		seen[v.Target] = true
	}
	for _, f := range spec.Files {
		target := f.Path
		if !path.IsAbs(target) {
			target = path.Join(workDir, target)
		}
		if seen[target] {
			return "", fmt.Errorf("write_files[%d] %q is mounted at %s, where another file or volume is mounted", f.Index, f.Path, target)
		}
		seen[target] = true
		hc.Mounts = append(hc.Mounts, mount.Mount{Type: mount.TypeBind, Source: j.filePath(f.Index), Target: target, ReadOnly: true})
	}
	resp, err := j.r.cli.ContainerCreate(ctx, cfg, hc, nc, nil, containerName(j.project, spec.Name))
	if err != nil {
		return "", err
	}
	for _, w := range resp.Warnings {
		s.log.Warn("container created with a warning", "warning", w)
	}
	return resp.ID, nil
}

// startContainer starts s's container (again, for a restart), watches its
// exit and follows its output.
func (j *job) startContainer(s *service) error {
	ctx, cancel := context.WithTimeout(j.startCtx, engineTimeout)
	defer cancel()
	began := time.Now()
	if err := j.r.cli.ContainerStart(ctx, s.id, container.StartOptions{}); err != nil {
		return err
	}
	s.run++
	s.running = true
	s.log.Info("service started", "container", shortID(s.id))
	// Output from this run only (a restarted container keeps the earlier
	// runs' logs): from just before ContainerStart, which is after the
	// previous run's exit was seen. Not the engine's StartedAt: the process
	// can write before the engine records it.
	j.follow(s, began)
	j.watch(s)
	j.info(&commonpb.JobInfoMessage_ServiceStarted{ServiceStarted: &commonpb.JobInfoServiceStarted{ServiceName: s.spec.Name}})
	if j.phase == phaseRunning {
		if err := j.persist(); err != nil {
			s.log.Error("saving job record", "error", err)
		}
	}
	return nil
}

func shortID(id string) string {
	if len(id) > 12 {
		return id[:12]
	}
	return id
}

// watch starts the goroutine that reports the end of s's current run to
// the loop. A broken wait (the engine restarting) is retried.
func (j *job) watch(s *service) {
	id, run := s.id, s.run
	j.r.wg.Add(1)
	go func() {
		defer j.r.wg.Done()
		for attempt := 0; ; attempt++ {
			st, err := j.waitExit(id)
			if j.ctx.Err() != nil {
				return
			}
			if err != nil {
				s.log.Warn("waiting for the container failed; retrying", "error", err)
				select {
				case <-time.After(time.Second):
					continue
				case <-j.ctx.Done():
					return
				}
			}
			select {
			case j.exitCh <- exitReport{svc: s, run: run, st: st}:
			case <-j.ctx.Done():
			}
			return
		}
	}()
}

// waitExit waits until container id is not running and returns how it
// ended. A container that no longer exists is reported as gone.
func (j *job) waitExit(id string) (exitState, error) {
	waitC, errC := j.r.cli.ContainerWait(j.ctx, id, container.WaitConditionNotRunning)
	select {
	case <-waitC:
	case err := <-errC:
		if client.IsErrNotFound(err) {
			return exitState{Gone: true}, nil
		}
		return exitState{}, err
	}
	return j.inspectExit(id)
}

// inspectExit reads the exit of a container that is not running.
func (j *job) inspectExit(id string) (exitState, error) {
	ctx, cancel := context.WithTimeout(j.ctx, engineTimeout)
	defer cancel()
	info, err := j.r.cli.ContainerInspect(ctx, id)
	if client.IsErrNotFound(err) {
		return exitState{Gone: true}, nil
	}
	if err != nil {
		return exitState{}, err
	}
	if info.State == nil {
		return exitState{}, errors.New("container state missing")
	}
	if info.State.Running || info.State.Restarting {
		return exitState{}, errors.New("container is running again")
	}
	return exitState{Code: info.State.ExitCode, OOM: info.State.OOMKilled, Error: info.State.Error}, nil
}

// onExit handles the end of a run of a service's container.
func (j *job) onExit(ex exitReport) bool {
	s := ex.svc
	if ex.run != s.run || !s.running {
		return false // a run already handled (stopped)
	}
	s.running = false
	last := s.output.finish()
	s.log.Info("service exited", "status", ex.st.String())
	j.containerEvent(s, ex.st.String())
	detail := ""
	if last != "" {
		detail = fmt.Sprintf("; last output: %q", last)
	}
	if ex.st.Gone {
		j.fail(fmt.Sprintf("service %q: its container %s was removed outside the worker", s.spec.Name, shortID(s.id)))
		return true
	}
	now := time.Now()
	s.restarts = svcplan.Prune(s.restarts, now.Add(-s.spec.RestartPeriod))
	switch svcplan.Decide(s.spec.Restart, ex.st.success(), s.restarts, s.spec.RestartCount, s.spec.RestartPeriod, now) {
	case svcplan.Complete:
		return j.complete(s)
	case svcplan.Fail:
		if s.spec.Restart == commonpb.Service_NEVER {
			j.fail(fmt.Sprintf("service %q %s (restart policy NEVER)%s", s.spec.Name, ex.st, detail))
		} else {
			j.fail(fmt.Sprintf("service %q %s and was already restarted %d times within %s, the most its restart policy (%s, restart_count %d) allows%s",
				s.spec.Name, ex.st, len(s.restarts), s.spec.RestartPeriod, s.spec.Restart, s.spec.RestartCount, detail))
		}
		return true
	}
	delay := svcplan.Backoff(j.r.cfg.RestartBackoff, j.r.cfg.MaxRestartBackoff, len(s.restarts))
	s.restartAt = now.Add(delay)
	s.log.Info("restarting service", "in", delay, "restarts_in_window", len(s.restarts))
	j.info(&commonpb.JobInfoMessage_ServiceRestarting{ServiceRestarting: &commonpb.JobInfoServiceRestarting{ServiceName: s.spec.Name}})
	if err := j.persist(); err != nil {
		s.log.Error("saving job record", "error", err)
	}
	return false
}

// complete marks s done; when every service is, the job has finished.
func (j *job) complete(s *service) bool {
	s.completed = true
	for _, o := range j.svcs {
		if !o.completed {
			if err := j.persist(); err != nil {
				s.log.Error("saving job record", "error", err)
			}
			return false
		}
	}
	j.compose(stageStop, "every service completed")
	j.down()
	j.finish(worker.EventStopped, "")
	return true
}

func (j *job) restartTimer() (<-chan time.Time, func()) {
	var next time.Time
	for _, s := range j.svcs {
		if !s.restartAt.IsZero() && (next.IsZero() || s.restartAt.Before(next)) {
			next = s.restartAt
		}
	}
	if next.IsZero() {
		return nil, func() {}
	}
	t := time.NewTimer(time.Until(next))
	return t.C, func() { t.Stop() }
}

// onRestartDue restarts every service whose backoff has passed.
func (j *job) onRestartDue() bool {
	now := time.Now()
	for _, s := range j.svcs {
		if s.restartAt.IsZero() || s.restartAt.After(now) {
			continue
		}
		s.restartAt = time.Time{}
		s.restarts = append(s.restarts, now)
		if err := j.startContainer(s); err != nil {
			j.fail(fmt.Sprintf("restart service %q: %v", s.spec.Name, err))
			return true
		}
	}
	return false
}

// onUpdate stores def as the job's definition; the job keeps the
// instance id it was started with (Runtime.Update).
func (j *job) onUpdate(def *workerpb.WorkerJob) error {
	j.mu.Lock()
	def.InstanceId = j.mu.def.GetInstanceId()
	j.mu.def = def
	j.mu.Unlock()
	return j.persist()
}

// --- stop, fail, down ------------------------------------------------------

// stop stops the project (compose STOP, then DOWN) and reports
// job_stopped.
func (j *job) stop(grace time.Duration) {
	j.phase, j.stopGrace = phaseStopping, grace
	if err := j.persist(); err != nil {
		j.log.Error("saving job record", "error", err)
	}
	j.stopAll(grace)
	j.down()
	j.log.Info("job stopped")
	j.finish(worker.EventStopped, "")
}

// fail stops what runs of the job (FailStopGrace), removes the project and
// reports job_failed with reason.
func (j *job) fail(reason string) {
	j.log.Warn("job failed", "reason", reason)
	j.phase, j.failReason = phaseFailing, reason
	if err := j.persist(); err != nil {
		j.log.Error("saving job record", "error", err)
	}
	j.stopAll(j.r.cfg.FailStopGrace)
	j.down()
	j.finish(worker.EventFailed, reason)
}

// stopAll stops the running containers in reverse start order: SIGTERM,
// then SIGKILL after grace (at once for grace 0).
func (j *job) stopAll(grace time.Duration) {
	n := 0
	for _, s := range j.svcs {
		if s.running || s.id != "" {
			n++
		}
	}
	j.compose(stageStop, fmt.Sprintf("stopping %d containers (grace %s)", n, grace))
	for i := len(j.svcs) - 1; i >= 0; i-- {
		s := j.svcs[i]
		s.restartAt = time.Time{}
		if s.id == "" {
			continue
		}
		if st, stopped := j.stopContainer(s, grace); stopped {
			j.containerEvent(s, st.String())
		}
		s.running = false
		s.output.finish()
	}
}

// stopContainer stops s's container if it runs and reports whether it
// was running, with its exit.
func (j *job) stopContainer(s *service, grace time.Duration) (exitState, bool) {
	// Stops run even when the runtime shuts down meanwhile: a half-done
	// stop is finished by the next worker, but finishing it now is better.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(j.ctx), grace+engineTimeout)
	defer cancel()
	info, err := j.r.cli.ContainerInspect(ctx, s.id)
	if err != nil || info.State == nil || !info.State.Running {
		return exitState{}, false
	}
	waitC, errC := j.r.cli.ContainerWait(ctx, s.id, container.WaitConditionNotRunning)
	sig := "SIGTERM"
	if grace <= 0 {
		sig = "SIGKILL"
	}
	if err := j.r.cli.ContainerKill(ctx, s.id, sig); err != nil && !isNotRunning(err) {
		s.log.Warn("signalling the container", "signal", sig, "error", err)
	}
	timer := time.NewTimer(grace)
	defer timer.Stop()
	// A signal reaching a container's PID 1 before it installed its handler
	// is dropped (PID 1 has no default action): repeat it during the grace.
	resend := time.NewTicker(termResend)
	defer resend.Stop()
	if grace <= 0 {
		resend.Stop()
	}
	for stopped := false; !stopped; {
		select {
		case <-waitC:
			stopped = true
		case <-errC:
			stopped = true
		case <-resend.C:
			if err := j.r.cli.ContainerKill(ctx, s.id, sig); err != nil && !isNotRunning(err) {
				s.log.Debug("signalling the container again", "signal", sig, "error", err)
			}
		case <-timer.C:
			j.containerEvent(s, fmt.Sprintf("did not stop within %s; sending SIGKILL", grace))
			s.log.Warn("container did not stop in time; killing it", "grace", grace)
			if err := j.r.cli.ContainerKill(ctx, s.id, "SIGKILL"); err != nil && !isNotRunning(err) {
				s.log.Warn("killing the container", "error", err)
			}
			select {
			case <-waitC:
			case <-errC:
			case <-ctx.Done():
			}
			stopped = true
		}
	}
	st, err := j.inspectExit(s.id)
	if err != nil {
		return exitState{Error: err.Error()}, true
	}
	return st, true
}

func isNotRunning(err error) bool {
	return err != nil && (client.IsErrNotFound(err) || strings.Contains(err.Error(), "is not running"))
}

// down removes the project's containers and network (compose DOWN) and its
// directory; named volumes stay until the job is deleted.
func (j *job) down() {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(j.ctx), engineTimeout)
	defer cancel()
	j.compose(stageDown, "removing containers"+map[bool]string{true: " and network " + j.network, false: ""}[j.network != ""])
	if err := j.removeContainers(ctx); err != nil {
		j.log.Error("removing the project's containers", "error", err)
	}
	if j.network != "" {
		j.r.removeNetwork(ctx, j.network)
	}
	if err := os.RemoveAll(j.dir); err != nil {
		j.log.Error("removing the job directory", "dir", j.dir, "error", err)
	}
}

// removeContainers force-removes every container of the project, found by
// its labels.
func (j *job) removeContainers(ctx context.Context) error {
	list, err := j.r.cli.ContainerList(ctx, container.ListOptions{All: true, Filters: filters.NewArgs(
		filters.Arg("label", LabelWorker+"="+j.r.id), filters.Arg("label", LabelProject+"="+j.project))})
	if err != nil {
		return err
	}
	var errs []error
	for _, c := range list {
		if err := j.r.cli.ContainerRemove(ctx, c.ID, container.RemoveOptions{Force: true}); err != nil && !client.IsErrNotFound(err) {
			errs = append(errs, fmt.Errorf("remove container %s: %w", shortID(c.ID), err))
		}
	}
	return errors.Join(errs...)
}

// removeNetwork removes a project network; a missing one is fine.
func (r *Runtime) removeNetwork(ctx context.Context, name string) {
	if err := r.cli.NetworkRemove(ctx, name); err != nil && !client.IsErrNotFound(err) {
		r.log.Error("removing the project network", "network", name, "error", err)
	}
}

// finish reports the job's end and removes it from the runtime.
func (j *job) finish(kind worker.EventKind, reason string) {
	close(j.quitCh)
	j.cancel()
	j.r.removeJob(j)
	j.r.emitLifecycle(worker.Event{Kind: kind, Key: j.key, Instance: j.instance(), Reason: reason})
	close(j.doneCh)
}

// --- restore ----------------------------------------------------------------

// runRestored is the goroutine of a job re-adopted by Restore.
func (j *job) runRestored(rec *record, containers []container.Summary) {
	defer j.r.wg.Done()
	// There is no start phase to cancel, but a Stop may have come before
	// the containers were adopted (the engine did not answer at Restore).
	grace, stopRequested := j.endStartPhase()
	j.phase = rec.Phase
	byService := map[string]container.Summary{}
	for _, c := range containers {
		byService[c.Labels[LabelService]] = c
	}
	for i, s := range j.svcs {
		sr := rec.Services[i]
		s.restarts, s.completed = sr.Restarts, sr.Completed
		if c, ok := byService[s.spec.Name]; ok {
			s.id = c.ID
		}
	}
	switch rec.Phase {
	case phaseStarting:
		j.startErr = errors.New("the worker restarted while the job was starting")
		close(j.startedCh)
		j.fail("the worker restarted while the job was starting; its containers were removed")
		return
	case phaseStopping:
		j.startErr = errors.New("the job was being stopped")
		close(j.startedCh)
		j.log.Info("finishing a stop begun by the previous worker")
		j.stop(rec.StopGrace)
		return
	case phaseFailing:
		j.startErr = errors.New("the job failed")
		close(j.startedCh)
		j.fail(rec.FailReason)
		return
	}
	if stopRequested {
		j.log.Info("stopping a restored job, as asked before its containers were adopted")
		j.stop(grace)
		return
	}
	j.log.Info("re-adopting job") // startedCh was closed by Restore
	for _, s := range j.svcs {
		if s.completed {
			continue
		}
		if s.id == "" {
			j.fail(fmt.Sprintf("service %q: its container was removed while no worker watched it", s.spec.Name))
			return
		}
		s.run++
		s.running = true
		j.follow(s, time.Now())
		j.watch(s) // reports at once if the container exited meanwhile
	}
	if err := j.persist(); err != nil {
		j.log.Error("saving job record", "error", err)
	}
	j.loop()
}

// --- records and job info ----------------------------------------------------

func (j *job) persist() error {
	defJSON, err := protojson.Marshal(j.def())
	if err != nil {
		return fmt.Errorf("encode job definition: %w", err)
	}
	rec := &record{
		Version:    recordVersion,
		JobID:      string(j.key.JobID),
		Role:       j.key.Role,
		Project:    j.project,
		Network:    j.network,
		Phase:      j.phase,
		StopGrace:  j.stopGrace,
		FailReason: j.failReason,
		Job:        defJSON,
	}
	for _, s := range j.svcs {
		rec.Services = append(rec.Services, serviceRecord{Spec: s.spec, ContainerID: s.id, Restarts: s.restarts, Completed: s.completed})
	}
	if err := os.MkdirAll(j.dir, 0o700); err != nil {
		return fmt.Errorf("create job directory: %w", err)
	}
	return writeRecord(filepath.Join(j.dir, "job.json"), rec)
}

// info emits a job_info message; m is one of the JobInfoMessage oneof
// wrappers (service_started, service_restarting, container_event).
func (j *job) info(m any) {
	if ev, ok := emit.ServiceInfo(j.key, m); ok {
		j.r.emitInfo(ev)
	}
}

func (j *job) compose(stage commonpb.JobInfoComposeMessage_Stage, text string) {
	j.r.emitInfo(emit.Compose(j.key, stage, text))
}

func (j *job) containerEvent(s *service, text string) {
	j.info(&commonpb.JobInfoMessage_ContainerEvent{ContainerEvent: &commonpb.JobInfoContainerEvent{ServiceName: s.spec.Name, Text: text}})
}

// exitState is how a container's run ended.
type exitState struct {
	Code  int
	OOM   bool   // killed by the kernel's OOM killer
	Error string // the engine's error for the container, if any
	Gone  bool   // the container no longer exists
}

func (st exitState) success() bool { return st.Code == 0 && !st.OOM && !st.Gone && st.Error == "" }

// String describes the exit for job_info and failure reasons.
func (st exitState) String() string {
	var parts []string
	switch {
	case st.Gone:
		return "container removed"
	case st.OOM:
		parts = append(parts, fmt.Sprintf("was killed for running out of memory (OOM), exit code %d", st.Code))
	case st.Code > 128 && st.Code < 160:
		parts = append(parts, fmt.Sprintf("exited with code %d (killed by %s)", st.Code, signalName(st.Code-128)))
	default:
		parts = append(parts, fmt.Sprintf("exited with code %d", st.Code))
	}
	if st.Error != "" {
		parts = append(parts, "engine error: "+st.Error)
	}
	return strings.Join(parts, "; ")
}

func signalName(n int) string {
	names := map[int]string{1: "SIGHUP", 2: "SIGINT", 3: "SIGQUIT", 6: "SIGABRT", 9: "SIGKILL", 11: "SIGSEGV", 13: "SIGPIPE", 15: "SIGTERM"}
	if s, ok := names[n]; ok {
		return s
	}
	return fmt.Sprintf("signal %d", n)
}
