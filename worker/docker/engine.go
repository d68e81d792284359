package docker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"sync"
	"time"

	"github.com/docker/docker/client"

	"github.com/norsk-oss/norsk-manager/worker"
)

// ConditionRuntime is the RuntimeCondition.Runtime of the Docker engine's
// condition.
const ConditionRuntime = "docker"

// ErrEngineUnreachable is matched by the *EngineError that Runtime.Start
// of a new job returns while the Docker engine does not answer.
var ErrEngineUnreachable = errors.New("docker: engine unreachable")

// EngineError says that the Docker engine did not answer a ping. Its text
// is the job_failed reason and the condition's reason, e.g. "docker engine
// at unix:///var/run/docker.sock unreachable: dial unix
// /var/run/docker.sock: connect: no such file or directory (is dockerd
// running? DOCKER_HOST selects another engine)".
type EngineError struct {
	Host  string // the engine's address (the client's DaemonHost)
	Cause string // why the ping failed
}

// Error implements error.
func (e *EngineError) Error() string {
	return fmt.Sprintf("docker engine at %s unreachable: %s", e.Host, e.Cause)
}

// Unwrap returns ErrEngineUnreachable.
func (e *EngineError) Unwrap() error { return ErrEngineUnreachable }

// engine tracks whether the Docker engine answers: New checks it once, a
// goroutine every Config.EngineCheckInterval, Start before it creates a
// job. Safe for concurrent use.
type engine struct {
	cli     *client.Client
	log     *slog.Logger
	timeout time.Duration // bounds one ping

	mu struct {
		sync.Mutex
		checked bool
		ok      bool
		reason  string        // why not ok
		since   time.Time     // when ok last changed
		changed chan struct{} // closed and replaced when ok changes
	}
}

func newEngine(cli *client.Client, log *slog.Logger, timeout time.Duration) *engine {
	e := &engine{cli: cli, log: log, timeout: timeout}
	e.mu.changed = make(chan struct{})
	return e
}

// check pings the engine and records the outcome. It returns nil if the
// engine answered, else an *EngineError; or ctx's error if ctx ended first
// (nothing is recorded then).
func (e *engine) check(ctx context.Context) error {
	pctx, cancel := context.WithTimeout(ctx, e.timeout)
	defer cancel()
	_, err := e.cli.Ping(pctx)
	if err != nil && ctx.Err() != nil {
		return ctx.Err() // the caller gave up: says nothing about the engine
	}
	if err == nil {
		e.record(true, "")
		return nil
	}
	ee := &EngineError{Host: e.cli.DaemonHost(), Cause: e.cause(err)}
	e.record(false, ee.Error())
	return ee
}

// cause describes why a ping failed. The client hides the cause of a
// failed connection ("Cannot connect to the Docker daemon at …"), so it is
// found again by dialing the engine's address.
func (e *engine) cause(err error) string {
	if !client.IsErrConnectionFailed(err) {
		return err.Error()
	}
	u, perr := url.Parse(e.cli.DaemonHost())
	if perr != nil {
		return err.Error()
	}
	network, addr := u.Scheme, u.Host
	if network == "unix" {
		addr = u.Path
	}
	if network != "unix" && network != "tcp" {
		return err.Error()
	}
	conn, derr := net.DialTimeout(network, addr, e.timeout)
	if derr != nil {
		return derr.Error() + " (is dockerd running? DOCKER_HOST selects another engine)"
	}
	_ = conn.Close()
	return err.Error()
}

// record sets the state and logs a change.
func (e *engine) record(ok bool, reason string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.mu.checked && e.mu.ok == ok {
		e.mu.reason = reason
		return
	}
	first := !e.mu.checked
	e.mu.checked, e.mu.ok, e.mu.reason, e.mu.since = true, ok, reason, time.Now()
	close(e.mu.changed)
	e.mu.changed = make(chan struct{})
	switch {
	case !ok:
		e.log.Error("docker engine unreachable; new docker jobs are refused until it answers", "engine", e.cli.DaemonHost(), "reason", reason)
	case !first:
		e.log.Info("docker engine answers again", "engine", e.cli.DaemonHost())
	}
}

// condition returns the engine's state as a worker.RuntimeCondition.
func (e *engine) condition() worker.RuntimeCondition {
	e.mu.Lock()
	defer e.mu.Unlock()
	return worker.RuntimeCondition{Runtime: ConditionRuntime, OK: e.mu.ok, Reason: e.mu.reason, Since: e.mu.since}
}

// monitor checks the engine every interval until ctx ends.
func (e *engine) monitor(ctx context.Context, interval time.Duration) {
	ticker := time.NewTicker(interval)
	defer ticker.Stop()
	for {
		select {
		case <-ticker.C:
			_ = e.check(ctx) // recorded; Start reports it per job
		case <-ctx.Done():
			return
		}
	}
}

// waitOK returns nil once the engine has answered a check, or ctx's error.
func (e *engine) waitOK(ctx context.Context) error {
	for {
		e.mu.Lock()
		ok, changed := e.mu.ok, e.mu.changed
		e.mu.Unlock()
		if ok {
			return nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}
