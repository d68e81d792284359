package persistence

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"golang.org/x/sys/unix"
)

// lockFile is the lock file a process holds (flock, exclusive) in each
// badger directory it opens, for as long as it has the store open. The
// kernel drops the lock when the process dies, SIGKILL included, so a
// crashed manager never leaves a stale lock. It is a file of its own, not
// the directory badger locks: two flocks on one inode from two open file
// descriptions conflict even within one process, so the store could not
// take ours and badger's both.
const lockFile = "norsk-manager.lock"

// dirLock is a held lockFile.
type dirLock struct{ f *os.File }

// lockStoreDir takes dir's lock file, creating dir if needed, and records
// this process's id in it. Another holder (a running manager, or
// norsk-manager verify) makes it fail with an error wrapping ErrInUse that
// names dataDir (for the message) and, when it recorded one, the holder's
// process id.
func lockStoreDir(dir, dataDir string) (*dirLock, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("create store dir %s: %w", dir, err)
	}
	path := filepath.Join(dir, lockFile)
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open lock file %s: %w", path, err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		defer f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			holder := ""
			if pid := readLockPID(f); pid > 0 {
				holder = fmt.Sprintf(" (process %d)", pid)
			}
			return nil, fmt.Errorf("data dir %s in use by another manager%s: %s is locked; stop that manager "+
				"(or wait for norsk-manager verify to finish) before starting another one or checking it: %w",
				dataDir, holder, dir, ErrInUse)
		}
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	// The pid is only for the message above: a failure to record it
	// leaves the lock as good.
	if err := f.Truncate(0); err == nil {
		_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	return &dirLock{f: f}, nil
}

// readLockPID returns the process id recorded in a lock file, 0 if none.
func readLockPID(f *os.File) int {
	b := make([]byte, 32)
	n, _ := f.ReadAt(b, 0)
	pid, err := strconv.Atoi(string(bytes.TrimSpace(b[:n])))
	if err != nil {
		return 0
	}
	return pid
}

// release drops the lock. The file stays: removing it would let a second
// process lock a new file of the same name while a third still holds the
// old one. Idempotent; nil-safe.
func (l *dirLock) release() {
	if l == nil || l.f == nil {
		return
	}
	_ = unix.Flock(int(l.f.Fd()), unix.LOCK_UN)
	_ = l.f.Close()
	l.f = nil
}
