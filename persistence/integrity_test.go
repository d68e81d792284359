package persistence

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/stretchr/testify/require"

	"github.com/norsk-oss/norsk-manager/proto/internalpb"
)

// filledDir makes a data dir of mode holding n jobs (records of about
// 1 KB, so a table has many blocks) and closes it: the close flushes the
// memtable, so the store has tables.
func filledDir(t *testing.T, mode Mode, n int) string {
	t.Helper()
	d := filepath.Join(t.TempDir(), "data")
	cfg := DefaultConfig(d)
	cfg.Mode, cfg.SyncWrites, cfg.GCInterval = mode, false, 0
	s, err := Open(cfg)
	require.NoError(t, err)
	l := NewLocalLog(s)
	rng := rand.New(rand.NewPCG(7, 7))
	pad := make([]byte, 1000)
	for i := range n {
		for j := range pad {
			pad[j] = byte('a' + rng.UintN(26))
		}
		id := fmt.Sprintf("job-%05d", i)
		_, err := l.Append(context.Background(), JobKey(id), 0, Change{Record: jobRecord(id, map[string]string{"pad": string(pad)}, time.Time{}), At: time.Now()})
		require.NoError(t, err)
	}
	l.Close()
	require.NoError(t, s.Close())
	require.NotEmpty(t, tables(t, filepath.Join(d, storeSubdir)), "closing the store flushes its memtable to a table")
	return d
}

// tables returns the .sst files of a badger dir, sorted.
func tables(t *testing.T, dir string) []string {
	t.Helper()
	ts, err := filepath.Glob(filepath.Join(dir, "*.sst"))
	require.NoError(t, err)
	sort.Strings(ts)
	return ts
}

// dirDigest hashes every file's name, size and content under dir except
// the lock file (whose content is the last holder's pid): "nothing was
// changed" is dirDigest before == after. Badger's logs are large sparse
// files: only their non-zero blocks are read and hashed (with offsets).
func dirDigest(t *testing.T, dir string) string {
	t.Helper()
	h := sha256.New()
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || d.Name() == lockFile {
			return err
		}
		fmt.Fprintf(h, "%s %x\n", p, fileDigest(t, p))
		return nil
	})
	require.NoError(t, err)
	return fmt.Sprintf("%x", h.Sum(nil))
}

// fileDigest hashes a file's size and its non-zero 64 KiB blocks.
func fileDigest(t *testing.T, path string) []byte {
	t.Helper()
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	fi, err := f.Stat()
	require.NoError(t, err)
	size := fi.Size()
	h := sha256.New()
	fmt.Fprintf(h, "%d\n", size)
	buf := make([]byte, 64<<10)
	for off := int64(0); off < size; {
		data, end, err := nextData(f, off, size)
		require.NoError(t, err)
		if data >= size {
			break
		}
		for pos := data - data%int64(len(buf)); pos < end; pos += int64(len(buf)) {
			n, err := f.ReadAt(buf, pos)
			if err != nil && !errors.Is(err, io.EOF) {
				require.NoError(t, err)
			}
			if firstNonZero(buf[:n]) >= 0 {
				fmt.Fprintf(h, "%d %x\n", pos, sha256.Sum256(buf[:n]))
			}
		}
		off = end
	}
	return h.Sum(nil)
}

// damage overwrites n bytes of path at off with random bytes.
func damage(t *testing.T, path string, off int64, n int, rng *rand.Rand) {
	t.Helper()
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(rng.UintN(256))
	}
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	require.NoError(t, err)
	_, err = f.WriteAt(b, off)
	require.NoError(t, err)
	require.NoError(t, f.Close())
}

// TestOpen_DamagedTable: bytes overwritten anywhere in a table (its first
// block, the middle, the index, the footer: 500 random bytes, as the
// issue did) make Open refuse the store with a *DamageError naming the
// table, the advice of the data dir's mode and the verify command, and
// change nothing; badger never gets to open it.
func TestOpen_DamagedTable(t *testing.T) {
	cases := []struct {
		name string
		mode Mode
		at   float64 // where, as a fraction of the file's size
		end  int64   // if not 0: this many bytes before the end instead
		n    int
	}{
		{"first block", ModeSingle, 0, 0, 500},
		{"middle", ModeSingle, 0.5, 0, 500},
		{"one byte", ModeSingle, 0.3, 0, 1},
		{"index", ModeCluster, 0, 2000, 500},
		{"footer", ModeSingle, 0, 8, 8},
		{"last 500 bytes", ModeCluster, 0, 500, 500},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			d := filledDir(t, tc.mode, 1500)
			sst := tables(t, filepath.Join(d, storeSubdir))[0]
			fi, err := os.Stat(sst)
			require.NoError(t, err)
			off := int64(tc.at * float64(fi.Size()))
			if tc.end != 0 {
				off = fi.Size() - tc.end
			}
			damage(t, sst, off, tc.n, rand.New(rand.NewPCG(1, uint64(off))))
			before := dirDigest(t, d)

			cfg := DefaultConfig(d)
			cfg.Mode = tc.mode
			_, err = Open(cfg)
			require.Error(t, err)
			var de *DamageError
			require.ErrorAs(t, err, &de)
			require.Equal(t, sst, de.Path)
			require.ErrorIs(t, err, ErrCorrupt)
			t.Log(err)
			msg := err.Error()
			require.Contains(t, msg, sst+" is damaged")
			require.Contains(t, msg, "nothing was changed")
			require.Contains(t, msg, "norsk-manager verify --data-dir "+d)
			if tc.mode == ModeSingle {
				require.Contains(t, msg, "norsk-manager restore")
			} else {
				require.Contains(t, msg, "rebuild this cluster member from the cluster")
			}
			require.Equal(t, before, dirDigest(t, d), "a refused open changes nothing")
		})
	}
}

// TestOpen_MissingStoreFiles: a table the MANIFEST lists that is gone, and
// a MANIFEST that is gone while tables remain (badger would start empty
// and delete them), are refused naming the file.
func TestOpen_MissingStoreFiles(t *testing.T) {
	t.Run("table", func(t *testing.T) {
		d := filledDir(t, ModeSingle, 200)
		sst := tables(t, filepath.Join(d, storeSubdir))[0]
		require.NoError(t, os.Remove(sst))
		_, err := Open(DefaultConfig(d))
		var de *DamageError
		require.ErrorAs(t, err, &de)
		require.Equal(t, sst, de.Path)
		require.Contains(t, err.Error(), "the MANIFEST lists this table but the file is gone")
	})
	t.Run("raft store manifest", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "raft")
		s, err := OpenRaftStore(RaftStoreConfig{Dir: dir})
		require.NoError(t, err)
		require.NoError(t, s.StoreLogs([]*raft.Log{{Index: 1, Term: 1, Data: []byte("x")}}))
		require.NoError(t, s.Close())
		require.NotEmpty(t, tables(t, dir))
		require.NoError(t, os.Remove(filepath.Join(dir, "MANIFEST")))
		before := dirDigest(t, dir)
		_, err = OpenRaftStore(RaftStoreConfig{Dir: dir})
		var de *DamageError
		require.ErrorAs(t, err, &de)
		require.Equal(t, filepath.Join(dir, "MANIFEST"), de.Path)
		require.Contains(t, err.Error(), "rebuild this cluster member from the cluster")
		require.Equal(t, before, dirDigest(t, dir))
	})
}

// TestOpen_EmptyLogs: zero-length write-ahead and value logs, which a
// SIGKILL leaves when it lands between badger creating a log and sizing
// it, or between truncating a flushed log and unlinking it, do not stop
// the store from opening (badger 4.9.6 alone fails with "Create a new
// file"), are removed, and every write is still there.
func TestOpen_EmptyLogs(t *testing.T) {
	cases := []struct {
		name  string
		files []string
	}{
		{"memtable log newer than all", []string{"00099.mem"}},
		{"memtable log older than all", []string{"00000.mem"}},
		{"value log", []string{"000099.vlog"}},
		{"both", []string{"00098.mem", "000098.vlog"}},
	}
	for _, tc := range cases {
		t.Run("store/"+tc.name, func(t *testing.T) {
			d := filledDir(t, ModeSingle, 50)
			for _, f := range tc.files {
				require.NoError(t, os.WriteFile(filepath.Join(d, storeSubdir, f), nil, 0o600))
			}
			s, err := Open(DefaultConfig(d))
			require.NoError(t, err)
			defer s.Close()
			n := 0
			require.NoError(t, s.View(func(r *Reader) error {
				return r.Jobs(func(*internalpb.JobRecord) error { n++; return nil })
			}))
			require.Equal(t, 50, n)
			for _, f := range tc.files {
				fi, err := os.Stat(filepath.Join(d, storeSubdir, f))
				if err == nil {
					require.NotZero(t, fi.Size(), "%s was replaced by a log badger made", f)
				}
			}
		})
		t.Run("raft/"+tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "raft")
			s, err := OpenRaftStore(RaftStoreConfig{Dir: dir, SyncWrites: true})
			require.NoError(t, err)
			require.NoError(t, s.StoreLogs([]*raft.Log{{Index: 1, Term: 1, Data: []byte("a")}, {Index: 2, Term: 1, Data: []byte("b")}}))
			require.NoError(t, s.Close())
			for _, f := range tc.files {
				require.NoError(t, os.WriteFile(filepath.Join(dir, f), nil, 0o600))
			}
			s, err = OpenRaftStore(RaftStoreConfig{Dir: dir})
			require.NoError(t, err)
			defer s.Close()
			last, err := s.LastIndex()
			require.NoError(t, err)
			require.Equal(t, uint64(2), last)
			var l raft.Log
			require.NoError(t, s.GetLog(2, &l))
			require.Equal(t, []byte("b"), l.Data)
		})
	}
}

// TestOpen_InUse: a store another holder has open is refused with "data
// dir … in use by another manager" and the holder's pid, not badger's
// lock text, for the FSM store and the Raft store; once the holder closes
// it, it opens.
func TestOpen_InUse(t *testing.T) {
	d := filepath.Join(t.TempDir(), "data")
	s, err := Open(DefaultConfig(d))
	require.NoError(t, err)
	_, err = Open(DefaultConfig(d))
	require.ErrorIs(t, err, ErrInUse)
	require.Contains(t, err.Error(), fmt.Sprintf("data dir %s in use by another manager (process %d)", d, os.Getpid()))
	require.NotContains(t, err.Error(), "Another process is using this Badger database")
	require.NoError(t, s.Close())
	s, err = Open(DefaultConfig(d))
	require.NoError(t, err)
	require.NoError(t, s.Close())

	rdir := filepath.Join(d, raftSubdir)
	rs, err := OpenRaftStore(RaftStoreConfig{Dir: rdir})
	require.NoError(t, err)
	_, err = OpenRaftStore(RaftStoreConfig{Dir: rdir})
	require.ErrorIs(t, err, ErrInUse)
	require.Contains(t, err.Error(), fmt.Sprintf("data dir %s in use by another manager", d))
	require.NoError(t, rs.Close())
}
