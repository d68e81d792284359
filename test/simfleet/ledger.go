package simfleet

import (
	"fmt"
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
		// running holds, per (job, role), the nodes it runs on now.
		running map[worker.JobKey][]string
		starts  int
		stops   int
		// startTimes holds when each start was received, in order.
		startTimes []time.Time
		violations []string
		nViolation int
	}
}

func newLedger() *ledger {
	l := &ledger{}
	l.mu.running = map[worker.JobKey][]string{}
	return l
}

// started records a provision of key on node (instance: its instance id).
// A start of a key that already runs somewhere, this node included, is a
// violation: the manager sent a second start of a (job, role) while one
// runs.
func (l *ledger) started(key worker.JobKey, node, instance string) {
	now := time.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	l.mu.starts++
	l.mu.startTimes = append(l.mu.startTimes, now)
	nodes := l.mu.running[key]
	if len(nodes) > 0 {
		l.mu.nViolation++
		if len(l.mu.violations) < maxViolations {
			l.mu.violations = append(l.mu.violations, fmt.Sprintf("%s: start on node %s (instance %q) at %s while it runs on %v",
				key, node, instance, now.Format(time.StampMicro), nodes))
		}
	}
	if !slices.Contains(nodes, node) {
		l.mu.running[key] = append(nodes, node)
	}
}

// stopped records that key stopped on node.
func (l *ledger) stopped(key worker.JobKey, node string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.mu.stops++
	nodes := slices.DeleteFunc(l.mu.running[key], func(n string) bool { return n == node })
	if len(nodes) == 0 {
		delete(l.mu.running, key)
		return
	}
	l.mu.running[key] = nodes
}

// Stats is a snapshot of what the fleet received.
type Stats struct {
	// Starts and Stops count the provision_job and stop_job that reached a
	// simulated runtime (a stop of a job not running is not counted).
	Starts, Stops int
	// Running is the number of (job, role) running on some node now.
	Running int
	// Violations counts the starts of a (job, role) received while it ran
	// already (on any node); ViolationLog describes the first 100.
	Violations   int
	ViolationLog []string
	// StartTimes are the arrival times of every start, in order.
	StartTimes []time.Time
}

func (l *ledger) stats() Stats {
	l.mu.Lock()
	defer l.mu.Unlock()
	return Stats{Starts: l.mu.starts, Stops: l.mu.stops, Running: len(l.mu.running), Violations: l.mu.nViolation,
		ViolationLog: slices.Clone(l.mu.violations), StartTimes: slices.Clone(l.mu.startTimes)}
}

// nodesOf returns the nodes key runs on now.
func (l *ledger) nodesOf(key worker.JobKey) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.mu.running[key])
}
