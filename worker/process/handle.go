package process

import (
	"context"
	"time"

	"golang.org/x/sys/unix"

	"github.com/norsk-oss/norsk-manager/worker/internal/supervisor"
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

// procRun is one run of a service: its process group (a
// supervisor.Handle).
type procRun struct {
	j *job
	s *service
	p *proc
}

// Wait implements supervisor.Handle: it blocks until the process exits
// (pidfd, else /proc polling), kills what the service left in its group
// (a child's unreaped zombie still pins the pgid, as a container's end
// would), and collects the status.
func (pr *procRun) Wait(ctx context.Context) (supervisor.Exit, error) {
	p := pr.p
	if !p.waitExit(pr.j.r.shutdownCh, ctx.Done(), pr.j.r.waker.fd(), pr.j.r.cfg.PollInterval) {
		p.closePidfd()
		return supervisor.Exit{}, errNotExited
	}
	if p.child {
		_ = p.signalGroup(sigKill)
	}
	p.status = p.collect()
	close(p.done)
	return exitOf(p.status), nil
}

// Stop implements supervisor.Handle: SIGTERM to the process group once
// its command runs, SIGKILL after grace (at once with grace 0), and the
// wait for the exit (reading output meanwhile). supervisor.ErrShutdown if
// the runtime shuts down first; a process that does not exit after
// SIGKILL is abandoned (logged; reported as not running).
func (pr *procRun) Stop(ctx context.Context, grace time.Duration) (supervisor.Exit, bool, error) {
	j, s, p := pr.j, pr.s, pr.p
	if grace > 0 {
		p.waitStarted(p.done, startWait)
		if err := p.signalGroup(sigTerm); err != nil {
			s.log.Warn("stopping service", "error", err)
		}
		if j.waitProc(p, grace) {
			return exitOf(p.status), true, nil
		}
		if j.shuttingDown() {
			return supervisor.Exit{}, false, supervisor.ErrShutdown
		}
		s.log.Warn("service did not stop within its grace period; killing it", "grace", grace)
		j.containerEvent(s.spec.Name, "did not stop within "+grace.String()+"; sending SIGKILL")
	}
	if err := p.signalGroup(sigKill); err != nil {
		s.log.Warn("killing service", "error", err)
	}
	if j.waitProc(p, killTimeout) {
		return exitOf(p.status), true, nil
	}
	if j.shuttingDown() {
		return supervisor.Exit{}, false, supervisor.ErrShutdown
	}
	s.log.Error("service did not exit after SIGKILL; abandoning it", "pid", p.pid)
	s.cur = nil
	return supervisor.Exit{}, false, nil
}

// deadRun is a recorded process that exited while no worker watched it.
type deadRun struct{ st exitStatus }

// Wait implements supervisor.Handle: the status from the exit file, at once.
func (d *deadRun) Wait(ctx context.Context) (supervisor.Exit, error) { return exitOf(d.st), nil }

// Stop implements supervisor.Handle: there is nothing to stop.
func (d *deadRun) Stop(ctx context.Context, grace time.Duration) (supervisor.Exit, bool, error) {
	return supervisor.Exit{}, false, nil
}

func exitOf(st exitStatus) supervisor.Exit {
	return supervisor.Exit{Success: st.success(), Text: st.String()}
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
			j.Poll(now)
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
