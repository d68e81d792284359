package process

import (
	"os"
	"time"

	"github.com/norsk-oss/norsk-manager/worker"
	"golang.org/x/sys/unix"
)

const (
	sigTerm = unix.SIGTERM
	sigKill = unix.SIGKILL
	// killTimeout bounds the wait for a process group after SIGKILL (a
	// process in uninterruptible sleep may take a while).
	killTimeout = 5 * time.Second
	// startWait bounds the wait for a just-spawned service's command to
	// exist before it is sent SIGTERM (see proc.waitStarted).
	startWait = time.Second
)

// stop stops every service in reverse start order and finishes the job.
// If the runtime shuts down midway, the record says "stopping" and the
// next runtime finishes the stop.
func (j *job) stop(grace time.Duration) {
	j.phase, j.stopGrace = phaseStopping, grace
	if err := j.persist(); err != nil {
		j.log.Error("saving job record", "error", err)
	}
	j.log.Info("stopping job", "grace", grace)
	j.compose(stageStop, "stopping services")
	if !j.stopServices(grace) {
		return
	}
	j.finish(worker.EventStopped, "")
}

// fail stops the remaining services (FailStopGrace each) and finishes the
// job as failed with reason.
func (j *job) fail(reason string) {
	j.phase, j.failReason = phaseStopping, reason
	if err := j.persist(); err != nil {
		j.log.Error("saving job record", "error", err)
	}
	j.log.Warn("job failed; stopping its services", "reason", reason)
	j.compose(stageStop, "stopping services: "+reason)
	if !j.stopServices(j.r.cfg.FailStopGrace) {
		return
	}
	j.finish(worker.EventFailed, reason)
}

// stopServices stops the running services in reverse start order. It
// returns false if the runtime shut down first.
func (j *job) stopServices(grace time.Duration) bool {
	for i := len(j.svcs) - 1; i >= 0; i-- {
		s := j.svcs[i]
		s.restartAt = time.Time{}
		if s.cur == nil {
			continue
		}
		if !j.stopService(s, grace) {
			return false
		}
	}
	return true
}

// stopService sends SIGTERM to s's process group, SIGKILL after grace, and
// waits for the exit.
func (j *job) stopService(s *service, grace time.Duration) bool {
	p := s.cur
	s.log.Info("stopping service", "pid", p.pid, "grace", grace)
	if grace <= 0 {
		// No grace: kill at once.
		if err := p.signalGroup(sigKill); err != nil {
			s.log.Warn("killing service", "error", err)
		}
		if !j.waitProc(p, killTimeout) {
			return j.abandon(s, p)
		}
		j.afterExit(s, p)
		return true
	}
	p.waitStarted(p.done, startWait)
	if err := p.signalGroup(sigTerm); err != nil {
		s.log.Warn("stopping service", "error", err)
	}
	if !j.waitProc(p, grace) {
		if j.shuttingDown() {
			return false
		}
		s.log.Warn("service did not stop within its grace period; killing it", "grace", grace)
		j.containerEvent(s, "did not stop within "+grace.String()+"; sending SIGKILL")
		if err := p.signalGroup(sigKill); err != nil {
			s.log.Warn("killing service", "error", err)
		}
		if !j.waitProc(p, killTimeout) {
			return j.abandon(s, p)
		}
	}
	j.afterExit(s, p)
	return true
}

// abandon gives up on a process that did not exit after SIGKILL (or
// reports false at shutdown, leaving the stop to the next runtime).
func (j *job) abandon(s *service, p *proc) bool {
	if j.shuttingDown() {
		return false
	}
	s.log.Error("service did not exit after SIGKILL; abandoning it", "pid", p.pid)
	s.cur = nil
	return true
}

// waitProc waits up to d for p to exit, reading output meanwhile. False on
// timeout or shutdown.
func (j *job) waitProc(p *proc, d time.Duration) bool {
	timer := time.NewTimer(d)
	defer timer.Stop()
	ticker := time.NewTicker(j.r.cfg.PollInterval)
	defer ticker.Stop()
	for {
		select {
		case <-p.done:
			return true
		case now := <-ticker.C:
			j.pollTails(now)
		case <-timer.C:
			return false
		case <-j.r.shutdownCh:
			return false
		}
	}
}

func (j *job) shuttingDown() bool {
	select {
	case <-j.r.shutdownCh:
		return true
	default:
		return false
	}
}

// finish removes the job's directory, forgets the job, and reports kind
// (EventStopped or EventFailed with reason).
func (j *job) finish(kind worker.EventKind, reason string) {
	for _, s := range j.svcs {
		s.tail.close()
	}
	close(j.quitCh)
	if err := os.RemoveAll(j.paths.root); err != nil {
		j.log.Error("removing job directory", "dir", j.paths.root, "error", err)
	}
	j.r.removeJob(j)
	j.compose(stageDown, "removed the job's directory")
	j.log.Info("job finished", "event", kind.String(), "reason", reason)
	j.r.emitLifecycle(worker.Event{Kind: kind, Key: j.key, Instance: j.instance(), Reason: reason})
	close(j.doneCh)
}

// runRestored is the goroutine of a job re-adopted from its record.
func (j *job) runRestored(rec *record) {
	defer j.r.wg.Done()
	close(j.startedCh)
	j.phase, j.stopGrace, j.failReason = rec.Phase, rec.StopGrace, rec.FailReason
	type dead struct {
		s  *service
		st exitStatus
	}
	var deaths []dead
	now := time.Now()
	adopted := 0
	for i, s := range j.svcs {
		sr := rec.Services[i]
		s.restarts, s.completed = sr.Restarts, sr.Completed
		s.tail.skipToEnd()
		switch {
		case sr.PID > 0:
			if p, ok := adopt(sr.PID, sr.StartTicks, s.exitFile); ok {
				s.cur = p
				j.watch(p)
				adopted++
				s.log.Info("re-adopted service", "pid", p.pid)
				continue
			}
			deaths = append(deaths, dead{s, statusFromFile(s.exitFile)})
		case !s.completed && j.phase == phaseRunning:
			s.restartAt = now // it was waiting for a restart
		}
	}
	j.log.Info("restored job", "phase", j.phase, "adopted", adopted, "exited", len(deaths))
	switch j.phase {
	case phaseStarting:
		j.fail("the worker restarted while the job was starting")
		return
	case phaseStopping:
		if j.failReason != "" {
			j.fail(j.failReason)
		} else {
			j.stop(j.stopGrace)
		}
		return
	}
	for _, d := range deaths {
		d.s.log.Info("service exited while no worker was watching", "status", d.st.String())
		j.containerEvent(d.s, d.st.String())
		if j.applyPolicy(d.s, d.st) {
			return
		}
	}
	if err := j.persist(); err != nil {
		j.log.Error("saving job record", "error", err)
	}
	j.loop()
}
