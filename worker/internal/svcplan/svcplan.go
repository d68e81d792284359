// Package svcplan holds the rules the worker's runtimes share for the
// services of a job (common.Service of the 1.0.384 wire format): start
// order from dependsOn, the restart policy with restart_count within
// restart_period, and restart backoff. docs/design/worker-process-runtime.md
// §3 and §5 give the rules; the process and the Docker runtimes both
// follow them.
package svcplan

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/norsk-oss/norsk-manager/proto/commonpb"
	"github.com/norsk-oss/norsk-manager/worker"
)

// Defaults of the restart policy when a service leaves restart_count or
// restart_period at 0 with restart ON_FAILURE or ALWAYS: at most
// DefaultRestartCount restarts within DefaultRestartPeriod; one more exit
// inside that window fails the job. A live service that crash-loops is
// failed quickly so the manager can act (move it, or fail over to the
// backup role) instead of the worker retrying forever.
const (
	DefaultRestartCount  = 3
	DefaultRestartPeriod = 60 * time.Second
)

// StartOrder sorts items topologically by their dependencies (Kahn's
// algorithm, stable: among ready items the one given first comes first).
// name and deps return an item's name and the names it depends on; every
// dependency must name an item (callers check that first). A cycle is an
// error wrapping worker.ErrInvalidJob that names the services in it.
func StartOrder[T any](items []T, name func(T) string, deps func(T) []string) ([]T, error) {
	pending := make(map[string]int, len(items)) // unmet dependencies
	for _, it := range items {
		pending[name(it)] = len(deps(it))
	}
	ordered := make([]T, 0, len(items))
	started := make(map[string]bool, len(items))
	for len(ordered) < len(items) {
		progressed := false
		for _, it := range items {
			n := name(it)
			if started[n] || pending[n] > 0 {
				continue
			}
			started[n] = true
			ordered = append(ordered, it)
			progressed = true
			for _, other := range items {
				for _, dep := range deps(other) {
					if dep == n {
						pending[name(other)]--
					}
				}
			}
			break // restart the scan so earlier items keep priority
		}
		if !progressed {
			var cycle []string
			for _, it := range items {
				if !started[name(it)] {
					cycle = append(cycle, strconv.Quote(name(it)))
				}
			}
			return nil, fmt.Errorf("%w: dependsOn has a cycle among services %s", worker.ErrInvalidJob, strings.Join(cycle, ", "))
		}
	}
	return ordered, nil
}

// Action is what the restart policy decides after a service's exit.
type Action uint8

const (
	// Complete: the service is done and is not restarted.
	Complete Action = iota + 1
	// Restart: the service is restarted after Backoff.
	Restart
	// Fail: the job fails.
	Fail
)

// Decide applies a service's restart policy to an exit: success is exit
// code 0. NEVER: success completes, anything else fails the job.
// ON_FAILURE: success completes, anything else restarts. ALWAYS: every
// exit restarts. A restart is then allowed only while fewer than count
// restarts happened within period before now (restarts are their times;
// use Prune); otherwise Fail.
func Decide(policy commonpb.Service_ServiceRestart, success bool, restarts []time.Time, count uint32, period time.Duration, now time.Time) Action {
	switch {
	case policy == commonpb.Service_NEVER && !success:
		return Fail
	case policy == commonpb.Service_NEVER, policy == commonpb.Service_ON_FAILURE && success:
		return Complete
	}
	if uint32(len(Prune(restarts, now.Add(-period)))) >= count {
		return Fail
	}
	return Restart
}

// Prune returns the times in ts after cutoff, reusing ts's array.
func Prune(ts []time.Time, cutoff time.Time) []time.Time {
	out := ts[:0]
	for _, t := range ts {
		if t.After(cutoff) {
			out = append(out, t)
		}
	}
	return out
}

// Backoff returns the delay before a restart when restarts restarts
// happened within the window: base, doubled per restart, at most max.
func Backoff(base, max time.Duration, restarts int) time.Duration {
	d := base
	for range restarts {
		d *= 2
		if d >= max {
			return max
		}
	}
	return d
}

// EffectiveRestart returns restart_count and restart_period (seconds on
// the wire) with the defaults applied for 0.
func EffectiveRestart(svc *commonpb.Service) (count uint32, period time.Duration) {
	count, period = svc.GetRestartCount(), time.Duration(svc.GetRestartPeriod())*time.Second
	if count == 0 {
		count = DefaultRestartCount
	}
	if period == 0 {
		period = DefaultRestartPeriod
	}
	return count, period
}

// MergeEnv returns base with extra on top: a later NAME=value replaces an
// earlier one in place; new names are appended in order.
func MergeEnv(base, extra []string) []string {
	out := make([]string, 0, len(base)+len(extra))
	pos := make(map[string]int, len(base)+len(extra))
	for _, list := range [][]string{base, extra} {
		for _, kv := range list {
			name, _, _ := strings.Cut(kv, "=")
			if i, ok := pos[name]; ok {
				out[i] = kv
				continue
			}
			pos[name] = len(out)
			out = append(out, kv)
		}
	}
	return out
}
