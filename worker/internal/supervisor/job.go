package supervisor

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/norsk-oss/norsk-manager/proto/workerpb"
	"github.com/norsk-oss/norsk-manager/worker"
)

// ErrStoppedWhileStarting is AwaitStart's error for a job stopped before
// its start phase ended; the job reported job_stopped, not job_failed.
var ErrStoppedWhileStarting = errors.New("supervisor: the job was stopped while it was starting")

// Job supervises one (job, role). Create it with New (a job to start) or
// Restored (a job a previous worker left), then call Run in a goroutine
// of its own. Its methods are safe for concurrent use; its goroutine owns
// everything but mu's fields and the start-phase fields under startMu.
type Job struct {
	cfg  Config
	log  *slog.Logger
	svcs []*service

	ctx    context.Context // cancelled when the job ends or the runtime shuts down
	cancel context.CancelFunc
	// startCtx (a child of ctx) bounds the start phase: a Stop during it
	// cancels it, so that a long pull does not hold the stop up.
	startCtx    context.Context
	startCancel context.CancelFunc
	startMu     sync.Mutex
	startDone   bool           // the start phase has ended (startMu)
	pendingStop *time.Duration // grace of a Stop during the start phase (startMu)

	wg          sync.WaitGroup                // the job's watcher goroutines
	exitCh      chan exitReport               // exits reported by watchers
	healthCh    chan healthReport             // health changes reported by watchers
	stopCh      chan time.Duration            // Stop, with its grace
	updateCh    chan updateRequest            // Update
	againCh     chan chan worker.PortMappings // Start of a running job
	startedCh   chan struct{}                 // closed when the start phase ends; only ever closed (startedOnce)
	startedOnce sync.Once
	startErr    error         // set before startedCh is closed
	quitCh      chan struct{} // closed when the job's goroutine finishes the job; only ever closed
	doneCh      chan struct{} // closed once the job has ended; only ever closed

	restored   *Record // set by Restored: the record to adopt from
	fromRecord bool    // set by Restored, never changed: Listed
	phase      Phase
	stopGrace  time.Duration
	failReason string
	deferred   []exitReport // exits seen during the start phase, handled after it

	mu struct {
		sync.Mutex
		def *workerpb.WorkerJob
	}
}

// service is one service of the job; owned by the job's goroutine.
type service struct {
	spec      Service
	index     int
	log       *slog.Logger
	h         Handle      // current run; nil if none
	run       int         // counts runs; reports of older runs are ignored
	running   bool        // launched and its exit not yet handled
	health    Health      // of the current run
	restarts  []time.Time // restarts within the restart window
	completed bool        // exited successfully and will not restart
	exitedOK  bool        // the last run exited successfully (completed_successfully)
	exitText  string      // how the last run ended, "" while running
	restartAt time.Time   // pending restart; zero if none
}

type exitReport struct {
	svc *service
	run int
	ex  Exit
}

type healthReport struct {
	svc *service
	run int
	h   Health
}

type updateRequest struct {
	def   *workerpb.WorkerJob
	reply chan error
}

// New returns the supervisor of a job to start; Run starts it.
func New(cfg Config) *Job {
	return newJob(cfg, PhaseStarting)
}

// Restored returns the supervisor of a job taken back from rec after a
// worker restart; Run adopts its services (Driver.Adopt) and finishes
// what rec says was under way. A job recorded as running is listed
// (Started) at once.
func Restored(cfg Config, rec Record) *Job {
	j := newJob(cfg, rec.Phase)
	j.restored, j.fromRecord = &rec, true
	j.stopGrace, j.failReason = rec.StopGrace, rec.FailReason
	for i, s := range j.svcs {
		if i < len(rec.Services) {
			s.restarts, s.completed = rec.Services[i].Restarts, rec.Services[i].Completed
		}
	}
	if rec.Phase != PhaseRunning {
		j.startErr = fmt.Errorf("the job was %s when the worker restarted", rec.Phase)
	}
	j.startedOnce.Do(func() { close(j.startedCh) })
	return j
}

func newJob(cfg Config, phase Phase) *Job {
	ctx, cancel := context.WithCancel(context.Background())
	j := &Job{
		cfg:       cfg,
		log:       cfg.Log,
		ctx:       ctx,
		cancel:    cancel,
		exitCh:    make(chan exitReport, len(cfg.Services)+1),
		healthCh:  make(chan healthReport, len(cfg.Services)+1),
		stopCh:    make(chan time.Duration),
		updateCh:  make(chan updateRequest),
		againCh:   make(chan chan worker.PortMappings),
		startedCh: make(chan struct{}),
		quitCh:    make(chan struct{}),
		doneCh:    make(chan struct{}),
		phase:     phase,
	}
	if j.log == nil {
		j.log = slog.New(slog.DiscardHandler)
	}
	j.startCtx, j.startCancel = context.WithCancel(ctx)
	// The job's context ends at shutdown too, so that what runs for it
	// (a pull, a watcher) returns and the runtime's Shutdown can wait.
	go func() {
		select {
		case <-cfg.Done:
			cancel()
		case <-ctx.Done():
		}
	}()
	j.mu.def = cfg.Def
	for i, spec := range cfg.Services {
		j.svcs = append(j.svcs, &service{spec: spec, index: i, log: j.log.With("service", spec.Name)})
	}
	return j
}

// Key returns the job's (job, role).
func (j *Job) Key() worker.JobKey { return j.cfg.Key }

// Done returns a channel closed once the job has ended (its last
// lifecycle event was delivered).
func (j *Job) Done() <-chan struct{} { return j.doneCh }

// Started reports whether the start phase ended successfully, so that
// List reports the job (a job still starting, or being failed, is not
// reported: the manager takes what List returns as running).
func (j *Job) Started() bool {
	select {
	case <-j.startedCh:
		return j.startErr == nil
	default:
		return false
	}
}

// Listed reports whether a runtime's List should report the job: one
// whose start phase ended successfully (Started), or one a restarted
// worker took back from its record, whatever the record's phase. A
// restored job that is stopping or failing is still there — its services
// may run for the stop grace — and it ends with a lifecycle event
// (job_stopped, job_failed with its reason) that the manager must be able
// to match to the job: a hello without it would have the manager take it
// as gone at once. A job in its own start phase, or failed in it, is not
// listed.
func (j *Job) Listed() bool { return j.fromRecord || j.Started() }

// AwaitStart waits for the start phase of a job New created and returns
// its ports, or why it did not start (ErrStoppedWhileStarting for a
// stop); worker.ErrRuntimeClosed at shutdown; ctx's error.
func (j *Job) AwaitStart(ctx context.Context) (worker.PortMappings, error) {
	select {
	case <-j.startedCh:
		if j.startErr != nil {
			return nil, j.startErr
		}
		return j.cfg.Ports(), nil
	case <-j.cfg.Done:
		return nil, worker.ErrRuntimeClosed
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// ReportAgain asks a running job to report job_started again (a Start of
// a job that runs) and returns its ports; running is false if the job
// ended meanwhile (the caller starts it anew).
func (j *Job) ReportAgain(ctx context.Context) (ports worker.PortMappings, running bool, err error) {
	select {
	case <-j.startedCh:
	case <-j.cfg.Done:
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
	case <-j.cfg.Done:
		return nil, false, worker.ErrRuntimeClosed
	case <-ctx.Done():
		return nil, false, ctx.Err()
	}
}

// Stop stops the job (every service in reverse start order with grace,
// then Driver.Teardown, then job_stopped) and returns once it has ended.
// A stop during the start phase cancels the start and is carried out
// when the start phase ends. A job that ends on its own meanwhile answers
// the stop with its own end. Errors: worker.ErrRuntimeClosed at shutdown,
// ctx's error.
func (j *Job) Stop(ctx context.Context, grace time.Duration) error {
	j.RequestStop(ctx, grace)
	select {
	case <-j.doneCh:
		return nil
	case <-j.cfg.Done:
		return worker.ErrRuntimeClosed
	case <-ctx.Done():
		return ctx.Err()
	}
}

// RequestStop hands a stop to the job without waiting for its end (Stop
// waits); false if the job ended first, the runtime shuts down or ctx
// ended.
func (j *Job) RequestStop(ctx context.Context, grace time.Duration) bool {
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
	case <-j.cfg.Done:
	case <-ctx.Done():
	}
	return false
}

// StopDeferred reports whether a Stop came while the start phase (or, for
// a Restored job, the adoption of its services) was under way; such a
// stop is carried out when that ends. Tests wait for it to know a Stop
// was taken before they let the start go on.
func (j *Job) StopDeferred() bool {
	j.startMu.Lock()
	defer j.startMu.Unlock()
	return j.pendingStop != nil
}

// Update replaces the job's definition (keeping the instance id it was
// started with) and persists it. Errors: worker.ErrJobNotRunning if the
// job ended, worker.ErrRuntimeClosed, ctx's error, or the record's.
func (j *Job) Update(ctx context.Context, def *workerpb.WorkerJob) error {
	req := updateRequest{def: def, reply: make(chan error, 1)}
	select {
	case j.updateCh <- req:
		return <-req.reply
	case <-j.quitCh:
		return fmt.Errorf("update %s: %w", j.cfg.Key, worker.ErrJobNotRunning)
	case <-j.cfg.Done:
		return worker.ErrRuntimeClosed
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Snapshot returns the job as List reports it (a copy of its definition
// and its ports).
func (j *Job) Snapshot() worker.RunningJob {
	j.mu.Lock()
	def := proto.Clone(j.mu.def).(*workerpb.WorkerJob)
	j.mu.Unlock()
	return worker.RunningJob{Job: def, Ports: j.cfg.Ports()}
}

// Def returns the current definition; callers must not modify it.
func (j *Job) Def() *workerpb.WorkerJob {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.mu.def
}

// Context returns a context cancelled when the job ends or the runtime
// shuts down (for goroutines a driver starts for the job, like output
// followers).
func (j *Job) Context() context.Context { return j.ctx }

// instance returns the job's instance id, which its lifecycle events carry.
func (j *Job) instance() string { return j.Def().GetInstanceId() }
