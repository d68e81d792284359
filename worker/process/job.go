package process

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/norsk-oss/norsk-manager/proto/commonpb"
	"github.com/norsk-oss/norsk-manager/proto/workerpb"
	"github.com/norsk-oss/norsk-manager/worker"
	"github.com/norsk-oss/norsk-manager/worker/internal/cpuset"
	"github.com/norsk-oss/norsk-manager/worker/internal/emit"
	"github.com/norsk-oss/norsk-manager/worker/internal/svcplan"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
)

// Compose stages reported as job_info.
const (
	stageCreate = commonpb.JobInfoComposeMessage_CREATE
	stageStart  = commonpb.JobInfoComposeMessage_START
	stageStop   = commonpb.JobInfoComposeMessage_STOP
	stageDown   = commonpb.JobInfoComposeMessage_DOWN
)

// job is one (job, role). Its loop goroutine owns everything below except
// mu's fields: other goroutines talk to it through its channels.
type job struct {
	r     *Runtime
	key   worker.JobKey
	log   *slog.Logger
	paths jobPaths
	svcs  []*service // start order; their specs never change

	exitCh    chan *proc                    // exits reported by watchers
	stopCh    chan stopRequest              // Stop
	updateCh  chan updateRequest            // Update
	againCh   chan chan worker.PortMappings // Start of a running job
	startedCh chan struct{}                 // closed when the start phase ends; only ever closed
	startErr  error                         // set before startedCh is closed
	quitCh    chan struct{}                 // closed when the loop finishes the job; only ever closed
	doneCh    chan struct{}                 // closed once the job has left the runtime; only ever closed

	phase      phase
	stopGrace  time.Duration // of the stop in progress
	failReason string        // of the failure in progress

	mu struct {
		sync.Mutex
		def *workerpb.WorkerJob // current definition (Update replaces it)
	}
}

type stopRequest struct{ grace time.Duration }

type updateRequest struct {
	def   *workerpb.WorkerJob
	reply chan error
}

// service is one service of a job; owned by the job's loop.
type service struct {
	spec      *serviceSpec
	log       *slog.Logger
	stdout    string
	stderr    string
	exitFile  string
	tail      *tailer
	cur       *proc       // running process, nil if none
	restarts  []time.Time // restarts within the restart window
	completed bool        // exited successfully and will not restart
	restartAt time.Time   // pending restart; zero if none
}

func (r *Runtime) newJob(key worker.JobKey, def *workerpb.WorkerJob, specs []*serviceSpec) *job {
	j := &job{
		r:         r,
		key:       key,
		log:       r.log.With("job_id", key.JobID, "role", key.Role),
		paths:     newJobPaths(r.jobsDir, key),
		exitCh:    make(chan *proc, len(specs)+1),
		stopCh:    make(chan stopRequest),
		updateCh:  make(chan updateRequest),
		againCh:   make(chan chan worker.PortMappings),
		startedCh: make(chan struct{}),
		quitCh:    make(chan struct{}),
		doneCh:    make(chan struct{}),
		phase:     phaseStarting,
	}
	j.mu.def = def
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
			j.info(&commonpb.JobInfoMessage_ContainerEvent{ContainerEvent: &commonpb.JobInfoContainerEvent{ServiceName: name, Text: text}})
		})
		j.svcs = append(j.svcs, s)
	}
	return j
}

// --- requests from other goroutines ----------------------------------------

// awaitStart waits for the start phase of a job Start created.
func (j *job) awaitStart(ctx context.Context) (worker.PortMappings, error) {
	select {
	case <-j.startedCh:
		if j.startErr != nil {
			return nil, j.startErr
		}
		return j.ports(), nil
	case <-j.r.shutdownCh:
		return nil, worker.ErrRuntimeClosed
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// reportAgain asks a running job to emit EventStarted again (Start of a
// running job). running is false if the job ended meanwhile.
func (j *job) reportAgain(ctx context.Context) (ports worker.PortMappings, running bool, err error) {
	select {
	case <-j.startedCh:
	case <-j.r.shutdownCh:
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
	case <-j.r.shutdownCh:
		return nil, false, worker.ErrRuntimeClosed
	case <-ctx.Done():
		return nil, false, ctx.Err()
	}
}

// requestStop hands a stop to the loop; false if the job ended first.
func (j *job) requestStop(ctx context.Context, grace time.Duration) bool {
	select {
	case j.stopCh <- stopRequest{grace: grace}:
		return true
	case <-j.quitCh:
	case <-j.r.shutdownCh:
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
	case <-j.r.shutdownCh:
		return worker.ErrRuntimeClosed
	case <-ctx.Done():
		return ctx.Err()
	}
}

// snapshot returns the job as List reports it.
func (j *job) snapshot() worker.RunningJob {
	j.mu.Lock()
	def := proto.Clone(j.mu.def).(*workerpb.WorkerJob)
	j.mu.Unlock()
	return worker.RunningJob{Job: def, Ports: j.ports()}
}

// ports returns the resolved port mappings (specs never change).
func (j *job) ports() worker.PortMappings {
	specs := make([]*serviceSpec, len(j.svcs))
	for i, s := range j.svcs {
		specs[i] = s.spec
	}
	return portMappings(specs)
}

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

// loop serves the job until it ends or the runtime shuts down. Each case
// delegates to a handler; handlers that end the job return true.
func (j *job) loop() {
	ticker := time.NewTicker(j.r.cfg.PollInterval)
	defer ticker.Stop()
	var fastPoll <-chan time.Time // set while a service writes faster than the ticker reads
	for {
		restartC, stopTimer := j.restartTimer()
		ended := false
		select {
		case p := <-j.exitCh:
			ended = j.onExit(p)
		case <-restartC:
			ended = j.onRestartDue()
		case now := <-ticker.C:
			fastPoll = j.pollTails(now)
		case now := <-fastPoll:
			fastPoll = j.pollTails(now)
		case req := <-j.stopCh:
			j.stop(req.grace)
			ended = true
		case req := <-j.updateCh:
			req.reply <- j.onUpdate(req.def)
		case reply := <-j.againCh:
			j.onStartAgain(reply)
		case <-j.r.shutdownCh:
			j.detach()
			ended = true
		}
		stopTimer()
		if ended {
			return
		}
	}
}

// startAll prepares the job directory and starts every service in order.
// On failure the job is failed (and finished) before it returns.
func (j *job) startAll() error {
	j.compose(stageCreate, fmt.Sprintf("preparing %d services and %d files", len(j.svcs), len(j.def().GetWriteFiles())))
	if err := j.prepare(); err != nil {
		j.fail("prepare the job directory: " + err.Error())
		return err
	}
	if err := j.persist(); err != nil {
		j.fail(err.Error())
		return err
	}
	j.compose(stageStart, "starting services")
	for _, s := range j.svcs {
		if err := j.launch(s); err != nil {
			err = fmt.Errorf("start service %q: %w", s.spec.Name, err)
			j.fail(err.Error())
			return err
		}
	}
	j.phase = phaseRunning
	if err := j.persist(); err != nil {
		j.log.Error("saving job record", "error", err)
	}
	j.log.Info("job started", "services", len(j.svcs))
	j.r.emitLifecycle(worker.Event{Kind: worker.EventStarted, Key: j.key, Instance: j.instance(), Ports: j.ports()})
	return nil
}

// prepare creates a fresh job directory and writes the job's files into
// the working directory.
func (j *job) prepare() error {
	if err := os.RemoveAll(j.paths.root); err != nil {
		return fmt.Errorf("remove stale job directory: %w", err)
	}
	if err := j.paths.mkdirs(); err != nil {
		return err
	}
	for i, wf := range j.def().GetWriteFiles() {
		if err := writeJobFile(j.paths.work, wf); err != nil {
			return fmt.Errorf("write_files[%d] %q: %w", i, wf.GetPath(), err)
		}
	}
	return nil
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

// launch starts (or restarts) s and watches its exit. A pinned job's
// service (norsk_cpu_list, checked by planCPUs at Start) is started from a
// thread with that affinity mask (cpuset.Pinned), so it and everything it
// forks run on the job's cores from their first instruction.
func (j *job) launch(s *service) error {
	env := svcplan.MergeEnv(j.r.cfg.Environ, s.spec.Env)
	var p *proc
	start := func() (err error) {
		p, err = spawn(j.r.cfg.Shell, s.spec.Command, j.paths.work, env, s.stdout, s.stderr, s.exitFile)
		return err
	}
	var err error
	if cpus := j.def().GetNorskCpuList(); len(cpus) > 0 {
		err = cpuset.Pinned(cpus, start)
	} else {
		err = start()
	}
	if err != nil {
		return err
	}
	s.cur = p
	s.log.Info("service started", "pid", p.pid)
	j.watch(p)
	j.info(&commonpb.JobInfoMessage_ServiceStarted{ServiceStarted: &commonpb.JobInfoServiceStarted{ServiceName: s.spec.Name}})
	if err := j.persist(); err != nil {
		s.log.Error("saving job record", "error", err)
	}
	return nil
}

// watch starts the goroutine that reports p's exit to the loop.
func (j *job) watch(p *proc) {
	j.r.wg.Add(1)
	go func() {
		defer j.r.wg.Done()
		if !p.waitExit(j.r.shutdownCh, j.quitCh, j.r.waker.fd(), j.r.cfg.PollInterval) {
			p.closePidfd()
			return
		}
		if p.child {
			// The unreaped zombie still pins the pgid: kill what the
			// service left in its process group, as a container's end would.
			_ = p.signalGroup(sigKill)
		}
		p.status = p.collect()
		close(p.done)
		select {
		case j.exitCh <- p:
		case <-j.r.shutdownCh:
		case <-j.quitCh:
		}
	}()
}

// onExit handles the exit of a service's process.
func (j *job) onExit(p *proc) bool {
	s := j.serviceOf(p)
	if s == nil {
		return false // already handled (stopped)
	}
	j.afterExit(s, p)
	return j.applyPolicy(s, p.status)
}

func (j *job) serviceOf(p *proc) *service {
	for _, s := range j.svcs {
		if s.cur == p {
			return s
		}
	}
	return nil
}

// afterExit records that s's process p has exited and reports it.
func (j *job) afterExit(s *service, p *proc) {
	s.cur = nil
	s.tail.flush(time.Now())
	s.log.Info("service exited", "pid", p.pid, "status", p.status.String())
	j.containerEvent(s, p.status.String())
}

// applyPolicy decides, after s ended with st, whether s is complete, is
// restarted (after a backoff) or fails the job. It returns true if the job
// ended.
func (j *job) applyPolicy(s *service, st exitStatus) bool {
	policy := s.spec.Restart
	switch {
	case policy == commonpb.Service_NEVER.String() && !st.success():
		j.fail(fmt.Sprintf("service %q %s (restart policy NEVER)%s", s.spec.Name, st, lastOutput(s)))
		return true
	case policy == commonpb.Service_NEVER.String(), policy == commonpb.Service_ON_FAILURE.String() && st.success():
		return j.complete(s)
	}
	now := time.Now()
	s.restarts = svcplan.Prune(s.restarts, now.Add(-s.spec.RestartPeriod))
	if n := len(s.restarts); uint32(n) >= s.spec.RestartCount {
		j.fail(fmt.Sprintf("service %q %s and was already restarted %d times within %s, the most its restart policy (%s, restart_count %d) allows%s",
			s.spec.Name, st, n, s.spec.RestartPeriod, policy, s.spec.RestartCount, lastOutput(s)))
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

// lastOutput returns "; last stderr: …" for failure reasons, or "".
func lastOutput(s *service) string {
	if l := s.tail.lastError(); l != "" {
		return fmt.Sprintf("; last stderr: %q", l)
	}
	return ""
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
	j.finish(worker.EventStopped, "")
	return true
}

// restartTimer returns a channel that fires at the earliest pending
// restart (nil if none) and a function releasing the timer.
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
		if err := j.launch(s); err != nil {
			j.fail(fmt.Sprintf("restart service %q: %v", s.spec.Name, err))
			return true
		}
	}
	return false
}

// fastPollInterval is how soon the logs are read again while a service
// writes faster than PollInterval can keep up with.
const fastPollInterval = time.Millisecond

// pollTails reads every service's new output; it returns a timer channel
// for an early next poll when a service's logs are at their cap, else nil.
func (j *job) pollTails(now time.Time) <-chan time.Time {
	busy := false
	for _, s := range j.svcs {
		if s.tail.poll(now) {
			busy = true
		}
	}
	if busy {
		return time.After(fastPollInterval)
	}
	return nil
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

func (j *job) onStartAgain(reply chan<- worker.PortMappings) {
	ports := j.ports()
	j.r.emitLifecycle(worker.Event{Kind: worker.EventStarted, Key: j.key, Instance: j.instance(), Ports: ports})
	reply <- ports
}

// detach leaves the job running at shutdown: its record is current.
func (j *job) detach() {
	for _, s := range j.svcs {
		s.tail.close()
	}
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

// persist writes the job's record.
func (j *job) persist() error {
	defJSON, err := protojson.Marshal(j.def())
	if err != nil {
		return fmt.Errorf("encode job definition: %w", err)
	}
	rec := &record{
		Version:    recordVersion,
		JobID:      string(j.key.JobID),
		Role:       j.key.Role,
		Phase:      j.phase,
		StopGrace:  j.stopGrace,
		FailReason: j.failReason,
		Job:        defJSON,
	}
	for _, s := range j.svcs {
		sr := serviceRecord{Spec: s.spec, Restarts: s.restarts, Completed: s.completed}
		if s.cur != nil {
			sr.PID, sr.StartTicks = s.cur.pid, s.cur.startTicks
		}
		rec.Services = append(rec.Services, sr)
	}
	return writeRecord(j.paths.record, rec)
}

// --- job info ---------------------------------------------------------------

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
