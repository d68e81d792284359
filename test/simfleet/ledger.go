package simfleet

import (
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/norsk-oss/norsk-manager/worker"
)

// maxViolations bounds the violations kept (each is also counted).
const maxViolations = 100

// ledger is the fleet-wide record of what runs where. Safe for concurrent
// use; every simulated runtime reports to it under its own lock.
type ledger struct {
	mu struct {
		sync.Mutex
		// running holds, per (job, role), the nodes it runs on now with
		// the instance id each was started with.
		running map[worker.JobKey]map[string]string
		starts  int
		stops   int
		repeats int
		// startTimes holds when each start was received, in order.
		startTimes []time.Time
		// first holds when each (job, role) was first started.
		first      map[worker.JobKey]time.Time
		violations []string
		nViolation int
	}
}

func newLedger() *ledger {
	l := &ledger{}
	l.mu.running = map[worker.JobKey]map[string]string{}
	l.mu.first = map[worker.JobKey]time.Time{}
	return l
}

// started records a provision of key on node (instance: its instance id).
// The provision of the instance already running on this node, received
// again, is a repeat (the worker.Runtime contract makes it change
// nothing). Any other start of a key that runs somewhere — another
// instance, or another node — is a violation: the manager started a
// second instance of a (job, role) while one runs.
func (l *ledger) started(key worker.JobKey, node, instance string) {
	now := time.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	l.mu.starts++
	l.mu.startTimes = append(l.mu.startTimes, now)
	if _, ok := l.mu.first[key]; !ok {
		l.mu.first[key] = now
	}
	on := l.mu.running[key]
	if on == nil {
		l.mu.running[key] = map[string]string{node: instance}
		return
	}
	if old, ok := on[node]; ok && len(on) == 1 && old == instance {
		l.mu.repeats++
		return
	}
	l.mu.nViolation++
	if len(l.mu.violations) < maxViolations {
		l.mu.violations = append(l.mu.violations, fmt.Sprintf("%s: start of instance %q on node %s at %s while it runs as %v (node: instance)",
			key, instance, node, now.Format(time.StampMicro), on))
	}
	if _, ok := on[node]; !ok {
		on[node] = instance
	}
}

// stopped records that key stopped on node.
func (l *ledger) stopped(key worker.JobKey, node string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.mu.stops++
	on := l.mu.running[key]
	delete(on, node)
	if len(on) == 0 {
		delete(l.mu.running, key)
	}
}

// Stats is a snapshot of what the fleet received.
type Stats struct {
	// Starts and Stops count the provision_job and stop_job that reached a
	// simulated runtime (a stop of a job not running is not counted).
	Starts, Stops int
	// Repeats counts the provisions of an instance received again by the
	// node it runs on (same instance id): harmless by the worker.Runtime
	// contract, but each is a provision the manager sent twice.
	Repeats int
	// Running is the number of (job, role) running on some node now.
	Running int
	// Violations counts the starts of another instance of a (job, role),
	// or on another node, received while it ran; ViolationLog describes
	// the first 100.
	Violations   int
	ViolationLog []string
	// StartTimes are the arrival times of every start, in order.
	StartTimes []time.Time
}

func (l *ledger) stats() Stats {
	l.mu.Lock()
	defer l.mu.Unlock()
	return Stats{Starts: l.mu.starts, Stops: l.mu.stops, Repeats: l.mu.repeats, Running: len(l.mu.running), Violations: l.mu.nViolation,
		ViolationLog: slices.Clone(l.mu.violations), StartTimes: slices.Clone(l.mu.startTimes)}
}

// nodesOf returns the nodes key runs on now.
func (l *ledger) nodesOf(key worker.JobKey) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Sorted(maps.Keys(l.mu.running[key]))
}

// firstStart returns when key was first started, and false if never.
func (l *ledger) firstStart(key worker.JobKey) (time.Time, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	t, ok := l.mu.first[key]
	return t, ok
}
