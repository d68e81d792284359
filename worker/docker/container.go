package docker

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/client"

	"github.com/norsk-oss/norsk-manager/worker/internal/supervisor"
)

// run is one run of a service's container: a supervisor.Handle.
type run struct {
	j      *job
	s      *service
	id     string
	output *output
}

// healthRun is a run of a container with a healthcheck: its health
// status is watched too.
type healthRun struct{ *run }

// newRun follows s's output from since and returns the run's handle.
func (j *job) newRun(s *service, since time.Time) supervisor.Handle {
	rn := &run{j: j, s: s, id: s.id}
	rn.output = j.follow(s, since)
	if s.spec.Healthcheck.watched() {
		return &healthRun{rn}
	}
	return rn
}

// Wait implements supervisor.Handle: the container's exit, with the last
// output line. A broken wait (the engine restarting) is retried.
func (rn *run) Wait(ctx context.Context) (supervisor.Exit, error) {
	for {
		st, err := rn.j.waitExit(ctx, rn.id)
		if ctx.Err() != nil {
			rn.output.cancel()
			return supervisor.Exit{}, ctx.Err()
		}
		if err != nil {
			rn.s.log.Warn("waiting for the container failed; retrying", "error", err)
			select {
			case <-time.After(time.Second):
				continue
			case <-ctx.Done():
				rn.output.cancel()
				return supervisor.Exit{}, ctx.Err()
			}
		}
		ex := st.exit(rn.output.finish())
		if st.Gone {
			ex.Fatal = fmt.Sprintf("service %q: its container %s was removed outside the worker", rn.s.spec.Name, shortID(rn.id))
		}
		return ex, nil
	}
}

// Stop implements supervisor.Handle: SIGTERM (repeated during the
// grace), SIGKILL after it.
func (rn *run) Stop(ctx context.Context, grace time.Duration) (supervisor.Exit, bool, error) {
	st, stopped := rn.j.stopContainer(ctx, rn.s, grace)
	last := rn.output.finish()
	return st.exit(last), stopped, nil
}

// healthPoll is how often a container's health status is read.
const healthPoll = 250 * time.Millisecond

// WatchHealth implements supervisor.HealthWatcher by reading the
// container's health status (inspect) every healthPoll until it stops
// running or ctx ends.
func (hr *healthRun) WatchHealth(ctx context.Context, report func(supervisor.Health)) {
	t := time.NewTicker(healthPoll)
	defer t.Stop()
	last := supervisor.Health(255)
	for {
		ictx, cancel := context.WithTimeout(ctx, engineTimeout)
		info, err := hr.j.r.cli.ContainerInspect(ictx, hr.id)
		cancel()
		switch {
		case ctx.Err() != nil:
			return
		case client.IsErrNotFound(err):
			return
		case err == nil && info.State != nil:
			if !info.State.Running {
				return
			}
			if h := healthOf(info.State.Health); h != last {
				last = h
				report(h)
			}
		}
		select {
		case <-t.C:
		case <-ctx.Done():
			return
		}
	}
}

// healthOf maps Docker's health status to the supervisor's.
func healthOf(h *container.Health) supervisor.Health {
	if h == nil {
		return supervisor.HealthNone // the engine runs no healthcheck for it
	}
	switch h.Status {
	case container.Healthy:
		return supervisor.HealthHealthy
	case container.Unhealthy:
		return supervisor.HealthUnhealthy
	case container.NoHealthcheck:
		return supervisor.HealthNone
	}
	return supervisor.HealthStarting
}

// waitExit waits until container id is not running and returns how it
// ended. A container that no longer exists is reported as gone.
func (j *job) waitExit(ctx context.Context, id string) (exitState, error) {
	waitC, errC := j.r.cli.ContainerWait(ctx, id, container.WaitConditionNotRunning)
	select {
	case <-waitC:
	case err := <-errC:
		if client.IsErrNotFound(err) {
			return exitState{Gone: true}, nil
		}
		return exitState{}, err
	}
	return j.inspectExit(ctx, id)
}

// inspectExit reads the exit of a container that is not running.
func (j *job) inspectExit(ctx context.Context, id string) (exitState, error) {
	ctx, cancel := context.WithTimeout(ctx, engineTimeout)
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

// stopContainer stops s's container if it runs and reports whether it
// was running, with its exit.
func (j *job) stopContainer(ctx context.Context, s *service, grace time.Duration) (exitState, bool) {
	// Stops run even when the runtime shuts down meanwhile: a half-done
	// stop is finished by the next worker, but finishing it now is better.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), grace+engineTimeout)
	defer cancel()
	info, err := j.r.cli.ContainerInspect(ctx, s.id)
	if err != nil && !client.IsErrNotFound(err) {
		// Taken as not running: Teardown force-removes the project's
		// containers, which ends this one too.
		s.log.Warn("inspecting the container before stopping it; taking it as stopped", "container", shortID(s.id), "error", err)
	}
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
	st, err := j.inspectExit(ctx, s.id)
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
func (j *job) down(ctx context.Context) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), engineTimeout)
	defer cancel()
	note := "removing containers"
	if j.network != "" {
		note += " and network " + j.network
	}
	j.compose(stageDown, note)
	if err := j.removeContainers(ctx); err != nil {
		j.log.Error("removing the project's containers", "error", err)
	}
	if j.network != "" {
		j.r.removeNetwork(ctx, j.network)
	}
	if j.stack != nil {
		for _, n := range j.stack.Networks {
			j.r.removeNetwork(ctx, stackNetworkName(j.project, n))
		}
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
