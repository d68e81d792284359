//go:build linux

package worker

import (
	"os"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// fenceClock returns the fence's clock, CLOCK_BOOTTIME (monotonic, counts
// time suspended, shared by every process of this boot), and this boot's
// id; the id is "" if unreadable, and a lease is then not carried over a
// restart.
func fenceClock() (now func() time.Duration, bootID string) {
	now = func() time.Duration {
		var ts unix.Timespec
		if err := unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts); err != nil {
			return 0
		}
		return time.Duration(ts.Nano())
	}
	if b, err := os.ReadFile("/proc/sys/kernel/random/boot_id"); err == nil {
		bootID = strings.TrimSpace(string(b))
	}
	return now, bootID
}
