package persistence

import (
	"bytes"
	"fmt"
	"testing"
	"time"

	"github.com/dgraph-io/badger/v4"
	"github.com/hashicorp/raft"
	"github.com/stretchr/testify/require"
)

func testRaftLog(idx uint64, data string) *raft.Log {
	return &raft.Log{Index: idx, Term: 1, Type: raft.LogCommand, Data: []byte(data)}
}

func storeTestLogs(t *testing.T, s *RaftStore, idxs ...uint64) {
	t.Helper()
	logs := make([]*raft.Log, len(idxs))
	for i, idx := range idxs {
		logs[i] = testRaftLog(idx, fmt.Sprint("log", idx))
	}
	require.NoError(t, s.StoreLogs(logs))
}

func requireBounds(t *testing.T, s *RaftStore, first, last uint64) {
	t.Helper()
	f, err := s.FirstIndex()
	require.NoError(t, err)
	l, err := s.LastIndex()
	require.NoError(t, err)
	require.Equal(t, [2]uint64{first, last}, [2]uint64{f, l}, "first, last")
}

func TestRaftStore_Implements(t *testing.T) {
	var s any = &RaftStore{}
	_, ok := s.(raft.LogStore)
	require.True(t, ok, "RaftStore must be a raft.LogStore")
	_, ok = s.(raft.StableStore)
	require.True(t, ok, "RaftStore must be a raft.StableStore")
}

func TestRaftStoreConfig_Validate(t *testing.T) {
	cases := []struct {
		name    string
		cfg     RaftStoreConfig
		wantErr string
	}{
		{"default", DefaultRaftStoreConfig("/x"), ""},
		{"no dir", RaftStoreConfig{SyncWrites: true}, "Dir is required"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.cfg.Validate()
			if tc.wantErr == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorContains(t, err, tc.wantErr)
			_, err = OpenRaftStore(tc.cfg)
			require.ErrorContains(t, err, tc.wantErr, "OpenRaftStore validates")
		})
	}
	require.True(t, DefaultRaftStoreConfig("/x").SyncWrites, "writes are synced by default")
}

func TestRaftStore_FirstIndex(t *testing.T) {
	cases := []struct {
		name  string
		setup func(t *testing.T, s *RaftStore)
		want  uint64
	}{
		{"empty", func(*testing.T, *RaftStore) {}, 0},
		{"contiguous", func(t *testing.T, s *RaftStore) { storeTestLogs(t, s, 1, 2, 3) }, 1},
		{"starts late", func(t *testing.T, s *RaftStore) { storeTestLogs(t, s, 7, 8) }, 7},
		{"lower entry stored later", func(t *testing.T, s *RaftStore) {
			storeTestLogs(t, s, 7, 8)
			storeTestLogs(t, s, 3)
		}, 3},
		{"after compaction", func(t *testing.T, s *RaftStore) {
			storeTestLogs(t, s, 1, 2, 3, 4, 5)
			require.NoError(t, s.DeleteRange(1, 3))
		}, 4},
		{"everything deleted", func(t *testing.T, s *RaftStore) {
			storeTestLogs(t, s, 1, 2, 3)
			require.NoError(t, s.DeleteRange(1, 3))
		}, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := TestRaftStore(t)
			tc.setup(t, s)
			got, err := s.FirstIndex()
			require.NoError(t, err)
			require.Equal(t, tc.want, got)
		})
	}
}

func TestRaftStore_LastIndex(t *testing.T) {
	cases := []struct {
		name  string
		setup func(t *testing.T, s *RaftStore)
		want  uint64
	}{
		{"empty", func(*testing.T, *RaftStore) {}, 0},
		{"contiguous", func(t *testing.T, s *RaftStore) { storeTestLogs(t, s, 1, 2, 3) }, 3},
		{"with a gap", func(t *testing.T, s *RaftStore) { storeTestLogs(t, s, 1, 2, 10) }, 10},
		{"suffix deleted", func(t *testing.T, s *RaftStore) {
			storeTestLogs(t, s, 1, 2, 3, 4, 5)
			require.NoError(t, s.DeleteRange(4, 5))
		}, 3},
		{"suffix deleted across a gap", func(t *testing.T, s *RaftStore) {
			storeTestLogs(t, s, 1, 2, 8, 9)
			require.NoError(t, s.DeleteRange(5, 9))
		}, 2},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := TestRaftStore(t)
			tc.setup(t, s)
			got, err := s.LastIndex()
			require.NoError(t, err)
			require.Equal(t, tc.want, got)
		})
	}
}

func TestRaftStore_GetLog(t *testing.T) {
	at := time.Date(2026, 3, 4, 5, 6, 7, 891011, time.UTC)
	cases := []struct {
		name string
		log  *raft.Log
	}{
		{"command", &raft.Log{Index: 1, Term: 2, Type: raft.LogCommand, Data: []byte("data"), AppendedAt: at}},
		{"with extensions", &raft.Log{Index: 2, Term: 2, Type: raft.LogCommand, Data: []byte("d"), Extensions: []byte("ext")}},
		{"configuration", &raft.Log{Index: 3, Term: 3, Type: raft.LogConfiguration, Data: []byte{0, 1, 2}}},
		{"noop, no data, zero time", &raft.Log{Index: 4, Term: 3, Type: raft.LogNoop}},
		{"barrier, large index and term", &raft.Log{Index: 1 << 62, Term: 1 << 40, Type: raft.LogBarrier}},
		{"pre-epoch time", &raft.Log{Index: 6, Term: 1, Type: raft.LogCommand, AppendedAt: time.Date(1900, 1, 1, 0, 0, 0, 5, time.UTC)}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := TestRaftStore(t)
			require.NoError(t, s.StoreLog(tc.log))
			var got raft.Log
			require.NoError(t, s.GetLog(tc.log.Index, &got))
			require.True(t, tc.log.AppendedAt.Equal(got.AppendedAt), "AppendedAt %v, want %v", got.AppendedAt, tc.log.AppendedAt)
			got.AppendedAt = tc.log.AppendedAt
			require.Equal(t, *tc.log, got)
		})
	}

	t.Run("not found", func(t *testing.T) {
		s := TestRaftStore(t)
		var l raft.Log
		require.ErrorIs(t, s.GetLog(1, &l), raft.ErrLogNotFound)
		storeTestLogs(t, s, 1, 3)
		require.ErrorIs(t, s.GetLog(2, &l), raft.ErrLogNotFound)
		require.NoError(t, s.DeleteRange(1, 1))
		require.ErrorIs(t, s.GetLog(1, &l), raft.ErrLogNotFound)
	})

	t.Run("corrupt value", func(t *testing.T) {
		s := TestRaftStore(t)
		storeTestLogs(t, s, 1, 2)
		require.NoError(t, s.db.Update(func(txn *badger.Txn) error {
			if err := txn.Set(raftLogKey(1), []byte{1, 2, 3}); err != nil {
				return err
			}
			// A valid encoding of another index stored under 2.
			return txn.Set(raftLogKey(2), encodeRaftLog(testRaftLog(3, "x")))
		}))
		var l raft.Log
		require.ErrorIs(t, s.GetLog(1, &l), ErrCorrupt)
		require.ErrorIs(t, s.GetLog(2, &l), ErrCorrupt)
	})
}

func TestRaftStore_StoreLog(t *testing.T) {
	s := TestRaftStore(t)
	require.NoError(t, s.StoreLog(testRaftLog(5, "a")))
	requireBounds(t, s, 5, 5)
	// Storing at an existing index replaces the entry (a follower
	// overwriting a conflicting suffix).
	require.NoError(t, s.StoreLog(&raft.Log{Index: 5, Term: 9, Type: raft.LogCommand, Data: []byte("b")}))
	var got raft.Log
	require.NoError(t, s.GetLog(5, &got))
	require.Equal(t, uint64(9), got.Term)
	require.Equal(t, []byte("b"), got.Data)
	requireBounds(t, s, 5, 5)
}

func TestRaftStore_StoreLogs(t *testing.T) {
	cases := []struct {
		name        string
		logs        []*raft.Log
		first, last uint64
	}{
		{"empty batch", nil, 0, 0},
		{"contiguous", []*raft.Log{testRaftLog(1, "a"), testRaftLog(2, "b"), testRaftLog(3, "c")}, 1, 3},
		{"gap", []*raft.Log{testRaftLog(10, "a"), testRaftLog(11, "b")}, 10, 11},
		// 64 entries of 100 KiB: 6.4 MiB, beyond badger's 2.4 MiB
		// transaction limit for the 16 MiB memtable; written in parts.
		{"beyond one transaction", bigLogs(1, 64, 100<<10), 1, 64},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := TestRaftStore(t)
			require.NoError(t, s.StoreLogs(tc.logs))
			requireBounds(t, s, tc.first, tc.last)
			for _, want := range tc.logs {
				var got raft.Log
				require.NoError(t, s.GetLog(want.Index, &got))
				require.Equal(t, want.Term, got.Term)
				require.True(t, bytes.Equal(want.Data, got.Data), "data of log %d", want.Index)
			}
		})
	}
}

func bigLogs(from, n uint64, size int) []*raft.Log {
	logs := make([]*raft.Log, n)
	for i := range n {
		data := bytes.Repeat([]byte{byte(i)}, size)
		logs[i] = &raft.Log{Index: from + i, Term: 1, Type: raft.LogCommand, Data: data}
	}
	return logs
}

func TestRaftStore_DeleteRange(t *testing.T) {
	cases := []struct {
		name        string
		stored      []uint64
		min, max    uint64
		remaining   []uint64
		first, last uint64
	}{
		{"prefix", []uint64{1, 2, 3, 4, 5}, 1, 2, []uint64{3, 4, 5}, 3, 5},
		{"inclusive bounds", []uint64{1, 2, 3, 4, 5}, 2, 4, []uint64{1, 5}, 1, 5},
		{"suffix", []uint64{1, 2, 3, 4, 5}, 4, 5, []uint64{1, 2, 3}, 1, 3},
		{"suffix beyond last", []uint64{1, 2, 3}, 2, 100, []uint64{1}, 1, 1},
		{"everything", []uint64{1, 2, 3}, 1, 3, nil, 0, 0},
		{"everything, wide range", []uint64{4, 5}, 0, 1 << 63, nil, 0, 0},
		{"nothing in range", []uint64{1, 2, 8, 9}, 4, 6, []uint64{1, 2, 8, 9}, 1, 9},
		{"below the log", []uint64{5, 6}, 1, 3, []uint64{5, 6}, 5, 6},
		{"above the log", []uint64{5, 6}, 7, 9, []uint64{5, 6}, 5, 6},
		{"prefix across a gap", []uint64{1, 2, 8, 9}, 1, 5, []uint64{8, 9}, 8, 9},
		{"min above max", []uint64{1, 2}, 2, 1, []uint64{1, 2}, 1, 2},
		{"empty store", nil, 1, 10, nil, 0, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := TestRaftStore(t)
			storeTestLogs(t, s, tc.stored...)
			require.NoError(t, s.DeleteRange(tc.min, tc.max))
			requireBounds(t, s, tc.first, tc.last)
			for _, idx := range tc.stored {
				var l raft.Log
				err := s.GetLog(idx, &l)
				if contains(tc.remaining, idx) {
					require.NoError(t, err, "log %d", idx)
				} else {
					require.ErrorIs(t, err, raft.ErrLogNotFound, "log %d", idx)
				}
			}
		})
	}

	t.Run("beyond one transaction", func(t *testing.T) {
		s := TestRaftStore(t)
		const n = 40_000 // more deletes than badger allows in one transaction
		logs := make([]*raft.Log, 0, 1000)
		for i := uint64(1); i <= n; i++ {
			logs = append(logs, testRaftLog(i, ""))
			if len(logs) == cap(logs) {
				require.NoError(t, s.StoreLogs(logs))
				logs = logs[:0]
			}
		}
		require.NoError(t, s.DeleteRange(1, n-10))
		requireBounds(t, s, n-9, n)
		require.NoError(t, s.DeleteRange(n-5, n))
		requireBounds(t, s, n-9, n-6)
	})
}

func contains(s []uint64, v uint64) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

func TestRaftStore_Set_Get(t *testing.T) {
	s := TestRaftStore(t)
	v, err := s.Get([]byte("absent"))
	require.NoError(t, err, "an absent key is not an error (raft treats errors as fatal)")
	require.Nil(t, v)

	require.NoError(t, s.Set([]byte("k"), []byte("v1")))
	require.NoError(t, s.Set([]byte("k"), []byte("v2")))
	v, err = s.Get([]byte("k"))
	require.NoError(t, err)
	require.Equal(t, []byte("v2"), v)

	// Stable keys never collide with log keys.
	require.NoError(t, s.Set([]byte("log/x"), []byte("stable")))
	requireBounds(t, s, 0, 0)
}

func TestRaftStore_SetUint64_GetUint64(t *testing.T) {
	s := TestRaftStore(t)
	v, err := s.GetUint64([]byte("CurrentTerm"))
	require.NoError(t, err, "an absent key is 0, nil")
	require.Zero(t, v)

	require.NoError(t, s.SetUint64([]byte("CurrentTerm"), 1<<40+3))
	v, err = s.GetUint64([]byte("CurrentTerm"))
	require.NoError(t, err)
	require.Equal(t, uint64(1<<40+3), v)

	require.NoError(t, s.Set([]byte("odd"), []byte("abc")))
	_, err = s.GetUint64([]byte("odd"))
	require.ErrorIs(t, err, ErrCorrupt)
}

func TestRaftStore_Reopen(t *testing.T) {
	dir := t.TempDir()
	cfg := DefaultRaftStoreConfig(dir)
	s, err := OpenRaftStore(cfg)
	require.NoError(t, err)
	storeTestLogs(t, s, 3, 4, 5, 6)
	require.NoError(t, s.DeleteRange(3, 4))
	require.NoError(t, s.SetUint64([]byte("term"), 7))
	require.NoError(t, s.Close())
	require.NoError(t, s.Close(), "Close is idempotent")

	s, err = OpenRaftStore(cfg)
	require.NoError(t, err)
	defer s.Close()
	requireBounds(t, s, 5, 6)
	v, err := s.GetUint64([]byte("term"))
	require.NoError(t, err)
	require.Equal(t, uint64(7), v)
	var l raft.Log
	require.NoError(t, s.GetLog(6, &l))
	require.Equal(t, []byte("log6"), l.Data)
}

func TestRaftStore_Closed(t *testing.T) {
	s, err := OpenRaftStore(RaftStoreConfig{Dir: t.TempDir()})
	require.NoError(t, err)
	require.NoError(t, s.Close())
	var l raft.Log
	_, err = s.FirstIndex()
	require.ErrorIs(t, err, ErrClosed)
	_, err = s.LastIndex()
	require.ErrorIs(t, err, ErrClosed)
	require.ErrorIs(t, s.GetLog(1, &l), ErrClosed)
	require.ErrorIs(t, s.StoreLog(testRaftLog(1, "")), ErrClosed)
	require.ErrorIs(t, s.DeleteRange(1, 2), ErrClosed)
	require.ErrorIs(t, s.Set([]byte("k"), nil), ErrClosed)
	_, err = s.Get([]byte("k"))
	require.ErrorIs(t, err, ErrClosed)
	_, err = s.GetUint64([]byte("k"))
	require.ErrorIs(t, err, ErrClosed)
}
