package supervisor

import (
	"context"
	"fmt"
	"time"

	"github.com/norsk-oss/norsk-manager/proto/commonpb"
	"github.com/norsk-oss/norsk-manager/worker"
	"github.com/norsk-oss/norsk-manager/worker/internal/svcplan"
)

// fastPoll is how soon Poller.Poll is called again after it said busy.
const fastPoll = time.Millisecond

// Run is the job's goroutine: the start phase (or, for a Restored job,
// the adoption), then the loop until the job ends or the runtime shuts
// down. It returns once the job's watcher goroutines have returned.
func (j *Job) Run() {
	defer j.wg.Wait()
	defer j.cancel()
	if j.restored != nil {
		if !j.adopt() {
			return
		}
	} else {
		if err := j.startAll(); err != nil {
			j.startErr = err
			j.startedOnce.Do(func() { close(j.startedCh) })
			return
		}
	}
	j.handleDeferred()
	if j.ended() {
		return
	}
	j.loop()
}

// ended reports whether the job has ended (finish ran).
func (j *Job) ended() bool {
	select {
	case <-j.quitCh:
		return true
	default:
		return false
	}
}

// loop serves the job until it ends or the runtime shuts down. Each case
// delegates to a handler; handlers that end the job return true.
func (j *Job) loop() {
	var pollC, fastC <-chan time.Time
	poller, _ := j.cfg.Driver.(Poller)
	if poller != nil {
		t := time.NewTicker(poller.PollInterval())
		defer t.Stop()
		pollC = t.C
	}
	for {
		restartC, stopTimer := j.restartTimer()
		ended := false
		select {
		case ex := <-j.exitCh:
			ended = j.onExit(ex)
		case hr := <-j.healthCh:
			j.onHealth(hr)
		case <-restartC:
			ended = j.onRestartDue()
		case now := <-pollC:
			fastC = j.poll(poller, now)
		case now := <-fastC:
			fastC = j.poll(poller, now)
		case grace := <-j.stopCh:
			j.stop(grace)
			ended = true
		case req := <-j.updateCh:
			req.reply <- j.onUpdate(req)
		case reply := <-j.againCh:
			j.onStartAgain(reply)
		case <-j.cfg.Done:
			j.detach()
			ended = true
		}
		stopTimer()
		if ended {
			return
		}
	}
}

func (j *Job) poll(p Poller, now time.Time) <-chan time.Time {
	if p.Poll(now) {
		return time.After(fastPoll)
	}
	return nil
}

// detach leaves the services running at shutdown; the record is current.
func (j *Job) detach() {
	if d, ok := j.cfg.Driver.(Detacher); ok {
		d.Detach()
	}
}

// launch starts a run of s (Driver.Launch) and its watchers.
func (j *Job) launch(ctx context.Context, s *service) error {
	h, err := j.cfg.Driver.Launch(ctx, s.index)
	if err != nil {
		return err
	}
	j.watch(s, h)
	j.info(&commonpb.JobInfoMessage_ServiceStarted{ServiceStarted: &commonpb.JobInfoServiceStarted{ServiceName: s.spec.Name}})
	// Also during the start phase: the record must name every run (a
	// pid), so that a restarted worker can stop what was launched. There a
	// record that cannot be written fails the start; for a restart of a
	// running job it is logged, and the next change writes it again.
	err = j.persist()
	if err != nil && j.phase == PhaseRunning {
		j.log.Error("saving job record", "error", err)
		return nil
	}
	return err
}

// watch makes h s's current run and starts the goroutines that report its
// exit and its health changes.
func (j *Job) watch(s *service, h Handle) {
	s.h, s.run, s.running, s.exitText = h, s.run+1, true, ""
	s.health = HealthNone
	run := s.run
	j.wg.Add(1)
	go func() {
		defer j.wg.Done()
		ex, err := h.Wait(j.ctx)
		if err != nil {
			return // the job ended or the runtime shuts down
		}
		select {
		case j.exitCh <- exitReport{svc: s, run: run, ex: ex}:
		case <-j.ctx.Done():
		}
	}()
	hw, ok := h.(HealthWatcher)
	if !ok {
		return
	}
	s.health = HealthStarting
	j.wg.Add(1)
	go func() {
		defer j.wg.Done()
		hw.WatchHealth(j.ctx, func(st Health) {
			select {
			case j.healthCh <- healthReport{svc: s, run: run, h: st}:
			case <-j.ctx.Done():
			}
		})
	}()
}

// onHealth records a health change of a service's current run.
func (j *Job) onHealth(hr healthReport) {
	s := hr.svc
	if hr.run != s.run || !s.running || s.health == hr.h {
		return
	}
	s.health = hr.h
	s.log.Info("service health", "status", hr.h.String())
	j.containerEvent(s, "health: "+hr.h.String())
}

// onExit handles the end of a run of a service.
func (j *Job) onExit(ex exitReport) bool {
	s := ex.svc
	if ex.run != s.run || !s.running {
		return false // a run already handled (stopped)
	}
	return j.applyPolicy(s, j.exited(s, ex.ex))
}

// exited records that s's current run ended with ex and reports it; it
// returns ex as the driver's ExitObserver completed it.
func (j *Job) exited(s *service, ex Exit) Exit {
	if o, ok := j.cfg.Driver.(ExitObserver); ok {
		ex = o.Exited(s.index, ex)
	}
	s.running, s.h = false, nil
	s.exitedOK, s.exitText = ex.Success, ex.Text
	s.log.Info("service exited", "status", ex.Text)
	j.containerEvent(s, ex.Text)
	return ex
}

// applyPolicy decides, after s ended with ex, whether s is complete, is
// restarted (after a backoff) or fails the job. It returns true if the
// job ended.
func (j *Job) applyPolicy(s *service, ex Exit) bool {
	if ex.Fatal != "" {
		j.fail(ex.Fatal)
		return true
	}
	now := time.Now()
	s.restarts = svcplan.Prune(s.restarts, now.Add(-s.spec.RestartPeriod))
	switch svcplan.Decide(s.spec.Restart, ex.Success, s.restarts, s.spec.RestartCount, s.spec.RestartPeriod, now) {
	case svcplan.Complete:
		return j.complete(s)
	case svcplan.Fail:
		if s.spec.Restart == commonpb.Service_NEVER {
			j.fail(fmt.Sprintf("service %q %s (restart policy NEVER)%s", s.spec.Name, ex.Text, ex.Detail))
		} else {
			j.fail(fmt.Sprintf("service %q %s and was already restarted %d times within %s, the most its restart policy (%s, restart_count %d) allows%s",
				s.spec.Name, ex.Text, len(s.restarts), s.spec.RestartPeriod, s.spec.Restart, s.spec.RestartCount, ex.Detail))
		}
		return true
	}
	delay := svcplan.Backoff(j.cfg.RestartBackoff, j.cfg.MaxRestartBackoff, len(s.restarts))
	s.restartAt = now.Add(delay)
	s.log.Info("restarting service", "in", delay, "restarts_in_window", len(s.restarts))
	j.info(&commonpb.JobInfoMessage_ServiceRestarting{ServiceRestarting: &commonpb.JobInfoServiceRestarting{ServiceName: s.spec.Name}})
	j.persistOrLog()
	return false
}

// complete marks s done; when every service is, the job has finished.
func (j *Job) complete(s *service) bool {
	s.completed = true
	for _, o := range j.svcs {
		if !o.completed {
			j.persistOrLog()
			return false
		}
	}
	j.compose(stageStop, "every service completed")
	j.teardown()
	j.finish(worker.EventStopped, "")
	return true
}

// restartTimer returns a channel that fires at the earliest pending
// restart (nil if none) and a function releasing the timer.
func (j *Job) restartTimer() (<-chan time.Time, func()) {
	var next time.Time
	for _, s := range j.svcs {
		if !s.restartAt.IsZero() && (next.IsZero() || s.restartAt.Before(next)) {
			next = s.restartAt
		}
	}
	if next.IsZero() {
		return nil, func() {}
	}
	t := time.NewTimer(time.Until(next))
	return t.C, func() { t.Stop() }
}

// onRestartDue restarts every service whose backoff has passed.
func (j *Job) onRestartDue() bool {
	now := time.Now()
	for _, s := range j.svcs {
		if s.restartAt.IsZero() || s.restartAt.After(now) {
			continue
		}
		s.restartAt = time.Time{}
		s.restarts = append(s.restarts, now)
		if err := j.launch(j.ctx, s); err != nil {
			j.fail(fmt.Sprintf("restart service %q: %v", s.spec.Name, err))
			return true
		}
	}
	return false
}

// onUpdate stores the new definition; the job keeps the instance id it
// was started with.
func (j *Job) onUpdate(req updateRequest) error {
	j.mu.Lock()
	req.def.InstanceId = j.mu.def.GetInstanceId()
	j.mu.def = req.def
	j.mu.Unlock()
	return j.persist()
}

func (j *Job) onStartAgain(reply chan<- worker.PortMappings) {
	ports := j.cfg.Ports()
	j.cfg.Emit.Lifecycle(worker.Event{Kind: worker.EventStarted, Key: j.cfg.Key, Instance: j.instance(), Ports: ports})
	reply <- ports
}
