package supervisor

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/norsk-oss/norsk-manager/proto/commonpb"
	"github.com/norsk-oss/norsk-manager/proto/workerpb"
	"github.com/norsk-oss/norsk-manager/worker"
	"github.com/norsk-oss/norsk-manager/worker/internal/emit"
)

// Condition is what a service waits for of a dependency before it is
// launched (compose's depends_on conditions).
type Condition uint8

const (
	// ConditionStarted (compose service_started, and the wire's
	// dependsOn): the dependency was launched.
	ConditionStarted Condition = iota
	// ConditionHealthy (service_healthy): the dependency's healthcheck
	// passes. A dependency that turns unhealthy first, or has no
	// healthcheck, fails the job.
	ConditionHealthy
	// ConditionCompletedSuccessfully (service_completed_successfully): the
	// dependency exited with code 0. A non-zero exit fails the job.
	ConditionCompletedSuccessfully
)

// String returns the condition's name in a template ("started",
// "healthy", "completed_successfully").
func (c Condition) String() string {
	switch c {
	case ConditionHealthy:
		return "healthy"
	case ConditionCompletedSuccessfully:
		return "completed_successfully"
	}
	return "started"
}

// ParseCondition reads a condition by its name (String), also in
// compose's spelling (service_started, service_healthy,
// service_completed_successfully); "" is ConditionStarted.
func ParseCondition(s string) (Condition, error) {
	switch s {
	case "", "started", "service_started":
		return ConditionStarted, nil
	case "healthy", "service_healthy":
		return ConditionHealthy, nil
	case "completed_successfully", "service_completed_successfully":
		return ConditionCompletedSuccessfully, nil
	}
	return 0, fmt.Errorf("%w: depends_on condition %q is not started, healthy or completed_successfully", worker.ErrInvalidJob, s)
}

// Dependency is one entry of a service's depends_on.
type Dependency struct {
	Service   string    // the name of another service of the job
	Condition Condition // what to wait for
}

// Service is one service as the supervisor sees it.
type Service struct {
	Name          string
	DependsOn     []Dependency // every one names a service earlier in Config.Services
	Restart       commonpb.Service_ServiceRestart
	RestartCount  uint32        // effective (svcplan defaults applied)
	RestartPeriod time.Duration // effective (svcplan defaults applied)
}

// Config is one job's supervisor: what it runs and with which runtime.
type Config struct {
	Key worker.JobKey
	// Def is the job's definition; the supervisor owns it from now on
	// (Update replaces it; Snapshot returns copies).
	Def *workerpb.WorkerJob
	// Services in start order (dependencies first).
	Services []Service
	Driver   Driver
	Emit     *emit.Emitter
	Log      *slog.Logger
	// Ports returns the job's resolved ports (fixed for its life), as
	// reported with job_started and by Snapshot.
	Ports func() worker.PortMappings
	// Done is closed when the runtime shuts down: the job's goroutine
	// then returns and leaves the services running.
	Done <-chan struct{}
	// OnEnd is called when the job has ended, before its last lifecycle
	// event: the runtime forgets the job and frees its ports.
	OnEnd func()
	// RestartBackoff and MaxRestartBackoff bound the wait before a
	// restart (svcplan.Backoff); FailStopGrace is the grace of the
	// services' stop when the job fails.
	RestartBackoff, MaxRestartBackoff, FailStopGrace time.Duration
	// StartNote is the compose START text, e.g. "starting 2 containers".
	StartNote string
}

// Phase is where a job is in its life, as its record says.
type Phase string

const (
	// PhaseStarting: the start phase runs; a restarted worker fails the job.
	PhaseStarting Phase = "starting"
	// PhaseRunning: every service was launched; a restarted worker re-adopts them.
	PhaseRunning Phase = "running"
	// PhaseStopping: a stop began; a restarted worker finishes it.
	PhaseStopping Phase = "stopping"
	// PhaseFailing: the job failed and its services are being stopped; a
	// restarted worker finishes that and reports the failure.
	PhaseFailing Phase = "failing"
)

// Record is what the supervisor needs persisted about a job (Driver.Persist)
// and gets back at Restore.
type Record struct {
	Phase      Phase
	StopGrace  time.Duration // of the stop in progress
	FailReason string        // of the failure in progress
	// Def is the current definition (do not modify it).
	Def      *workerpb.WorkerJob
	Services []ServiceRecord // as Config.Services
}

// ServiceRecord is one service's part of a Record.
type ServiceRecord struct {
	Restarts  []time.Time // restarts within the restart window
	Completed bool        // exited successfully and will not restart
}
