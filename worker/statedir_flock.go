//go:build linux || darwin || dragonfly || freebsd || netbsd || openbsd || solaris || illumos

package worker

import (
	"errors"
	"os"

	"golang.org/x/sys/unix"
)

// tryLockFile takes an exclusive flock(2) on f without waiting; false if
// someone else holds it. The lock belongs to f's open file description:
// another descriptor of the same file, even in this process, conflicts.
func tryLockFile(f *os.File) (bool, error) {
	for {
		err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		switch {
		case err == nil:
			return true, nil
		case errors.Is(err, unix.EINTR):
			continue
		case errors.Is(err, unix.EWOULDBLOCK):
			return false, nil
		default:
			return false, err
		}
	}
}
