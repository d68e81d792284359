//go:build linux

package cpuset

import (
	"errors"
	"fmt"
	"runtime"

	"golang.org/x/sys/unix"
)

// Allowed returns the CPUs the calling thread may run on (its affinity
// mask, which a cgroup cpuset, taskset or systemd's CPUAffinity narrows),
// ascending. Read at start-up, before anything pins a thread, it is the
// process's mask.
func Allowed() ([]uint32, error) {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		return nil, fmt.Errorf("read the cpu affinity mask: %w", err)
	}
	var out []uint32
	for c := 0; c < len(set)*64; c++ {
		if set.IsSet(c) {
			out = append(out, uint32(c))
		}
	}
	if len(out) == 0 {
		return nil, errors.New("read the cpu affinity mask: it is empty")
	}
	return out, nil
}

// maxCPU is the largest id a unix.CPUSet holds (1024 CPUs).
const maxCPU = len(unix.CPUSet{}) * 64

// Pinned runs start on a fresh OS thread whose affinity mask is cpus, and
// returns its error. A process start calls clone(2) from the calling
// thread, and a child inherits that thread's mask, so a process started by
// start runs on cpus from its first instruction: nothing runs unpinned in
// between, as it would if the mask were set after the start. The thread is
// never given back to the Go scheduler (the goroutine exits still locked,
// so the runtime ends the thread): no other goroutine ever runs with the
// narrowed mask. Pinned blocks until start returns.
//
// Errors: cpus empty or naming a CPU beyond 1023 (ErrUnsupported: the
// kernel call here takes a 1024-bit mask), or sched_setaffinity refusing
// the mask (EINVAL: none of cpus is allowed to this process).
func Pinned(cpus []uint32, start func() error) error {
	if len(cpus) == 0 {
		return errors.New("cpuset: empty cpu list")
	}
	var set unix.CPUSet
	for _, c := range cpus {
		if int(c) >= maxCPU {
			return fmt.Errorf("%w: cpu %d (this worker pins cpus 0-%d)", errors.ErrUnsupported, c, maxCPU-1)
		}
		set.Set(int(c))
	}
	done := make(chan error, 1)
	// A goroutine of its own so that its thread can be thrown away: it is
	// waited for below, so it never outlives the call.
	go func() {
		runtime.LockOSThread()
		// No UnlockOSThread: the thread ends with the goroutine.
		if err := unix.SchedSetaffinity(0, &set); err != nil {
			done <- fmt.Errorf("set the cpu affinity to %v: %w", cpus, err)
			return
		}
		done <- start()
	}()
	return <-done
}
