//go:build !linux

package worker

import "time"

// fenceClock returns the fence's clock, Go's monotonic clock from the
// process start, and no boot id: a lease is not carried over a restart
// (a restarted worker counts as cut off until a manager acknowledges it).
func fenceClock() (now func() time.Duration, bootID string) {
	start := time.Now()
	return func() time.Duration { return time.Since(start) }, ""
}
