package supervisor

import (
	"context"
	"errors"
	"time"
)

// Driver is what a runtime supplies for one job: the job-level hooks and
// how a service is launched and re-adopted. Services are named by their
// index in Config.Services (start order). Every method is called from the
// job's own goroutine, never concurrently with another method of the same
// Driver.
type Driver interface {
	// Prepare runs once, before the first service is launched: pull
	// images, write files, create networks, volumes and containers. ctx is
	// cancelled by a Stop during the start phase (and at shutdown). An
	// error fails the job with its text (Teardown still runs). The
	// supervisor persists the record (phase starting) after Prepare and
	// after every launch; a driver that creates something a restarted
	// worker must clean up calls Job.Persist before it does.
	Prepare(ctx context.Context) error
	// Launch starts service svc (its first run, or a restart) and returns
	// the run's handle. ctx is the start phase's context during the start
	// phase (cancelled by a Stop), the job's otherwise. An error fails the
	// job: "start service "x": <err>" (or "restart service …").
	Launch(ctx context.Context, svc int) (Handle, error)
	// Adopt re-attaches service svc after a worker restart (Restore):
	// a Handle for its current run, which may have ended already (its
	// Wait then returns at once); (nil, nil) if it has no run and should
	// be restarted now; an error if it cannot be adopted, which fails the
	// job with its text.
	Adopt(ctx context.Context, svc int) (Handle, error)
	// Teardown removes what Prepare created (compose DOWN) once every
	// service has stopped, when the job ends by a stop, a failure or its
	// completion. It is not called at shutdown.
	Teardown(ctx context.Context)
	// Persist writes the job's record (rec, plus what the driver keeps
	// itself, such as container ids or pids). An error during the start
	// phase fails the job; later it is logged.
	Persist(rec Record) error
}

// Handle is one run of one service. Wait is called from a goroutine of
// its own, Stop and Health from the job's goroutine: they may run
// concurrently with Wait.
type Handle interface {
	// Wait blocks until the run ends and returns how. It retries whatever
	// fails transiently itself (an engine restarting) and returns an
	// error only when ctx ends (the job ended, or the runtime shuts down).
	Wait(ctx context.Context) (Exit, error)
	// Stop ends the run: SIGTERM (or its equivalent), SIGKILL after grace,
	// at once with grace 0. It returns the exit and true if the run was
	// still running, false if it had already ended. ErrShutdown means the
	// runtime shut down midway: the job's record stays "stopping" and the
	// next worker finishes the stop.
	Stop(ctx context.Context, grace time.Duration) (Exit, bool, error)
}

// HealthWatcher is an optional capability of a Handle whose service has
// a healthcheck. WatchHealth runs in a goroutine of its own for the run,
// calls report with every change of the health status (the first call
// says where it starts) and returns when ctx ends or the run ends. A
// Handle without it has no healthcheck (HealthNone).
type HealthWatcher interface {
	WatchHealth(ctx context.Context, report func(Health))
}

// Poller is an optional capability of a Driver that must do something
// periodically on the job's goroutine (the process runtime reads its log
// files). Poll is called every PollInterval; it returns true to be called
// again at once (after a millisecond), as when it fell behind.
type Poller interface {
	PollInterval() time.Duration
	Poll(now time.Time) (busy bool)
}

// ExitObserver is an optional capability of a Driver: Exited is called
// on the job's goroutine when a run of service svc has ended (seen by
// Wait or by Stop), before the exit is reported, and returns the exit to
// use — the process runtime reads the last output there, which its
// goroutine owns, to fill Detail.
type ExitObserver interface {
	Exited(svc int, ex Exit) Exit
}

// Detacher is an optional capability of a Driver: Detach is called when
// the runtime shuts down while the job runs (its services keep running,
// its record stays), to release what the driver holds in this process.
type Detacher interface {
	Detach()
}

// ErrShutdown is returned by Handle.Stop when the runtime shut down
// before the run ended.
var ErrShutdown = errors.New("supervisor: the runtime shut down")

// Exit is how a run ended.
type Exit struct {
	// Success is true for an exit the restart policy counts as a success
	// (exit code 0).
	Success bool
	// Text describes the exit for job_info and failure reasons, e.g.
	// "exited with code 3".
	Text string
	// Detail is appended to failure reasons, e.g. `; last output: "x"`;
	// "" for none.
	Detail string
	// Fatal, when set, fails the job with this reason whatever the
	// restart policy (a container removed behind the worker's back).
	Fatal string
}

// Health is a service's health status as its healthcheck reports it.
type Health uint8

const (
	// HealthNone: the service has no healthcheck.
	HealthNone Health = iota
	// HealthStarting: the healthcheck has not passed yet.
	HealthStarting
	// HealthHealthy: the healthcheck passes.
	HealthHealthy
	// HealthUnhealthy: the healthcheck failed its retries.
	HealthUnhealthy
)

// String returns Docker's name of the status ("none", "starting",
// "healthy", "unhealthy").
func (h Health) String() string {
	switch h {
	case HealthStarting:
		return "starting"
	case HealthHealthy:
		return "healthy"
	case HealthUnhealthy:
		return "unhealthy"
	}
	return "none"
}
