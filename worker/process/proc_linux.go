//go:build linux

package process

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// spawn starts `shell -c wrapperScript shell exitFile command` in its own
// session and process group, in dir, with stdout and stderr appended to
// the given log files, stdin from /dev/null and the exit file, opened
// here, as descriptor 3 for the wrapper to write the status to; as user
// (its uid, gid and groups) when not nil. The files are opened by the
// worker: a job user needs no access to them (they stay in the state
// directory).
func spawn(shell, command, dir string, env []string, stdoutPath, stderrPath, exitFile string, user *JobUser) (*proc, error) {
	if err := os.Remove(exitFile); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("remove old exit file: %w", err)
	}
	devnull, err := os.Open(os.DevNull)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", os.DevNull, err)
	}
	defer devnull.Close()
	stdout, err := openLog(stdoutPath)
	if err != nil {
		return nil, err
	}
	defer stdout.Close()
	stderr, err := openLog(stderrPath)
	if err != nil {
		return nil, err
	}
	defer stderr.Close()
	exit, err := os.OpenFile(exitFile, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open exit file: %w", err)
	}
	defer exit.Close()
	// A new session (hence a new process group, pgid == pid): signals
	// for the worker's terminal or process group never reach services.
	sys := &syscall.SysProcAttr{Setsid: true}
	if user != nil {
		sys.Credential = &syscall.Credential{Uid: user.UID, Gid: user.GID, Groups: user.Groups}
	}
	p, err := os.StartProcess(shell, []string{shell, "-c", wrapperScript, shell, exitFile, command}, &os.ProcAttr{
		Dir:   dir,
		Env:   env,
		Files: []*os.File{devnull, stdout, stderr, exit},
		Sys:   sys,
	})
	if err != nil {
		return nil, fmt.Errorf("start %s: %w", shell, err)
	}
	pr := &proc{pid: p.Pid, pidfd: -1, child: true, exitFile: exitFile, done: make(chan struct{})}
	_ = p.Release() // this package waits with wait4 itself
	// The child cannot be reaped before we wait for it, so its stat entry
	// exists even if it has already exited.
	if _, ticks, err := readStat(pr.pid); err == nil {
		pr.startTicks = ticks
	}
	if fd, err := unix.PidfdOpen(pr.pid, 0); err == nil {
		pr.pidfd = fd
	}
	return pr, nil
}

func openLog(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o640)
	if err != nil {
		return nil, fmt.Errorf("open output log: %w", err)
	}
	return f, nil
}

// adopt returns the live process recorded as (pid, startTicks), or false
// if it has exited or the pid now belongs to another process.
func adopt(pid int, startTicks uint64, exitFile string) (*proc, bool) {
	if pid <= 0 {
		return nil, false
	}
	pr := &proc{pid: pid, startTicks: startTicks, pidfd: -1, exitFile: exitFile, done: make(chan struct{})}
	// Open the pidfd first: it pins the process we then verify.
	fd, err := unix.PidfdOpen(pid, 0)
	if errors.Is(err, unix.ESRCH) {
		return nil, false
	}
	if err == nil {
		pr.pidfd = fd
	}
	state, ticks, err := readStat(pid)
	if err != nil || ticks != startTicks || state == 'Z' || state == 'X' {
		pr.closePidfd()
		return nil, false
	}
	return pr, true
}

// recheckInterval is how often a watcher blocked on a pidfd rechecks its
// stop channels; shutdown wakes it at once through the waker.
const recheckInterval = 2 * time.Second

// waitExit blocks until p exits (returns true) or stop1 or stop2 is closed
// (false). With a pidfd it sleeps in poll(2) on the pidfd and wakeFd (the
// runtime's waker: readable once the runtime shuts down), so an idle
// watcher costs nothing; without, it checks /proc every interval.
func (p *proc) waitExit(stop1, stop2 <-chan struct{}, wakeFd int, interval time.Duration) bool {
	for {
		select {
		case <-stop1:
			return false
		case <-stop2:
			return false
		default:
		}
		if p.pidfd >= 0 {
			fds := []unix.PollFd{{Fd: int32(p.pidfd), Events: unix.POLLIN}}
			if wakeFd >= 0 {
				fds = append(fds, unix.PollFd{Fd: int32(wakeFd), Events: unix.POLLIN})
			}
			n, err := unix.Poll(fds, int(recheckInterval/time.Millisecond))
			if err == nil && n > 0 && fds[0].Revents != 0 {
				return true
			}
			if err != nil && !errors.Is(err, unix.EINTR) {
				p.closePidfd() // fall back to polling
			}
			continue
		}
		if p.exited() {
			return true
		}
		timer := time.NewTimer(interval)
		select {
		case <-stop1:
			timer.Stop()
			return false
		case <-stop2:
			timer.Stop()
			return false
		case <-timer.C:
		}
	}
}

// waker lets Shutdown interrupt every watcher blocked in poll(2): they
// poll its read end, which becomes readable when the write end is closed.
type waker struct{ r, w int }

func newWaker() (*waker, error) {
	var fds [2]int
	if err := unix.Pipe2(fds[:], unix.O_CLOEXEC|unix.O_NONBLOCK); err != nil {
		return nil, fmt.Errorf("create wake pipe: %w", err)
	}
	return &waker{r: fds[0], w: fds[1]}, nil
}

// fd returns the descriptor watchers poll.
func (w *waker) fd() int { return w.r }

// wake makes fd readable for good.
func (w *waker) wake() { _ = unix.Close(w.w) }

// close releases fd; call it once no watcher polls it any more.
func (w *waker) close() { _ = unix.Close(w.r) }

// exited reports whether p has exited, without pidfd.
func (p *proc) exited() bool {
	if p.child {
		var ws unix.WaitStatus
		// A child that exited stays a zombie until reaped, so the stat check
		// below also sees it; wait4 is only a fast path here.
		if pid, err := unix.Wait4(p.pid, &ws, unix.WNOHANG, nil); pid == p.pid && err == nil {
			p.status = statusFromWait(ws)
			p.child = false // reaped
			return true
		}
	}
	state, ticks, err := readStat(p.pid)
	return err != nil || ticks != p.startTicks || state == 'Z' || state == 'X'
}

// collect determines how p ended, once it has exited: from wait4 for a
// child of this runtime, else from the exit file the wrapper wrote.
func (p *proc) collect() exitStatus {
	defer p.closePidfd()
	if p.status.known {
		return p.status
	}
	if p.child {
		var ws unix.WaitStatus
		for {
			pid, err := unix.Wait4(p.pid, &ws, 0, nil)
			if errors.Is(err, unix.EINTR) {
				continue
			}
			if err == nil && pid == p.pid {
				return statusFromWait(ws)
			}
			break
		}
	}
	return statusFromFile(p.exitFile)
}

func (p *proc) closePidfd() {
	if p.pidfd >= 0 {
		_ = unix.Close(p.pidfd)
		p.pidfd = -1
	}
}

// waitStarted waits up to d until the service's command runs (the wrapper
// has a child that has exec'd: its command line differs from the
// wrapper's), or done is closed. A SIGTERM that reached the group before
// that would only set the wrapper's trap flag, or hit the forked child
// before exec reset its handlers, and the command would run anyway. Without
// /proc/<pid>/task/<pid>/children (CONFIG_PROC_CHILDREN) it returns at once.
func (p *proc) waitStarted(done <-chan struct{}, d time.Duration) {
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	ticker := time.NewTicker(2 * time.Millisecond)
	defer ticker.Stop()
	for !p.commandRunning() {
		select {
		case <-done:
			return
		case <-deadline.C:
			return
		case <-ticker.C:
		}
	}
}

func (p *proc) commandRunning() bool {
	pid := strconv.Itoa(p.pid)
	children, err := os.ReadFile("/proc/" + pid + "/task/" + pid + "/children")
	if err != nil {
		return true // cannot tell: do not wait
	}
	fields := strings.Fields(string(children))
	if len(fields) == 0 {
		return false
	}
	own, err1 := os.ReadFile("/proc/" + pid + "/cmdline")
	child, err2 := os.ReadFile("/proc/" + fields[0] + "/cmdline")
	return err1 != nil || err2 != nil || !bytes.Equal(own, child)
}

// signalGroup sends sig to p's process group; a group already gone is not
// an error.
func (p *proc) signalGroup(sig syscall.Signal) error {
	if err := unix.Kill(-p.pid, sig); err != nil && !errors.Is(err, unix.ESRCH) {
		return fmt.Errorf("signal process group %d with %s: %w", p.pid, unix.SignalName(sig), err)
	}
	return nil
}

// readStat returns the state and start time (clock ticks since boot) of
// pid from /proc/<pid>/stat.
func readStat(pid int) (state byte, startTicks uint64, err error) {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, 0, err
	}
	// The command name (field 2) is in parentheses and may contain spaces
	// or parentheses: fields resume after the last ')'.
	i := bytes.LastIndexByte(data, ')')
	if i < 0 || i+2 >= len(data) {
		return 0, 0, fmt.Errorf("parse /proc/%d/stat", pid)
	}
	fields := strings.Fields(string(data[i+2:]))
	const startTimeField = 22 - 3 // field 22, counted from field 3
	if len(fields) <= startTimeField {
		return 0, 0, fmt.Errorf("parse /proc/%d/stat: %d fields", pid, len(fields))
	}
	ticks, err := strconv.ParseUint(fields[startTimeField], 10, 64)
	if err != nil {
		return 0, 0, fmt.Errorf("parse /proc/%d/stat starttime: %w", pid, err)
	}
	return fields[0][0], ticks, nil
}
