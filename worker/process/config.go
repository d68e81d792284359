package process

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"time"

	"github.com/norsk-oss/norsk-manager/worker/internal/svcplan"
)

// Defaults of the restart policy (svcplan.DefaultRestartCount and
// svcplan.DefaultRestartPeriod), for callers of this package.
const (
	DefaultRestartCount  = svcplan.DefaultRestartCount
	DefaultRestartPeriod = svcplan.DefaultRestartPeriod
)

// Config configures a Runtime. Start from DefaultConfig or DevConfig.
type Config struct {
	// StateDir is the runtime's directory; jobs live in StateDir/jobs.
	// Required. Created (mode 0700) if missing. New locks it (the file
	// StateDir/lock) until Shutdown: a second Runtime over the same
	// directory is refused while the first is alive. It must differ from
	// the worker.Config.StateDir of the agent, which locks its own
	// directory the same way (cmd/ uses <worker state dir>/process).
	StateDir string

	// JobUser, when set, is the user every service runs as (its uid, gid
	// and groups; its HOME, USER and LOGNAME on top of Environ), and JobDir
	// must be set: a worker running as root sets it so that its jobs
	// cannot read its state directory, the node credential or its TLS key
	// (docs/design/security.md, "What a job can reach"). Changing user
	// needs root: New fails otherwise. Nil: services run as the worker's
	// own user.
	JobUser *JobUser

	// JobDir holds the services' working directories, one per (job,
	// role), made for each job and owned by JobUser. It must not be inside
	// StateDir (whose mode 0700 keeps JobUser out); New creates it (mode
	// 0755) if missing, and refuses one not owned by this process's user
	// or writable by others. One JobUser cannot reach (a directory above
	// it it may not search) is logged by New, and fails each job's start
	// with a reason that says so. Required with JobUser. Empty: working directories are made inside StateDir, as
	// before JobUser existed.
	JobDir string

	// Environ is the base environment of every service, usually the
	// worker's own (os.Environ(), set by cmd/). Nil gives only a default
	// PATH. Service environment variables and NORSK_* variables are set on
	// top of it.
	Environ []string

	// Shell runs each service (`Shell -c command`). Default /bin/sh.
	Shell string

	// DefaultHostAddress is the host address of port mappings that set
	// none. Default 127.0.0.1.
	DefaultHostAddress string

	// OutputLinesPerSecond caps the output lines of one service reported
	// as job_info per second (stdout and stderr together); the excess is
	// counted and reported as one "N lines suppressed" note. Default 20.
	OutputLinesPerSecond int

	// MaxLogBytes caps each service output log file: a file that reaches
	// it is truncated at the next poll, dropping (with a note) what was not
	// read yet; while a service writes that fast its logs are polled every
	// millisecond. Default 64 MiB.
	MaxLogBytes int64

	// PollInterval is how often output logs are checked for new lines, and
	// how often exit is checked for processes that pidfd cannot watch.
	// Default 250ms.
	PollInterval time.Duration

	// RestartBackoff is the delay before the first restart of a service
	// within its restart window; it doubles with each further restart in
	// the window, up to MaxRestartBackoff. Defaults 250ms and 10s.
	RestartBackoff    time.Duration
	MaxRestartBackoff time.Duration

	// FailStopGrace is the grace period (SIGTERM → SIGKILL) used to stop
	// the remaining services of a failed job, and to finish a stop that a
	// previous worker process left half done. Default 10s.
	FailStopGrace time.Duration

	// EventBuffer is the length of the Events channel. Default 1024.
	EventBuffer int

	// Logger receives the runtime's logs. Nil logs text to stderr.
	Logger *slog.Logger
}

// DefaultConfig returns a Config with production defaults; StateDir and
// Environ must still be set.
func DefaultConfig() Config {
	return Config{
		Shell:                "/bin/sh",
		DefaultHostAddress:   "127.0.0.1",
		OutputLinesPerSecond: 20,
		MaxLogBytes:          64 << 20,
		PollInterval:         250 * time.Millisecond,
		RestartBackoff:       250 * time.Millisecond,
		MaxRestartBackoff:    10 * time.Second,
		FailStopGrace:        10 * time.Second,
		EventBuffer:          1024,
	}
}

// DevConfig returns a Config for tests: short backoffs and grace periods.
func DevConfig() Config {
	c := DefaultConfig()
	c.PollInterval = 20 * time.Millisecond
	c.RestartBackoff = 20 * time.Millisecond
	c.MaxRestartBackoff = 100 * time.Millisecond
	c.FailStopGrace = time.Second
	return c
}

// Validate checks c and returns an error naming the first bad field.
func (c *Config) Validate() error {
	switch {
	case c.StateDir == "":
		return errors.New("process: StateDir is required")
	case c.JobUser != nil && c.JobDir == "":
		return fmt.Errorf("process: JobDir is required with JobUser (%s): its working directories cannot be in StateDir, which the job user may not enter", c.JobUser)
	case c.Shell == "":
		return errors.New("process: Shell is required")
	case net.ParseIP(c.DefaultHostAddress) == nil:
		return fmt.Errorf("process: DefaultHostAddress %q is not an IP address", c.DefaultHostAddress)
	case c.OutputLinesPerSecond < 1:
		return fmt.Errorf("process: OutputLinesPerSecond (%d) must be at least 1", c.OutputLinesPerSecond)
	case c.MaxLogBytes < 4096:
		return fmt.Errorf("process: MaxLogBytes (%d) must be at least 4096", c.MaxLogBytes)
	case c.PollInterval < time.Millisecond:
		return fmt.Errorf("process: PollInterval (%s) must be at least 1ms", c.PollInterval)
	case c.RestartBackoff < 0 || c.MaxRestartBackoff < c.RestartBackoff:
		return fmt.Errorf("process: RestartBackoff (%s) must be between 0 and MaxRestartBackoff (%s)", c.RestartBackoff, c.MaxRestartBackoff)
	case c.FailStopGrace < 0:
		return fmt.Errorf("process: FailStopGrace (%s) must not be negative", c.FailStopGrace)
	case c.EventBuffer < 1:
		return fmt.Errorf("process: EventBuffer (%d) must be at least 1", c.EventBuffer)
	}
	return nil
}
