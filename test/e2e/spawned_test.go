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
// wrote. The shell writes its stamp only once it has started and forked
// `date`; on a loaded machine that can come tens of milliseconds after
// the worker spawned it and reported the job started, so the stamp alone
// would make a make-before-break hand-over look like a gap. The kernel's
// time has 10 ms steps. false if no start stamp was written.
func startedAt(base string) (time.Time, bool) {
	st, ok := stamp(base + ".start")
	if !ok {
		return time.Time{}, false
	}
	if k, ok := kernelStart(base + ".pid"); ok && k.Before(st) {
		return k, true
	}
	return st, true
}

// kernelStart reads the pid in pidFile and returns its process's start
// time from /proc, as wall-clock time; false if either is unreadable (the
// process ended).
func kernelStart(pidFile string) (time.Time, bool) {
	b, err := os.ReadFile(pidFile)
	if err != nil {
		return time.Time{}, false
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return time.Time{}, false
	}
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return time.Time{}, false
	}
	// Fields after the command name (which may hold spaces) in
	// parentheses; starttime is field 22, the 20th after it.
	s := string(stat)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return time.Time{}, false
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 20 {
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
