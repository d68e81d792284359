package supervisor

import (
	"fmt"
	"time"

	"github.com/norsk-oss/norsk-manager/worker"
)

// startAll runs Driver.Prepare, persists the job (phase starting: a
// restarted worker cleans up; a driver that creates what must be cleaned
// up persists earlier itself, with Job.Persist), and launches the services in order, each once
// its dependencies meet their conditions. On failure the job is failed
// (or stopped, if a Stop came) before it returns.
func (j *Job) startAll() error {
	fail := func(err error) error {
		if grace, ok := j.endStartPhase(); ok {
			j.stop(grace)
			return ErrStoppedWhileStarting
		}
		j.fail(err.Error())
		return err
	}
	if err := j.cfg.Driver.Prepare(j.startCtx); err != nil {
		return fail(err)
	}
	if err := j.persist(); err != nil {
		return fail(err)
	}
	j.compose(stageStart, j.cfg.StartNote)
	for _, s := range j.svcs {
		if err := j.awaitDeps(s); err != nil {
			return fail(err)
		}
		if err := j.launch(j.startCtx, s); err != nil {
			return fail(fmt.Errorf("start service %q: %w", s.spec.Name, err))
		}
	}
	if err := j.awaitHealthy(); err != nil {
		return fail(err)
	}
	if grace, ok := j.endStartPhase(); ok {
		j.stop(grace)
		return ErrStoppedWhileStarting
	}
	j.phase = PhaseRunning
	j.persistOrLog()
	j.log.Info("job started", "services", len(j.svcs))
	// Listed (Started) before job_started is sent: whoever sees the event
	// finds the job in List.
	j.startedOnce.Do(func() { close(j.startedCh) })
	j.cfg.Emit.Lifecycle(worker.Event{Kind: worker.EventStarted, Key: j.cfg.Key, Instance: j.instance(), Ports: j.cfg.Ports()})
	return nil
}

// endStartPhase marks the start phase as ended; it returns the grace of a
// Stop that came during it, if one did.
func (j *Job) endStartPhase() (time.Duration, bool) {
	j.startMu.Lock()
	defer j.startMu.Unlock()
	j.startDone = true
	if j.pendingStop == nil {
		return 0, false
	}
	return *j.pendingStop, true
}

// awaitDeps waits until every dependency of s meets its condition. Exits
// of other services meanwhile are recorded and their restart policy is
// applied once the start phase has ended (handleDeferred). The error
// names both services; a Stop ends the wait with the start context's
// error.
func (j *Job) awaitDeps(s *service) error {
	for _, d := range s.spec.DependsOn {
		dep := j.byName(d.Service)
		if dep == nil {
			return fmt.Errorf("service %q: dependency %q is not a service of the job", s.spec.Name, d.Service)
		}
		if d.Condition == ConditionStarted {
			continue // met: dependencies are launched first
		}
		j.log.Info("waiting for a dependency", "service", s.spec.Name, "dependency", dep.spec.Name, "condition", d.Condition.String())
		j.compose(stageStart, fmt.Sprintf("service %q waits for %q to be %s", s.spec.Name, dep.spec.Name, conditionText(d.Condition)))
		for {
			met, err := depMet(s, dep, d.Condition)
			if err != nil {
				return err
			}
			if met {
				break
			}
			if err := j.waitStartEvent(); err != nil {
				return err
			}
		}
	}
	return nil
}

// awaitHealthy waits, once every service is launched, until each one
// with a healthcheck (its handle is a HealthWatcher) is healthy, so that
// job_started means what `docker compose up --wait` means: a move or a
// rolling update hands over to a stack that passes its healthchecks, not
// one whose containers merely started (docs/design/worker-supervisor.md
// §2). A service that turns unhealthy or exits first fails the job naming
// it; a Stop ends the wait. Services without a healthcheck (every legacy
// service) are not waited for. Bounded by the healthchecks themselves:
// Docker reports unhealthy after start_period plus retries × interval.
func (j *Job) awaitHealthy() error {
	for _, s := range j.svcs {
		if s.health == HealthNone || s.health == HealthHealthy {
			continue
		}
		j.log.Info("waiting for a service to be healthy", "service", s.spec.Name)
		j.compose(stageStart, fmt.Sprintf("waiting for service %q to be healthy", s.spec.Name))
		for s.health != HealthHealthy {
			switch {
			case !s.running:
				return fmt.Errorf("service %q %s before it was healthy", s.spec.Name, s.exitText)
			case s.health == HealthUnhealthy:
				return fmt.Errorf("service %q is unhealthy", s.spec.Name)
			}
			if err := j.waitStartEvent(); err != nil {
				return err
			}
		}
	}
	return nil
}

// depMet reports whether dep meets cond for s, or the error that fails
// the job because it never will.
func depMet(s, dep *service, cond Condition) (bool, error) {
	switch cond {
	case ConditionHealthy:
		switch {
		case dep.running && dep.health == HealthHealthy:
			return true, nil
		case dep.running && dep.health == HealthUnhealthy:
			return false, fmt.Errorf("service %q: dependency %q is unhealthy", s.spec.Name, dep.spec.Name)
		case dep.running && dep.health == HealthNone:
			return false, fmt.Errorf("service %q: dependency %q has no healthcheck (depends_on condition healthy)", s.spec.Name, dep.spec.Name)
		case !dep.running:
			return false, fmt.Errorf("service %q: dependency %q %s before it was healthy", s.spec.Name, dep.spec.Name, dep.exitText)
		}
	case ConditionCompletedSuccessfully:
		switch {
		case dep.running:
		case dep.exitedOK:
			return true, nil
		default:
			return false, fmt.Errorf("service %q: dependency %q did not complete successfully: it %s", s.spec.Name, dep.spec.Name, dep.exitText)
		}
	}
	return false, nil
}

// waitStartEvent waits during the start phase for a health change or an
// exit and records it; a Stop (the start context ending) is an error.
func (j *Job) waitStartEvent() error {
	select {
	case hr := <-j.healthCh:
		j.onHealth(hr)
	case ex := <-j.exitCh:
		if ex.run == ex.svc.run && ex.svc.running {
			ex.ex = j.exited(ex.svc, ex.ex)
			j.deferred = append(j.deferred, ex)
		}
	case <-j.startCtx.Done():
		return fmt.Errorf("waiting for dependencies: %w", j.startCtx.Err())
	}
	return nil
}

// handleDeferred applies the restart policy to the exits seen during the
// start phase.
func (j *Job) handleDeferred() {
	for _, ex := range j.deferred {
		if j.applyPolicy(ex.svc, ex.ex) {
			break
		}
	}
	j.deferred = nil
}

func (j *Job) byName(name string) *service {
	for _, s := range j.svcs {
		if s.spec.Name == name {
			return s
		}
	}
	return nil
}

// conditionText reads a condition in a sentence ("… to be healthy").
func conditionText(c Condition) string {
	if c == ConditionCompletedSuccessfully {
		return "completed successfully"
	}
	return c.String()
}
