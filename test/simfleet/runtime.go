package simfleet

import (
	"context"
	"fmt"
	"sync"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/norsk-oss/norsk-manager/proto/workerpb"
	"github.com/norsk-oss/norsk-manager/worker"
)

// eventBuffer is the length of a simulated runtime's Events channel.
const eventBuffer = 64

// simRuntime is the worker.Runtime of one simulated node: a job "runs"
// from its Start to its Stop, and nothing is executed. It reports every
// start and stop to the fleet's ledger.
type simRuntime struct {
	node   string
	ledger *ledger
	events chan worker.Event
	// doneCh is closed by close: lifecycle sends give up. Only ever closed.
	doneCh    chan struct{}
	closeOnce sync.Once

	mu struct {
		sync.Mutex
		jobs map[worker.JobKey]*workerpb.WorkerJob // running, as started (or updated)
	}
}

var (
	_ worker.Runtime         = (*simRuntime)(nil)
	_ worker.InstanceStopper = (*simRuntime)(nil)
)

func newSimRuntime(node string, l *ledger) *simRuntime {
	r := &simRuntime{node: node, ledger: l, events: make(chan worker.Event, eventBuffer), doneCh: make(chan struct{})}
	r.mu.jobs = map[worker.JobKey]*workerpb.WorkerJob{}
	return r
}

// close makes blocked lifecycle sends give up (the agent has stopped
// draining Events). Idempotent.
func (r *simRuntime) close() { r.closeOnce.Do(func() { close(r.doneCh) }) }

// emit delivers a lifecycle event, blocking until the agent receives it or
// the runtime is closed (the worker.Runtime contract).
func (r *simRuntime) emit(ev worker.Event) {
	select {
	case r.events <- ev:
	case <-r.doneCh:
	}
}

// Start implements worker.Runtime: the job runs at once. A Start of a
// (job, role) already running here changes nothing and reports started
// again, as the contract says; the ledger counts it as a double start.
func (r *simRuntime) Start(ctx context.Context, job *workerpb.WorkerJob) (worker.PortMappings, error) {
	key := worker.KeyOf(job)
	if key.JobID == "" {
		return nil, fmt.Errorf("%w: no job id", worker.ErrInvalidJob)
	}
	r.mu.Lock()
	running, again := r.mu.jobs[key]
	if !again {
		running = proto.Clone(job).(*workerpb.WorkerJob)
		r.mu.jobs[key] = running
	}
	r.ledger.started(key, r.node, job.GetInstanceId())
	instance := running.GetInstanceId()
	r.mu.Unlock()
	r.emit(worker.Event{Kind: worker.EventStarted, Key: key, Instance: instance, Ports: worker.PortMappings{}})
	return worker.PortMappings{}, nil
}

// Stop implements worker.Runtime.
func (r *simRuntime) Stop(ctx context.Context, key worker.JobKey, grace time.Duration) error {
	return r.StopInstance(ctx, key, "", grace)
}

// StopInstance implements worker.InstanceStopper: the job stops at once;
// a (job, role) not running reports stopped with the id asked for.
func (r *simRuntime) StopInstance(_ context.Context, key worker.JobKey, instance string, _ time.Duration) error {
	r.mu.Lock()
	if j, ok := r.mu.jobs[key]; ok {
		instance = j.GetInstanceId()
		delete(r.mu.jobs, key)
		r.ledger.stopped(key, r.node)
	}
	r.mu.Unlock()
	r.emit(worker.Event{Kind: worker.EventStopped, Key: key, Instance: instance})
	return nil
}

// Update implements worker.Runtime.
func (r *simRuntime) Update(_ context.Context, job *workerpb.WorkerJob) error {
	key := worker.KeyOf(job)
	r.mu.Lock()
	defer r.mu.Unlock()
	old, ok := r.mu.jobs[key]
	if !ok {
		return fmt.Errorf("%w: %s", worker.ErrJobNotRunning, key)
	}
	j := proto.Clone(job).(*workerpb.WorkerJob)
	j.InstanceId = old.GetInstanceId()
	r.mu.jobs[key] = j
	return nil
}

// List implements worker.Runtime.
func (r *simRuntime) List() []worker.RunningJob {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]worker.RunningJob, 0, len(r.mu.jobs))
	for _, j := range r.mu.jobs {
		out = append(out, worker.RunningJob{Job: proto.Clone(j).(*workerpb.WorkerJob), Ports: worker.PortMappings{}})
	}
	return out
}

// Restore implements worker.Runtime: a simulated node starts empty.
func (r *simRuntime) Restore(context.Context) error { return nil }

// Events implements worker.Runtime.
func (r *simRuntime) Events() <-chan worker.Event { return r.events }
