package worker

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
)

// stateDirLockFile is the name, inside a state directory, of the file
// LockStateDir locks and writes the holder's PID into. It is never removed:
// removing it could let two processes lock two different files.
const stateDirLockFile = "lock"

// StateDirLock is an exclusive lock on a state directory, taken by
// LockStateDir. It is held until Release, or until the process exits,
// however it exits (SIGKILL included): the operating system releases it.
type StateDirLock struct {
	dir string
	f   *os.File // the locked file; closing it releases the lock

	releaseOnce sync.Once
	releaseErr  error
}

// StateDirInUseError is returned (matching ErrStateDirInUse) by
// LockStateDir, Agent.Run and process.New when another worker holds the
// state directory.
type StateDirInUseError struct {
	// Dir is the state directory.
	Dir string
	// PID is the process holding it, as written in its lock file; 0 if it
	// could not be read (the holder may have just locked it).
	PID int
}

// Error implements error.
func (e *StateDirInUseError) Error() string {
	holder := "pid unknown"
	if e.PID > 0 {
		holder = "pid " + strconv.Itoa(e.PID)
	}
	return fmt.Sprintf("worker: state directory %s is in use by another worker (%s)", e.Dir, holder)
}

// Unwrap returns ErrStateDirInUse.
func (e *StateDirInUseError) Unwrap() error { return ErrStateDirInUse }

// LockStateDir creates dir (mode 0700) if missing, makes it private
// (SecureStateDir: mode 0700, its secrets 0600, owned by this process's
// user, else an error) and takes an exclusive lock on dir/lock without
// waiting, writing this process's PID into the file. It returns a *StateDirInUseError if another process, or another
// StateDirLock of this process, holds the lock: two workers over one state
// directory would both re-adopt the same jobs and fight over the node.
//
// On platforms without flock(2) (Windows, Plan 9…) it only creates the
// directory and the lock excludes nothing.
func LockStateDir(dir string) (*StateDirLock, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("worker: create state directory: %w", err)
	}
	if err := SecureStateDir(dir); err != nil {
		return nil, err
	}
	path := filepath.Join(dir, stateDirLockFile)
	// os.OpenFile sets O_CLOEXEC, so services started by a runtime never
	// inherit the lock and cannot keep it after the worker exits.
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("worker: open state directory lock: %w", err)
	}
	locked, err := tryLockFile(f)
	if err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("worker: lock %s: %w", path, err)
	}
	if !locked {
		pid := readLockPID(f)
		_ = f.Close()
		return nil, &StateDirInUseError{Dir: dir, PID: pid}
	}
	if err := writeLockPID(f); err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("worker: write %s: %w", path, err)
	}
	return &StateDirLock{dir: dir, f: f}, nil
}

// Dir returns the locked state directory.
func (l *StateDirLock) Dir() string { return l.dir }

// Release releases the lock. It is idempotent and returns the error of the
// first call. The lock file stays, with the PID of its last holder.
func (l *StateDirLock) Release() error {
	l.releaseOnce.Do(func() {
		if l.f == nil {
			return
		}
		// Closing the only descriptor of the lock releases it.
		if err := l.f.Close(); err != nil {
			l.releaseErr = fmt.Errorf("worker: release state directory lock: %w", err)
		}
	})
	return l.releaseErr
}

// writeLockPID replaces the content of the locked file by this process's
// PID.
func writeLockPID(f *os.File) error {
	if err := f.Truncate(0); err != nil {
		return err
	}
	_, err := f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	return err
}

// readLockPID returns the PID written in a lock file held by someone else,
// or 0.
func readLockPID(f *os.File) int {
	data, err := io.ReadAll(io.NewSectionReader(f, 0, 64))
	if err != nil && !errors.Is(err, io.EOF) {
		return 0
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
	if err != nil || pid <= 0 {
		return 0
	}
	return pid
}
