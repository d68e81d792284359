package persistence

import (
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dgraph-io/badger/v4"
)

// TestStore opens a store in a fresh temporary directory with a LocalLog
// over it, both closed when the test ends. Writes are not fsynced.
func TestStore(t testing.TB) (*Store, *LocalLog) {
	t.Helper()
	cfg := DefaultConfig(t.TempDir())
	cfg.SyncWrites = false
	cfg.GCInterval = 0
	return TestStoreWithConfig(t, cfg)
}

// TestStoreWithConfig is TestStore with an explicit configuration.
func TestStoreWithConfig(t testing.TB, cfg Config) (*Store, *LocalLog) {
	t.Helper()
	s, err := Open(cfg)
	if err != nil {
		t.Fatalf("open test store: %v", err)
	}
	l := NewLocalLog(s)
	t.Cleanup(func() {
		l.Close()
		s.Close()
	})
	return s, l
}

// TestRaftStore opens a RaftStore in a fresh temporary directory, closed
// when the test ends. Writes are not fsynced.
func TestRaftStore(t testing.TB) *RaftStore {
	t.Helper()
	s, err := OpenRaftStore(RaftStoreConfig{Dir: t.TempDir()})
	if err != nil {
		t.Fatalf("open test raft store: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// TornLogs returns the write-ahead (*.mem) and value (*.vlog) logs of the
// badger directory dir whose replay stops at a partly written entry: the
// tail a SIGKILL leaves when it lands while badger copies an entry into
// the log (opening accepts it and drops that entry, which was never
// acknowledged). It only reads; for tests that kill writers and want to
// know whether a kill hit that instant. A log that ends cleanly (after its
// last entry come only zeros, or nothing) is not listed, and a dir that does
// not exist yet has none.
func TornLogs(dir string) ([]string, error) {
	ents, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil // not created yet (a kill before the first open): no logs
	}
	if err != nil {
		return nil, err
	}
	var torn []string
	for _, e := range ents {
		name := e.Name()
		kind := walLog
		switch {
		case strings.HasSuffix(name, ".mem"):
		case strings.HasSuffix(name, ".vlog"):
			kind = valueLog
		default:
			continue
		}
		if fi, err := e.Info(); err != nil || fi.Size() < logHeaderSize {
			continue
		}
		path := filepath.Join(dir, name)
		s, err := scanLog(path, kind, 0, badger.DefaultOptions("").ValueThreshold, knownKeyStart)
		if err != nil {
			return nil, err
		}
		partial, err := nonZeroAt(path, s.stop, 2*entryMaxHeader)
		if err != nil {
			return nil, err
		}
		if partial || s.replayEnd < s.stop {
			torn = append(torn, path)
		}
	}
	return torn, nil
}

// nonZeroAt reports whether any of the n bytes of path at off is not zero.
func nonZeroAt(path string, off int64, n int) (bool, error) {
	f, err := os.Open(path)
	if err != nil {
		return false, err
	}
	defer f.Close()
	b := make([]byte, n)
	m, err := f.ReadAt(b, off)
	if err != nil && !errors.Is(err, io.EOF) {
		return false, err
	}
	return firstNonZero(b[:m]) >= 0, nil
}
