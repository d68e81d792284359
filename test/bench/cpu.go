package main

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// clockTick is the unit of utime/stime in /proc/<pid>/stat (USER_HZ, 100 on
// Linux).
const clockTick = 10 * time.Millisecond

// cpuTime returns the user+system CPU time process pid has used so far
// (pid 0: this process), or 0 if it cannot be read.
func cpuTime(pid int) time.Duration {
	path := "/proc/self/stat"
	if pid > 0 {
		path = fmt.Sprintf("/proc/%d/stat", pid)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	// Fields after the command name "(…)": state is field 3, utime 14, stime 15.
	i := strings.LastIndexByte(string(b), ')')
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return 0
	}
	u, _ := strconv.ParseInt(f[11], 10, 64)
	s, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(u+s) * clockTick
}

// windowCPU samples, in the background, the CPU time used by process pid
// (0: none) and by the bench itself between warmup and warmup+window from
// now; the returned func waits for the end of the window and returns both
// as cores (CPU seconds per second).
func windowCPU(pid int, warmup, window time.Duration) func() (server, bench float64) {
	type sample struct{ server, bench float64 }
	ch := make(chan sample, 1)
	go func() {
		time.Sleep(warmup)
		s0, b0 := serverCPU(pid), cpuTime(0)
		time.Sleep(window)
		s1, b1 := serverCPU(pid), cpuTime(0)
		ch <- sample{server: (s1 - s0).Seconds() / window.Seconds(), bench: (b1 - b0).Seconds() / window.Seconds()}
	}()
	return func() (float64, float64) { s := <-ch; return s.server, s.bench }
}

func serverCPU(pid int) time.Duration {
	if pid == 0 {
		return 0
	}
	return cpuTime(pid)
}
