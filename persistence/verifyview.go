package persistence

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	"github.com/dgraph-io/badger/v4"
	"golang.org/x/sys/unix"
)

// A read-only open of a store for Verify.
//
// Badger's ReadOnly option alone cannot open a store a crash left: it
// refuses a write-ahead log longer than its last entry (ErrTruncateNeeded)
// — and every log a live badger writes is (it is sized to twice the
// memtable before the first entry) — cannot open a zero-length log, and
// even read-only it deletes the tables the MANIFEST does not list and the
// logs whose memtable is empty. A read-write open replays the logs and
// rewrites them, flushes them to a new table at close, and writes a new
// MANIFEST, value log and discard file: on a damaged store that makes the
// loss permanent and destroys the evidence.
//
// So Verify opens a view: a temporary directory with a symbolic link to
// every file of the store (tables, MANIFEST, value logs, key registry) and
// a copy of each write-ahead log cut where badger's replay ends (scanLog's
// replayEnd, which ReadOnly then accepts), opened with ReadOnly. Whatever
// badger deletes there is a link or a copy; the store's own files are only
// opened for reading.

// readLock is a lock held by Verify on a store directory without writing
// to it.
type readLock struct{ f *os.File }

// lockStoreDirReadOnly takes the same exclusive lock as lockStoreDir —
// on the lock file, opened for reading, or, for a store that never had
// one, on the directory (which a running badger holds locked) — so that
// no manager runs on the store while Verify reads it. It creates and
// writes nothing. A holder makes it fail with an error wrapping ErrInUse.
func lockStoreDirReadOnly(dir, dataDir string) (*readLock, error) {
	path := filepath.Join(dir, lockFile)
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		path = dir
		f, err = os.Open(dir)
	}
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		defer f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			holder := ""
			if pid := readLockPID(f); pid > 0 && path != dir {
				holder = fmt.Sprintf(" (process %d)", pid)
			}
			return nil, fmt.Errorf("data dir %s in use by another manager%s: %s is locked; stop that manager "+
				"(or wait for the other norsk-manager verify to finish) before checking it: %w", dataDir, holder, dir, ErrInUse)
		}
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	return &readLock{f: f}, nil
}

// release drops the lock. Idempotent; nil-safe.
func (l *readLock) release() {
	if l == nil || l.f == nil {
		return
	}
	_ = unix.Flock(int(l.f.Fd()), unix.LOCK_UN)
	_ = l.f.Close()
	l.f = nil
}

// storeView is a store opened read-only through a view directory.
type storeView struct {
	db   *badger.DB
	lock *readLock
	view string // the temporary view directory, removed by close
	// inspection is what the pre-open checks found.
	inspection dirInspection
}

// close closes the DB, removes the view and releases the lock.
func (v *storeView) close() error {
	err := v.db.Close()
	if rerr := os.RemoveAll(v.view); rerr != nil && err == nil {
		err = fmt.Errorf("remove verify view %s: %w", v.view, rerr)
	}
	v.lock.release()
	return err
}

// openStoreView opens the badger store in opts.Dir for reading only:
// under lockStoreDirReadOnly, after the checks of inspectBadgerDir (damage
// is returned as a *refusal, as openBadgerDir returns it), through a view
// (see above) in a new temporary directory. Zero-length logs are left out
// of the view, as a start removes them; the store's directory is not
// written to.
func openStoreView(opts badger.Options, dataDir string, mode Mode, logger *slog.Logger) (*storeView, error) {
	dir := opts.Dir
	lock, err := lockStoreDirReadOnly(dir, dataDir)
	if err != nil {
		return nil, err
	}
	opts = withIntegrity(opts)
	in, err := inspectBadgerDir(dir, opts)
	if err != nil {
		lock.release()
		return nil, fmt.Errorf("data dir %s: %w", dataDir, err)
	}
	if len(in.damage) > 0 {
		lock.release()
		return nil, damageRefusal(dataDir, mode, in.damage)
	}
	view, err := os.MkdirTemp("", "norsk-manager-verify-")
	if err != nil {
		lock.release()
		return nil, fmt.Errorf("verify: create a temporary view of %s: %w", dir, err)
	}
	fail := func(err error) (*storeView, error) {
		_ = os.RemoveAll(view)
		lock.release()
		return nil, err
	}
	if err := buildView(dir, view, in); err != nil {
		return fail(fmt.Errorf("verify: build a read-only view of %s in %s: %w", dir, view, err))
	}
	db, err := badger.Open(opts.WithDir(view).WithValueDir(view).WithReadOnly(true))
	if err != nil {
		return fail(fmt.Errorf("data dir %s: open badger store in %s (read-only, through %s): %w", dataDir, dir, view, err))
	}
	return &storeView{db: db, lock: lock, view: view, inspection: in}, nil
}

// buildView fills view with links to dir's files and cut copies of its
// write-ahead logs (in.replayEnd).
func buildView(dir, view string, in dirInspection) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range entries {
		name := e.Name()
		src, dst := filepath.Join(dir, name), filepath.Join(view, name)
		if name == lockFile || !e.Type().IsRegular() {
			continue
		}
		fi, err := e.Info()
		if err != nil {
			return err
		}
		isLog := strings.HasSuffix(name, ".mem") || strings.HasSuffix(name, ".vlog")
		if isLog && fi.Size() == 0 {
			continue // removed at the next start: holds no data
		}
		if end, ok := in.replayEnd[name]; ok && strings.HasSuffix(name, ".mem") && end < fi.Size() {
			if err := copyPrefix(src, dst, end); err != nil {
				return err
			}
			continue
		}
		abs, err := filepath.Abs(src)
		if err != nil {
			return err
		}
		if err := os.Symlink(abs, dst); err != nil {
			return err
		}
	}
	return nil
}

// copyPrefix copies the first n bytes of src to a new file dst.
func copyPrefix(src, dst string, n int64) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, io.NewSectionReader(in, 0, n)); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}
