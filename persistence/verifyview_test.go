package persistence

import (
	"context"
	"crypto/sha256"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"github.com/hashicorp/raft"
	"github.com/stretchr/testify/require"
)

// treeDigest hashes everything under dir: each directory's entries, each
// file's name, mode, size and content (fileDigest), the lock file and
// every empty file included — "verify changed nothing" is treeDigest
// before == after.
func treeDigest(t *testing.T, dir string) string {
	t.Helper()
	h := sha256.New()
	require.NoError(t, filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		if d.IsDir() {
			fmt.Fprintf(h, "dir %s %v\n", p, fi.Mode())
			return nil
		}
		fmt.Fprintf(h, "file %s %v %x\n", p, fi.Mode(), fileDigest(t, p))
		return nil
	}))
	return fmt.Sprintf("%x", h.Sum(nil))
}

// crashedMemberDir makes what a SIGKILL leaves of a cluster member: an FSM
// store holding jobs in its write-ahead log, a Raft store holding logs
// 1..jobs+4 (the last four of 1 MiB and more, in its value log) and a raft
// snapshot, copied while both stores were open.
func crashedMemberDir(t *testing.T, jobs int) string {
	t.Helper()
	d := crashedDir(t, ModeCluster, jobs)
	live := filepath.Join(t.TempDir(), "raft")
	rs, err := OpenRaftStore(RaftStoreConfig{Dir: live, SyncWrites: true})
	require.NoError(t, err)
	var logs []*raft.Log
	for i := 1; i <= jobs; i++ {
		logs = append(logs, &raft.Log{Index: uint64(i), Term: 1, Type: raft.LogCommand, Data: []byte("x")})
	}
	require.NoError(t, rs.StoreLogs(logs))
	for i := jobs + 1; i <= jobs+4; i++ {
		require.NoError(t, rs.StoreLogs(bigLogs(uint64(i), 1, 1<<20+100)))
	}
	require.NoError(t, rs.SetUint64([]byte(raftKeyCurrentTerm), 1))
	copyTree(t, live, filepath.Join(d, raftSubdir))
	require.NoError(t, rs.Close())

	snaps, err := raft.NewFileSnapshotStore(filepath.Join(d, raftSubdir, "snapshots"), 2, nil)
	require.NoError(t, err)
	s, err := Open(DefaultConfig(copyOf(t, d)))
	require.NoError(t, err)
	sink, err := snaps.Create(raft.SnapshotVersionMax, uint64(jobs), 1, raft.Configuration{}, 1, nil)
	require.NoError(t, err)
	require.NoError(t, s.WriteSnapshot(sink))
	require.NoError(t, sink.Close())
	require.NoError(t, s.Close())
	return d
}

// TestVerify_ReadOnly: verify writes nothing into a data dir (its --help
// says so): not on a single manager's or a cluster member's data dir a
// SIGKILL left (write-ahead logs full of entries, a value log, a
// zero-length log, raft snapshots), nor on one whose write-ahead log is
// damaged — every file's content, size and mode, the lock files and the
// directory listings are the same before and after, and its temporary
// view is gone. A start after it still finds everything.
func TestVerify_ReadOnly(t *testing.T) {
	const jobs = 60
	cases := []struct {
		name  string
		setup func(t *testing.T) string
		sound bool
	}{
		{"single manager after a kill", func(t *testing.T) string {
			d := crashedSingleDir(t, jobs)
			require.NoError(t, os.WriteFile(filepath.Join(d, storeSubdir, "000099.vlog"), nil, 0o600))
			return d
		}, true},
		{"cluster member after a kill", func(t *testing.T) string { return crashedMemberDir(t, jobs) }, true},
		{"closed cleanly", func(t *testing.T) string { return filledDir(t, ModeSingle, jobs) }, true},
		{"damaged write-ahead log", func(t *testing.T) string {
			d := crashedSingleDir(t, jobs)
			overwrite(t, onlyLog(t, filepath.Join(d, storeSubdir), "*.mem"), 23000, []byte{0xff, 0xff, 0xff, 0xff})
			return d
		}, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			d := tc.setup(t)
			tmp := t.TempDir()
			t.Setenv("TMPDIR", tmp)
			before := treeDigest(t, d)
			r, err := Verify(context.Background(), d, nil)
			require.NoError(t, err)
			require.Equal(t, before, treeDigest(t, d), "verify changed the data dir")
			left, err := os.ReadDir(tmp)
			require.NoError(t, err)
			require.Empty(t, left, "verify's temporary view is removed")
			require.Equal(t, tc.sound, r.Sound(), "%v", r.Damage)
			if !tc.sound {
				require.Contains(t, r.Damage[0].Error(), "write-ahead log damaged at byte")
				return
			}
			require.Equal(t, jobs, r.Store.Entities[KindJob])
			require.Equal(t, uint64(jobs), r.Store.Applied)
			if r.Raft != nil {
				require.Equal(t, jobs+4, r.Raft.Entries)
				require.Len(t, r.Raft.Snapshots, 1)
			}
			mode := ModeSingle
			if r.Raft != nil {
				mode = ModeCluster
			}
			cfg := DefaultConfig(d)
			cfg.Mode = mode
			s, err := Open(cfg)
			require.NoError(t, err)
			require.Equal(t, uint64(jobs), s.FSM().AppliedIndex())
			require.NoError(t, s.Close())
		})
	}
}
