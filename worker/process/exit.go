package process

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// exitStatus is how a service's process ended.
type exitStatus struct {
	known  bool           // false: the process is gone but how it ended is not known
	code   int            // exit code (when signal is 0)
	signal syscall.Signal // non-zero: killed by this signal
}

// success reports an exit with code 0.
func (s exitStatus) success() bool { return s.known && s.signal == 0 && s.code == 0 }

// String says how the process ended, for operators: "exited with code 3",
// "killed by signal SIGKILL", or an explanation that it is unknown.
func (s exitStatus) String() string {
	switch {
	case !s.known:
		return "exited with an unknown status (it was not a child of this worker and left no exit status: killed with SIGKILL?)"
	case s.signal != 0:
		name := unix.SignalName(s.signal)
		if name == "" {
			name = strconv.Itoa(int(s.signal))
		}
		return "killed by signal " + name
	case s.code == 126:
		return "exited with code 126 (command not executable)"
	case s.code == 127:
		return "exited with code 127 (command not found)"
	default:
		return fmt.Sprintf("exited with code %d", s.code)
	}
}

// statusFromCode interprets a shell exit status: 128+N means killed by
// signal N (the shell's convention; a command exiting with such a code
// itself is reported the same way).
func statusFromCode(code int) exitStatus {
	if code > 128 && code < 128+65 {
		return exitStatus{known: true, signal: syscall.Signal(code - 128)}
	}
	return exitStatus{known: true, code: code}
}

// statusFromWait interprets the wait status of the wrapper shell.
func statusFromWait(ws unix.WaitStatus) exitStatus {
	switch {
	case ws.Exited():
		return statusFromCode(ws.ExitStatus())
	case ws.Signaled():
		return exitStatus{known: true, signal: ws.Signal()}
	}
	return exitStatus{}
}

// statusFromFile reads the exit file the wrapper writes; unknown if it is
// missing or unreadable.
func statusFromFile(path string) exitStatus {
	data, err := os.ReadFile(path)
	if err != nil {
		return exitStatus{}
	}
	code, err := strconv.Atoi(strings.TrimSpace(string(data)))
	if err != nil {
		return exitStatus{}
	}
	return statusFromCode(code)
}
