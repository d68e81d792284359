//go:build unix

package dockerenv

import (
	"fmt"
	"os"
	"syscall"
)

// lockFile takes an exclusive flock on path (creating it), blocking until it
// is free, and returns its release. The kernel releases it if the process
// dies, so a crashed test cannot wedge later ones.
func lockFile(path string) (unlock func(), err error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDONLY, 0o666)
	if err != nil {
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	for {
		err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX)
		if err != syscall.EINTR {
			break
		}
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	return func() { f.Close() }, nil // closing the last descriptor unlocks
}
