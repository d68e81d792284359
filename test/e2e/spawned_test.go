package e2e

import (
	"os"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// userHZ is the unit of /proc/<pid>/stat's starttime (USER_HZ, 100 on
// every Linux architecture the tests run on).
const userHZ = 100

// startedAt returns when the stamp job's process of base (a path without
// its .start/.pid suffix) began: the earlier of its own start stamp and,
// while the process still runs, the kernel's start time of the pid it
// wrote, or of its parent (the service's wrapper). The shell writes its stamp only once it has started and forked
// `date`; on a loaded machine that can come tens of milliseconds after
// the worker spawned it and reported the job started, so the stamp alone
// would make a make-before-break hand-over look like a gap. The kernel's
// time has 10 ms steps. false if no start stamp was written.
func startedAt(base string) (time.Time, bool) {
	st, ok := stamp(base + ".start")
	if !ok {
		return time.Time{}, false
	}
	if b, err := os.ReadFile(base + ".pid"); err == nil {
		if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil {
			// The stamping shell is the child of the service's wrapper
			// (worker/process: the wrapper, which the worker spawns
			// before it reports the job started, forks the command's
			// shell); under load the fork can come late too, so the
			// wrapper's start counts.
			for _, p := range []int{pid, parentPID(pid)} {
				if k, ok := pidStart(p); ok && k.Before(st) {
					st = k
				}
			}
		}
	}
	return st, true
}

// parentPID returns pid's parent from /proc, or 0.
func parentPID(pid int) int {
	f, ok := statFields(pid)
	if !ok || len(f) < 2 {
		return 0
	}
	ppid, err := strconv.Atoi(f[1])
	if err != nil {
		return 0
	}
	return ppid
}

// statFields returns the fields of /proc/<pid>/stat after the command
// name (which may hold spaces) in parentheses: state first.
func statFields(pid int) ([]string, bool) {
	if pid <= 0 {
		return nil, false
	}
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return nil, false
	}
	s := string(stat)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return nil, false
	}
	return strings.Fields(s[i+1:]), true
}

// pidStart returns the kernel's start time of process pid from /proc, as
// wall-clock time (10 ms steps); false if it is unreadable (the process
// ended).
func pidStart(pid int) (time.Time, bool) {
	// starttime is field 22 of stat, the 20th after the command name.
	f, ok := statFields(pid)
	if !ok || len(f) < 20 {
		return time.Time{}, false
	}
	ticks, err := strconv.ParseInt(f[19], 10, 64)
	if err != nil {
		return time.Time{}, false
	}
	var boot unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_BOOTTIME, &boot); err != nil {
		return time.Time{}, false
	}
	now := time.Now()
	sinceBoot := time.Duration(boot.Nano())
	started := time.Duration(ticks) * time.Second / userHZ
	return now.Add(started - sinceBoot), true
}
