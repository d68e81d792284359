//go:build !linux

package process

import (
	"errors"
	"syscall"
	"time"
)

// errNotLinux is returned when a service is started on a system other
// than Linux: the runtime relies on /proc and pidfd.
var errNotLinux = errors.New("process: the process runtime runs services on Linux only")

func spawn(shell, command, dir string, env []string, stdoutPath, stderrPath, exitFile string, user *JobUser) (*proc, error) {
	return nil, errNotLinux
}

func adopt(pid int, startTicks uint64, exitFile string) (*proc, bool) { return nil, false }

func (p *proc) waitExit(stop1, stop2 <-chan struct{}, wakeFd int, interval time.Duration) bool {
	select {
	case <-stop1:
	case <-stop2:
	}
	return false
}

func (p *proc) collect() exitStatus                               { return statusFromFile(p.exitFile) }
func (p *proc) closePidfd()                                       {}
func (p *proc) signalGroup(sig syscall.Signal) error              { return errNotLinux }
func (p *proc) waitStarted(done <-chan struct{}, d time.Duration) {}

type waker struct{}

func newWaker() (*waker, error) { return &waker{}, nil }
func (w *waker) fd() int        { return -1 }
func (w *waker) wake()          {}
func (w *waker) close()         {}
