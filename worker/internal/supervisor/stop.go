package supervisor

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/norsk-oss/norsk-manager/proto/commonpb"
	"github.com/norsk-oss/norsk-manager/worker"
	"github.com/norsk-oss/norsk-manager/worker/internal/emit"
)

// Compose stages reported as job_info.
const (
	stageStart = commonpb.JobInfoComposeMessage_START
	stageStop  = commonpb.JobInfoComposeMessage_STOP
)

// stop stops every service (compose STOP), tears the job down and reports
// job_stopped. If the runtime shuts down midway, the record says
// "stopping" and the next worker finishes the stop.
func (j *Job) stop(grace time.Duration) {
	j.phase, j.stopGrace = PhaseStopping, grace
	j.persistOrLog()
	j.log.Info("stopping job", "grace", grace)
	if !j.stopAll(grace) {
		j.detach()
		return
	}
	j.teardown()
	j.log.Info("job stopped")
	j.finish(worker.EventStopped, "")
}

// fail stops what runs of the job (FailStopGrace), tears it down and
// reports job_failed with reason.
func (j *Job) fail(reason string) {
	j.log.Warn("job failed", "reason", reason)
	j.phase, j.failReason = PhaseFailing, reason
	j.persistOrLog()
	if !j.stopAll(j.cfg.FailStopGrace) {
		j.detach()
		return
	}
	j.teardown()
	j.finish(worker.EventFailed, reason)
}

// stopAll stops the running services in reverse start order. It returns
// false if the runtime shut down first.
func (j *Job) stopAll(grace time.Duration) bool {
	n := 0
	for _, s := range j.svcs {
		if s.running {
			n++
		}
	}
	j.compose(stageStop, fmt.Sprintf("stopping %d services (grace %s)", n, grace))
	for i := len(j.svcs) - 1; i >= 0; i-- {
		s := j.svcs[i]
		s.restartAt = time.Time{}
		if !s.running || s.h == nil {
			continue
		}
		s.log.Info("stopping service", "grace", grace)
		// Stops run on even when the job's context ends: a half-done stop
		// is finished by the next worker, but finishing it now is better.
		ex, ran, err := s.h.Stop(context.WithoutCancel(j.ctx), grace)
		if errors.Is(err, ErrShutdown) {
			return false
		}
		if err != nil {
			s.log.Warn("stopping the service", "error", err)
		}
		if ran {
			j.exited(s, ex)
		} else {
			s.running, s.h = false, nil
		}
	}
	return true
}

// teardown runs Driver.Teardown (compose DOWN).
func (j *Job) teardown() {
	j.cfg.Driver.Teardown(context.WithoutCancel(j.ctx))
}

// finish reports the job's end and removes it from the runtime.
func (j *Job) finish(kind worker.EventKind, reason string) {
	close(j.quitCh)
	j.cancel()
	if j.cfg.OnEnd != nil {
		j.cfg.OnEnd()
	}
	j.cfg.Emit.Lifecycle(worker.Event{Kind: kind, Key: j.cfg.Key, Instance: j.instance(), Reason: reason})
	close(j.doneCh)
}

// Persist hands the job's record to Driver.Persist now. Call it only from
// a Driver method (the job's goroutine), like Prepare before it creates
// what a restarted worker must clean up.
func (j *Job) Persist() error { return j.persist() }

// persist hands the job's record to the driver.
func (j *Job) persist() error {
	rec := Record{Phase: j.phase, StopGrace: j.stopGrace, FailReason: j.failReason, Def: j.Def()}
	for _, s := range j.svcs {
		rec.Services = append(rec.Services, ServiceRecord{Restarts: s.restarts, Completed: s.completed})
	}
	return j.cfg.Driver.Persist(rec)
}

func (j *Job) persistOrLog() {
	if err := j.persist(); err != nil {
		j.log.Error("saving job record", "error", err)
	}
}

// info emits a job_info message; m is one of the JobInfoMessage oneof
// wrappers.
func (j *Job) info(m any) {
	if ev, ok := emit.ServiceInfo(j.cfg.Key, m); ok {
		j.cfg.Emit.Info(ev)
	}
}

func (j *Job) compose(stage commonpb.JobInfoComposeMessage_Stage, text string) {
	j.cfg.Emit.Info(emit.Compose(j.cfg.Key, stage, text))
}

func (j *Job) containerEvent(s *service, text string) {
	j.cfg.Emit.Info(emit.ContainerEvent(j.cfg.Key, s.spec.Name, text))
}
