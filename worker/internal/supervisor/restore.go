package supervisor

import (
	"fmt"
	"time"
)

// adopt is the start of a Restored job: it finishes what the record says
// was under way, or re-attaches every service that has not completed
// (Driver.Adopt). It returns false if the job ended.
func (j *Job) adopt() bool {
	// There is no start phase to cancel, but a Stop may have come before
	// the services were adopted (the Docker engine did not answer).
	grace, stopRequested := j.endStartPhase()
	rec := j.restored
	j.restored = nil
	// The line operators (and the runtimes' tests) know from before the
	// supervisor: the Docker runtime logged it when it re-adopted a project.
	j.log.Info("re-adopting job", "phase", rec.Phase)
	for _, s := range j.svcs {
		if s.completed {
			continue
		}
		h, err := j.cfg.Driver.Adopt(j.ctx, s.index)
		switch {
		case err != nil && rec.Phase == PhaseRunning:
			j.fail(fmt.Sprintf("service %q: %v", s.spec.Name, err))
			return false
		case err != nil:
			s.log.Info("service not adopted", "error", err)
		case h != nil:
			j.watch(s, h)
		case rec.Phase == PhaseRunning:
			s.restartAt = time.Now() // it was waiting for a restart
		}
	}
	j.log.Info("restored job", "phase", rec.Phase)
	switch rec.Phase {
	case PhaseStarting:
		j.fail("the worker restarted while the job was starting")
		return false
	case PhaseStopping:
		j.log.Info("finishing a stop begun by the previous worker")
		j.stop(rec.StopGrace)
		return false
	case PhaseFailing:
		j.fail(rec.FailReason)
		return false
	}
	if stopRequested {
		j.log.Info("stopping a restored job, as asked before its services were adopted")
		j.stop(grace)
		return false
	}
	j.persistOrLog()
	return true
}
