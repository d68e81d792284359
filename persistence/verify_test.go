package persistence

import (
	"context"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/dgraph-io/badger/v4"
	"github.com/hashicorp/raft"
	"github.com/stretchr/testify/require"
)

// memberDir makes a cluster member's data dir: an FSM store holding jobs
// (applied up to index jobs) and a Raft store holding logs 1..entries with
// CurrentTerm term, closed.
func memberDir(t *testing.T, jobs, entries int, term uint64) string {
	t.Helper()
	d := filledDir(t, ModeCluster, jobs)
	rs, err := OpenRaftStore(RaftStoreConfig{Dir: filepath.Join(d, raftSubdir)})
	require.NoError(t, err)
	var logs []*raft.Log
	for i := 1; i <= entries; i++ {
		logs = append(logs, &raft.Log{Index: uint64(i), Term: 1, Type: raft.LogCommand, Data: []byte("x")})
	}
	require.NoError(t, rs.StoreLogs(logs))
	require.NoError(t, rs.SetUint64([]byte(raftKeyCurrentTerm), term))
	require.NoError(t, rs.Close())
	return d
}

// withStore runs fn on the badger DB of d's FSM store (test surgery).
func withStore(t *testing.T, d string, fn func(txn *badger.Txn) error) {
	t.Helper()
	s, err := Open(DefaultConfig(d))
	require.NoError(t, err)
	require.NoError(t, s.db.Update(fn))
	require.NoError(t, s.Close())
}

// TestVerify_Sound: a sound single manager's and cluster member's data dir
// verify sound, with what was checked counted.
func TestVerify_Sound(t *testing.T) {
	t.Run("single", func(t *testing.T) {
		d := filledDir(t, ModeSingle, 120)
		r, err := Verify(context.Background(), d, nil)
		require.NoError(t, err)
		require.True(t, r.Sound(), "%v", r.Damage)
		require.Equal(t, ModeSingle, r.Marker.Mode)
		require.Equal(t, 120, r.Store.Entities[KindJob])
		require.Equal(t, uint64(120), r.Store.Applied)
		require.NotZero(t, r.Store.Tables)
		require.NotZero(t, r.Store.IndexEntries)
		require.Nil(t, r.Raft)
	})
	t.Run("cluster member", func(t *testing.T) {
		d := memberDir(t, 30, 200, 3)
		r, err := Verify(context.Background(), d, nil)
		require.NoError(t, err)
		require.True(t, r.Sound(), "%v", r.Damage)
		require.NotNil(t, r.Raft)
		require.Equal(t, 200, r.Raft.Entries)
		require.Equal(t, uint64(1), r.Raft.First)
		require.Equal(t, uint64(200), r.Raft.Last)
		require.Equal(t, uint64(3), r.Raft.CurrentTerm)
	})
}

// TestVerify_Damage: each kind of damage is reported naming the file (or
// the store) and the problem, without an error.
func TestVerify_Damage(t *testing.T) {
	cases := []struct {
		name   string
		setup  func(t *testing.T) string
		path   func(d string) string // the damaged path reported first
		reason string
	}{
		{"table checksum", func(t *testing.T) string {
			d := filledDir(t, ModeSingle, 1500)
			sst := tables(t, filepath.Join(d, storeSubdir))[0]
			fi, err := os.Stat(sst)
			require.NoError(t, err)
			damage(t, sst, fi.Size()/2, 500, rand.New(rand.NewPCG(3, 3)))
			return d
		}, func(d string) string { return tables(t, filepath.Join(d, storeSubdir))[0] }, "fails its checksum"},
		{"record", func(t *testing.T) string {
			d := filledDir(t, ModeSingle, 10)
			withStore(t, d, func(txn *badger.Txn) error {
				return txn.Set(entKey(JobKey("job-00003")), encodeEntity(1, true, []byte{0xff, 0xff}))
			})
			return d
		}, func(d string) string { return filepath.Join(d, storeSubdir) }, `"ent/job/job-00003": the record does not decode`},
		{"index entry missing", func(t *testing.T) string {
			d := filledDir(t, ModeSingle, 10)
			withStore(t, d, func(txn *badger.Txn) error { return txn.Delete(jobStateKey(0, "job-00004")) })
			return d
		}, func(d string) string { return filepath.Join(d, storeSubdir) }, "1 secondary-index entries missing"},
		{"unknown key", func(t *testing.T) string {
			d := filledDir(t, ModeSingle, 10)
			withStore(t, d, func(txn *badger.Txn) error { return txn.Set([]byte("zzz"), nil) })
			return d
		}, func(d string) string { return filepath.Join(d, storeSubdir) }, "a key of no known prefix"},
		{"interrupted restore", func(t *testing.T) string {
			d := filledDir(t, ModeSingle, 10)
			withStore(t, d, func(txn *badger.Txn) error { return setU64(txn, keyRestoring, 7) })
			return d
		}, func(d string) string { return filepath.Join(d, storeSubdir) }, "a snapshot restore was interrupted"},
		{"raft log gap", func(t *testing.T) string {
			d := memberDir(t, 10, 50, 1)
			rs, err := OpenRaftStore(RaftStoreConfig{Dir: filepath.Join(d, raftSubdir)})
			require.NoError(t, err)
			require.NoError(t, rs.DeleteRange(1, 20))
			require.NoError(t, rs.Close())
			return d
		}, func(d string) string { return filepath.Join(d, raftSubdir) }, "entries 1-20 are gone"},
		{"raft term", func(t *testing.T) string {
			d := memberDir(t, 10, 5, 1)
			rs, err := OpenRaftStore(RaftStoreConfig{Dir: filepath.Join(d, raftSubdir)})
			require.NoError(t, err)
			require.NoError(t, rs.StoreLogs([]*raft.Log{{Index: 6, Term: 9}}))
			require.NoError(t, rs.Close())
			return d
		}, func(d string) string { return filepath.Join(d, raftSubdir) }, "term 9, beyond CurrentTerm 1"},
		{"raft behind the store", func(t *testing.T) string {
			return memberDir(t, 10, 5, 1) // the FSM store applied 10
		}, func(d string) string { return filepath.Join(d, raftSubdir) }, "applied up to index 10, beyond the Raft log and snapshots (5)"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			d := tc.setup(t)
			r, err := Verify(context.Background(), d, nil)
			require.NoError(t, err)
			require.False(t, r.Sound())
			require.Equal(t, tc.path(d), r.Damage[0].Path)
			require.Contains(t, r.Damage[0].Error(), tc.reason)
		})
	}
}

// TestVerify_Snapshots: raft's snapshots are read whole; one whose state
// file was damaged fails raft's CRC and is reported by path.
func TestVerify_Snapshots(t *testing.T) {
	d := memberDir(t, 20, 30, 1)
	snaps, err := raft.NewFileSnapshotStore(filepath.Join(d, raftSubdir, "snapshots"), 2, io.Discard)
	require.NoError(t, err)
	s, err := Open(DefaultConfig(d))
	require.NoError(t, err)
	sink, err := snaps.Create(raft.SnapshotVersionMax, 20, 1, raft.Configuration{}, 1, nil)
	require.NoError(t, err)
	require.NoError(t, s.WriteSnapshot(sink))
	require.NoError(t, sink.Close())
	require.NoError(t, s.Close())

	r, err := Verify(context.Background(), d, nil)
	require.NoError(t, err)
	require.True(t, r.Sound(), "%v", r.Damage)
	require.Len(t, r.Raft.Snapshots, 1)
	require.Equal(t, uint64(20), r.Raft.Snapshots[0].Index)
	require.NotZero(t, r.Raft.Snapshots[0].Records)

	state := filepath.Join(d, raftSubdir, "snapshots", "snapshots", sink.ID(), "state.bin")
	damage(t, state, 40, 8, rand.New(rand.NewPCG(5, 5)))
	r, err = Verify(context.Background(), d, nil)
	require.NoError(t, err)
	require.False(t, r.Sound())
	require.Equal(t, state, r.Damage[0].Path)
	require.Contains(t, r.Damage[0].Error(), "fails raft's checksum")
}

// TestVerify_Refuses: a data dir in use, one without a marker and a
// missing one cannot be checked (an error, not a report); zero-length logs
// are listed and left in place (the next start removes them).
func TestVerify_Refuses(t *testing.T) {
	d := filledDir(t, ModeSingle, 5)
	s, err := Open(DefaultConfig(d))
	require.NoError(t, err)
	_, err = Verify(context.Background(), d, nil)
	require.ErrorIs(t, err, ErrInUse)
	require.NoError(t, s.Close())

	_, err = Verify(context.Background(), t.TempDir(), nil)
	require.ErrorContains(t, err, "not a norsk-manager data dir")
	_, err = Verify(context.Background(), filepath.Join(t.TempDir(), "nope"), nil)
	require.ErrorIs(t, err, os.ErrNotExist)

	empty := filepath.Join(d, storeSubdir, "00077.mem")
	require.NoError(t, os.WriteFile(empty, nil, 0o600))
	r, err := Verify(context.Background(), d, nil)
	require.NoError(t, err)
	require.True(t, r.Sound(), "%v", r.Damage)
	require.Equal(t, []string{empty}, r.EmptyLogs)
	require.FileExists(t, empty)
}
