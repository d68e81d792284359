//go:build !linux

package cpuset

import (
	"errors"
	"runtime"
)

// Allowed returns CPUs 0..runtime.NumCPU()-1: without an affinity call
// every CPU counts as allowed.
func Allowed() ([]uint32, error) {
	out := make([]uint32, runtime.NumCPU())
	for i := range out {
		out[i] = uint32(i)
	}
	return out, nil
}

// Pinned returns errors.ErrUnsupported: pinning a process needs Linux's
// sched_setaffinity.
func Pinned(cpus []uint32, start func() error) error {
	return errors.ErrUnsupported
}
