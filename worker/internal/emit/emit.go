// Package emit delivers a worker runtime's events on its Events channel
// with the rules of the worker.Runtime contract: lifecycle events block
// until received or the runtime shuts down; info events are dropped (and
// counted) when the channel is full. The process and the Docker runtimes
// share it.
package emit

import (
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/norsk-oss/norsk-manager/proto/commonpb"
	"github.com/norsk-oss/norsk-manager/worker"
)

// Emitter sends on Ch. Create it with New.
type Emitter struct {
	ch      chan worker.Event
	done    <-chan struct{}
	log     *slog.Logger
	dropped atomic.Uint64
}

// New returns an Emitter over a channel of buffer events; done is closed
// when the runtime shuts down (lifecycle sends then give up).
func New(buffer int, done <-chan struct{}, log *slog.Logger) *Emitter {
	return &Emitter{ch: make(chan worker.Event, buffer), done: done, log: log}
}

// Ch is the Events channel (never closed).
func (e *Emitter) Ch() <-chan worker.Event { return e.ch }

// Lifecycle delivers ev, blocking until it is received or done closes.
func (e *Emitter) Lifecycle(ev worker.Event) {
	select {
	case e.ch <- ev:
	case <-e.done:
		e.log.Warn("runtime shut down before a job event was delivered; the next worker reports the truth",
			"job_id", ev.Key.JobID, "role", ev.Key.Role, "event", ev.Kind.String())
	}
}

// Info delivers ev if there is room, else drops it (logging every 1000th
// drop).
func (e *Emitter) Info(ev worker.Event) {
	select {
	case e.ch <- ev:
	default:
		if n := e.dropped.Add(1); n == 1 || n%1000 == 0 {
			e.log.Warn("event channel full; dropping job info", "dropped", n)
		}
	}
}

// Compose returns a compose-stage job_info event for key.
func Compose(key worker.JobKey, stage commonpb.JobInfoComposeMessage_Stage, text string) worker.Event {
	ev := worker.NewInfo(key, time.Now())
	ev.Info.Message = &commonpb.JobInfoMessage_ComposeMessage{ComposeMessage: &commonpb.JobInfoComposeMessage{Stage: stage, Text: text}}
	return ev
}

// ContainerEvent returns a container_event job_info event for key: text
// (an exit, a health change, a line of output) about service svc.
func ContainerEvent(key worker.JobKey, svc, text string) worker.Event {
	ev := worker.NewInfo(key, time.Now())
	ev.Info.Message = &commonpb.JobInfoMessage_ContainerEvent{ContainerEvent: &commonpb.JobInfoContainerEvent{ServiceName: svc, Text: text}}
	return ev
}

// ServiceInfo returns a job_info event for key carrying m, one of the
// JobInfoMessage oneof wrappers for services (service_started,
// service_restarting, container_event); ok is false for anything else.
func ServiceInfo(key worker.JobKey, m any) (ev worker.Event, ok bool) {
	ev = worker.NewInfo(key, time.Now())
	switch v := m.(type) {
	case *commonpb.JobInfoMessage_ServiceStarted:
		ev.Info.Message = v
	case *commonpb.JobInfoMessage_ServiceRestarting:
		ev.Info.Message = v
	case *commonpb.JobInfoMessage_ContainerEvent:
		ev.Info.Message = v
	case *commonpb.JobInfoMessage_ComposeMessage:
		ev.Info.Message = v
	default:
		return ev, false
	}
	return ev, true
}
