package scheduler

import (
	"fmt"
	"time"
)

// RestartPolicy is the restart ceiling and backoff of issue 11 §4: a failed
// instance is restarted after a backoff, on the same node first, then
// elsewhere, until Ceiling failures fall within Window; then the engine
// writes the job's terminal_state and never places it again.
type RestartPolicy struct {
	// Ceiling is the number of failures within Window that ends the job;
	// ≥ 1. Default 5.
	Ceiling int
	// Window is how far back failures count; > 0. Default 10 minutes.
	Window time.Duration
	// InitialBackoff is the wait after the first failure in the window;
	// each further failure doubles it, up to MaxBackoff. Defaults 1 s and
	// 60 s.
	InitialBackoff time.Duration
	MaxBackoff     time.Duration
}

// DefaultRestartPolicy returns the default: 5 failures in 10
// minutes, backoff 1 s doubling to 60 s.
func DefaultRestartPolicy() RestartPolicy {
	return RestartPolicy{Ceiling: 5, Window: 10 * time.Minute, InitialBackoff: time.Second, MaxBackoff: time.Minute}
}

// Validate returns ErrInvalidPolicy, wrapped and naming the first field out
// of range, or nil.
func (p RestartPolicy) Validate() error {
	switch {
	case p.Ceiling < 1:
		return fmt.Errorf("%w: ceiling is %d, want at least 1", ErrInvalidPolicy, p.Ceiling)
	case p.Window <= 0:
		return fmt.Errorf("%w: window is %s, want more than 0", ErrInvalidPolicy, p.Window)
	case p.InitialBackoff <= 0:
		return fmt.Errorf("%w: initial backoff is %s, want more than 0", ErrInvalidPolicy, p.InitialBackoff)
	case p.MaxBackoff < p.InitialBackoff:
		return fmt.Errorf("%w: max backoff %s is less than initial backoff %s", ErrInvalidPolicy, p.MaxBackoff, p.InitialBackoff)
	}
	return nil
}

// RestartVerdict is what to do after a job's latest failure.
type RestartVerdict struct {
	// Failures is the number of failures within the window.
	Failures int
	// Exceeded is true when Failures reached the ceiling: write the
	// terminal state (FailureReason), restart nothing (the other fields
	// are then zero).
	Exceeded bool
	// Backoff is the whole wait after the last failure in the window, and
	// Wait what is left of it at now (0: restart now).
	Backoff time.Duration
	Wait    time.Duration
	// SameNode is true when the restart should try the failed node first
	// (Ask.PreferNode): after the first failure in the window. After more,
	// the engine restarts elsewhere, with the failed nodes in
	// Ask.AvoidNodes (still used when nothing else fits).
	SameNode bool
}

// Next judges a job's failures (the times its instances failed, any order;
// times after now count, as a clock between managers may be behind) at now.
// A failure counts while now - t < Window. With k failures counted the
// backoff is InitialBackoff·2^(k-1), at most MaxBackoff: 1 s, 2 s, 4 s, 8 s
// by default, then the ceiling. With no failures there is nothing to
// restart (the zero verdict). It assumes a valid policy (Validate).
func (p RestartPolicy) Next(failures []time.Time, now time.Time) RestartVerdict {
	var v RestartVerdict
	var last time.Time
	for _, t := range failures {
		if now.Sub(t) >= p.Window {
			continue
		}
		v.Failures++
		if t.After(last) {
			last = t
		}
	}
	if v.Failures == 0 {
		return v
	}
	if v.Failures >= p.Ceiling {
		v.Exceeded = true
		return v
	}
	v.Backoff = p.backoff(v.Failures)
	if wait := last.Add(v.Backoff).Sub(now); wait > 0 {
		v.Wait = wait
	}
	v.SameNode = v.Failures == 1
	return v
}

// backoff is InitialBackoff·2^(k-1), capped at MaxBackoff, without
// overflow.
func (p RestartPolicy) backoff(k int) time.Duration {
	b := p.InitialBackoff
	for i := 1; i < k && b < p.MaxBackoff; i++ {
		b *= 2
	}
	return min(b, p.MaxBackoff)
}

// FailureReason is the terminal_state failure_reason the engine writes when
// the ceiling is exceeded: "restart ceiling exceeded: 5 failures in 10m0s,
// last: <last>".
func (p RestartPolicy) FailureReason(v RestartVerdict, last string) string {
	return fmt.Sprintf("restart ceiling exceeded: %d failures in %s, last: %s", v.Failures, p.Window, last)
}
