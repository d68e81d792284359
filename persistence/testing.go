package persistence

import (
	"testing"
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
