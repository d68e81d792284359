package persistence

import (
	"context"
	"fmt"
	"io"
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

// copySparse copies the regular file src to dst, writing only its data
// regions (a write-ahead log is mostly a hole) and keeping its size.
func copySparse(t *testing.T, src, dst string) {
	t.Helper()
	in, err := os.Open(src)
	require.NoError(t, err)
	defer in.Close()
	fi, err := in.Stat()
	require.NoError(t, err)
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_EXCL|os.O_WRONLY, fi.Mode().Perm())
	require.NoError(t, err)
	defer out.Close()
	size := fi.Size()
	for off := int64(0); off < size; {
		data, end, err := nextData(in, off, size)
		require.NoError(t, err)
		if data >= size {
			break
		}
		_, err = io.Copy(io.NewOffsetWriter(out, data), io.NewSectionReader(in, data, end-data))
		require.NoError(t, err)
		off = end
	}
	require.NoError(t, out.Truncate(size))
}

// copyTree copies the files under src into a new dir dst (sparse).
func copyTree(t *testing.T, src, dst string) {
	t.Helper()
	require.NoError(t, filepath.WalkDir(src, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		target := filepath.Join(dst, rel)
		if d.IsDir() {
			return os.MkdirAll(target, 0o700)
		}
		copySparse(t, p, target)
		return nil
	}))
}

// crashedSingleDir writes n jobs of about 1 KB through a single manager's
// store and copies its data dir while the store is open: the copy is what
// a SIGKILL after the last acknowledged write leaves (badger writes its
// logs through a shared mapping, so the page cache holds all of it), with
// every write still in the write-ahead log (no table yet).
func crashedSingleDir(t *testing.T, n int) string {
	t.Helper()
	return crashedDir(t, ModeSingle, n)
}

// crashedDir is crashedSingleDir for a data dir of mode.
func crashedDir(t *testing.T, mode Mode, n int) string {
	t.Helper()
	d := filepath.Join(t.TempDir(), "live")
	cfg := DefaultConfig(d)
	cfg.Mode, cfg.GCInterval = mode, 0
	s, err := Open(cfg)
	require.NoError(t, err)
	l := NewLocalLog(s)
	rng := rand.New(rand.NewPCG(3, 3))
	pad := make([]byte, 1000)
	for i := range n {
		for j := range pad {
			pad[j] = byte('a' + rng.UintN(26))
		}
		id := fmt.Sprintf("job-%05d", i)
		_, err := l.Append(context.Background(), JobKey(id), 0, Change{Record: jobRecord(id, map[string]string{"pad": string(pad)}, time.Time{}), At: time.Now()})
		require.NoError(t, err)
	}
	crashed := filepath.Join(t.TempDir(), "crashed")
	copyTree(t, d, crashed)
	l.Close()
	require.NoError(t, s.Close())
	return crashed
}

// crashedRaftDir does the same with a Raft store holding logs 1..n, each
// of size bytes (values of 1 MiB or more go to the value log).
func crashedRaftDir(t *testing.T, n, size int) string {
	t.Helper()
	cs := crashedRaftDirs(t, n, size)
	return cs[len(cs)-1]
}

// crashedRaftDirs returns the copies taken after each of the n writes.
func crashedRaftDirs(t *testing.T, n, size int) []string {
	t.Helper()
	d := filepath.Join(t.TempDir(), "live")
	s, err := OpenRaftStore(RaftStoreConfig{Dir: d, SyncWrites: true})
	require.NoError(t, err)
	var copies []string
	for i := 1; i <= n; i++ {
		require.NoError(t, s.StoreLogs(bigLogs(uint64(i), 1, size)))
		crashed := filepath.Join(t.TempDir(), fmt.Sprintf("crashed-%d", i))
		copyTree(t, d, crashed)
		copies = append(copies, crashed)
	}
	require.NoError(t, s.Close())
	return copies
}

// logEntries lists the offsets and sizes of the intact entries from the
// start of the log at path.
func logEntries(t *testing.T, path string) (offs, sizes []int64) {
	t.Helper()
	for _, e := range readEntries(t, path) {
		offs, sizes = append(offs, e.off), append(sizes, e.size)
	}
	return offs, sizes
}

// readEntries reads the intact entries from the start of the log at path
// (their keys and values are not kept).
func readEntries(t *testing.T, path string) []walEntry {
	t.Helper()
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	fi, err := f.Stat()
	require.NoError(t, err)
	er := newEntryReader(f, logHeaderSize, fi.Size())
	var out []walEntry
	for {
		e, st := er.next()
		if st != entryOK || len(e.key) == 0 {
			return out
		}
		e.key, e.value = nil, nil
		out = append(out, e)
	}
}

// onlyLog returns the one non-empty file of dir matching pattern.
func onlyLog(t *testing.T, dir, pattern string) string {
	t.Helper()
	ms, err := filepath.Glob(filepath.Join(dir, pattern))
	require.NoError(t, err)
	var out []string
	for _, m := range ms {
		if fi, err := os.Stat(m); err == nil && fi.Size() > 0 {
			out = append(out, m)
		}
	}
	sort.Strings(out)
	require.Len(t, out, 1, "non-empty %s in %s", pattern, dir)
	return out[0]
}

// overwrite writes b into path at off.
func overwrite(t *testing.T, path string, off int64, b []byte) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	require.NoError(t, err)
	_, err = f.WriteAt(b, off)
	require.NoError(t, err)
	require.NoError(t, f.Close())
}

// countJobs opens the single manager's data dir d and counts its jobs.
func countJobs(t *testing.T, d string) (int, error) {
	t.Helper()
	s, err := Open(DefaultConfig(d))
	if err != nil {
		return 0, err
	}
	defer s.Close()
	n := 0
	err = s.View(func(r *Reader) error {
		return r.Jobs(func(*internalpb.JobRecord) error { n++; return nil })
	})
	return n, err
}

// TestOpen_DamagedWAL: damage in the middle of a single manager's
// write-ahead log — the four 0xff bytes, one flipped byte, a
// zeroed page, random bytes over an entry boundary — is refused at open
// naming the log and the byte, with the way out, and changes nothing
// (badger alone replays the log up to the damage and drops the rest
// silently: the "29 of 60 jobs").
func TestOpen_DamagedWAL(t *testing.T) {
	const jobs = 60
	d := crashedSingleDir(t, jobs)
	n, err := countJobs(t, copyOf(t, d))
	require.NoError(t, err)
	require.Equal(t, jobs, n, "the crashed copy opens with every job")

	wal := filepath.Base(onlyLog(t, filepath.Join(d, storeSubdir), "*.mem"))
	offs, _ := logEntries(t, filepath.Join(d, storeSubdir, wal))
	mid := offs[len(offs)/2] + 7
	cases := []struct {
		name string
		off  int64
		b    []byte
	}{
		{"issue: 4 bytes 0xff", 23000, []byte{0xff, 0xff, 0xff, 0xff}},
		{"one byte", mid, []byte{0x5a}},
		{"zeroed page", (mid / 4096) * 4096, make([]byte, 4096)},
		{"random bytes over an entry boundary", offs[len(offs)/3] - 50, randomBytes(100)},
		{"the first entry", logHeaderSize, []byte{0xff}},
		{"a byte far past the last entry", offs[len(offs)-1] + 2<<20, []byte{0x01}},
		{"the last entry claims more than the file holds", offs[len(offs)-1] + 2, []byte{0x10, 0xff, 0xff, 0xff, 0x7f}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := copyOf(t, d)
			path := filepath.Join(c, storeSubdir, wal)
			overwrite(t, path, tc.off, tc.b)
			before := dirDigest(t, c)
			_, err := countJobs(t, c)
			require.Error(t, err)
			t.Log(err)
			var de *DamageError
			require.ErrorAs(t, err, &de)
			require.ErrorIs(t, err, ErrCorrupt)
			require.Equal(t, path, de.Path)
			msg := err.Error()
			require.Contains(t, msg, "write-ahead log")
			require.Regexp(t, "silently drop|a crash cannot leave this", msg)
			require.Contains(t, msg, "nothing was changed")
			require.Contains(t, msg, "norsk-manager restore")
			require.Contains(t, msg, "norsk-manager verify --data-dir "+c)
			require.Equal(t, before, dirDigest(t, c), "a refused open changes nothing")
		})
	}
}

// TestOpen_TornWAL: what a SIGKILL in the middle of badger writing the
// last append's transaction can leave is accepted as badger accepts it,
// and the store opens with every append before it (that one was never
// acknowledged). Badger copies the transaction into its write-ahead log
// one entry at a time, so the kill leaves the entries before one entry
// complete, any part of that entry (Go's memmove stores the head and tail
// of a large copy last), and zeros after it.
func TestOpen_TornWAL(t *testing.T) {
	const jobs = 40
	d := crashedSingleDir(t, jobs)
	wal := filepath.Base(onlyLog(t, filepath.Join(d, storeSubdir), "*.mem"))
	es := readEntries(t, filepath.Join(d, storeSubdir, wal))
	// The last append's transaction: the entries after the last but one
	// finishing entry.
	first := 0
	for i := len(es) - 2; i >= 0; i-- {
		if es[i].meta&metaFinTxn != 0 {
			first = i + 1
			break
		}
	}
	txn := es[first:]
	require.GreaterOrEqual(t, len(txn), 3)
	big := 0 // the largest entry of the transaction (the job's record)
	for i, e := range txn {
		if e.size > txn[big].size {
			big = i
		}
	}
	require.Greater(t, txn[big].size, int64(256), "memmove stores a copy this large head and tail last")
	end := txn[len(txn)-1].off + txn[len(txn)-1].size
	// torn keeps entries before k, the byte ranges of entry k given as
	// fractions of it, and zeros the rest of the transaction.
	type span struct{ from, to int64 } // bytes of the entry written
	cases := []struct {
		name    string
		k       int
		written func(size int64) []span
		jobsOK  int
	}{
		{"complete", len(txn), nil, jobs},
		{"nothing of the transaction", 0, func(int64) []span { return nil }, jobs - 1},
		{"the finishing entry without its CRC", len(txn) - 1, func(sz int64) []span { return []span{{0, sz - 4}} }, jobs - 1},
		{"the record's first 30 bytes", big, func(int64) []span { return []span{{0, 30}} }, jobs - 1},
		{"the record without its head and tail (memmove)", big, func(sz int64) []span { return []span{{32, sz - 128}} }, jobs - 1},
		{"the record's middle third", big, func(sz int64) []span { return []span{{sz / 3, 2 * sz / 3}} }, jobs - 1},
		{"the record without its CRC", big, func(sz int64) []span { return []span{{0, sz - 4}} }, jobs - 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := copyOf(t, d)
			path := filepath.Join(c, storeSubdir, wal)
			if tc.k < len(txn) {
				e := txn[tc.k]
				orig := make([]byte, e.size)
				f, err := os.Open(path)
				require.NoError(t, err)
				_, err = f.ReadAt(orig, e.off)
				require.NoError(t, err)
				require.NoError(t, f.Close())
				overwrite(t, path, e.off, make([]byte, end-e.off))
				for _, sp := range tc.written(e.size) {
					overwrite(t, path, e.off+sp.from, orig[sp.from:sp.to])
				}
			}
			n, err := countJobs(t, c)
			require.NoError(t, err)
			require.Equal(t, tc.jobsOK, n)
		})
	}
}

// TestOpen_DamagedRaftWAL: the same for a cluster member's Raft store:
// damage in the middle of its write-ahead log, and in the middle of its
// newest value log (raft entries of 1 MiB and more go there), is refused;
// a value log torn at its end by a kill is accepted.
func TestOpen_DamagedRaftWAL(t *testing.T) {
	t.Run("write-ahead log", func(t *testing.T) {
		d := crashedRaftDir(t, 200, 300)
		wal := onlyLog(t, d, "*.mem")
		offs, _ := logEntries(t, wal)
		overwrite(t, wal, offs[len(offs)/2]+3, []byte{0xff, 0xff, 0xff, 0xff})
		_, err := OpenRaftStore(RaftStoreConfig{Dir: d})
		var de *DamageError
		require.ErrorAs(t, err, &de)
		require.Equal(t, wal, de.Path)
		require.Contains(t, err.Error(), "rebuild this cluster member from the cluster")
	})
	t.Run("value log, middle", func(t *testing.T) {
		d := crashedRaftDir(t, 4, 1<<20+100)
		vlog := newestVlog(t, d)
		offs, sizes := logEntries(t, vlog)
		require.Len(t, offs, 4, "each raft entry's value is in the value log")
		overwrite(t, vlog, offs[1]+sizes[1]/2, []byte{0xff, 0xff})
		_, err := OpenRaftStore(RaftStoreConfig{Dir: d})
		var de *DamageError
		require.ErrorAs(t, err, &de)
		require.Equal(t, vlog, de.Path)
		require.Contains(t, err.Error(), "value log damaged")
	})
	t.Run("value log, last value torn", func(t *testing.T) {
		// Badger writes (and syncs) a value before the entry pointing to
		// it: a kill while it copies the 4th value leaves the store after
		// 3 writes with part of the 4th value in the value log.
		cs := crashedRaftDirs(t, 4, 1<<20+100)
		d := cs[2]
		vlog := newestVlog(t, cs[3])
		offs, sizes := logEntries(t, vlog)
		require.Len(t, offs, 4)
		torn := filepath.Join(d, filepath.Base(vlog))
		require.NoError(t, os.Remove(torn))
		copySparse(t, vlog, torn)
		overwrite(t, torn, offs[3]+sizes[3]/2, make([]byte, sizes[3]-sizes[3]/2))
		s, err := OpenRaftStore(RaftStoreConfig{Dir: d})
		require.NoError(t, err)
		defer s.Close()
		last, err := s.LastIndex()
		require.NoError(t, err)
		require.Equal(t, uint64(3), last)
		var l raft.Log
		require.NoError(t, s.GetLog(3, &l))
	})
}

// newestVlog returns the non-empty value log of dir with the highest id.
func newestVlog(t *testing.T, dir string) string {
	t.Helper()
	ms, err := filepath.Glob(filepath.Join(dir, "*.vlog"))
	require.NoError(t, err)
	sort.Strings(ms)
	for i := len(ms) - 1; i >= 0; i-- {
		if fi, err := os.Stat(ms[i]); err == nil && fi.Size() > logHeaderSize {
			return ms[i]
		}
	}
	t.Fatalf("no value log with data in %s", dir)
	return ""
}

// copyOf copies the data dir d to a new temporary dir.
func copyOf(t *testing.T, d string) string {
	t.Helper()
	c := filepath.Join(t.TempDir(), "copy")
	copyTree(t, d, c)
	return c
}

// randomBytes returns n bytes from a fixed seed.
func randomBytes(n int) []byte {
	rng := rand.New(rand.NewPCG(9, 9))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(rng.UintN(256))
	}
	return b
}

// TestTornLogs_MissingDir: a store dir not created yet (a writer killed
// before its first open) has no torn logs, and that is not an error.
func TestTornLogs_MissingDir(t *testing.T) {
	torn, err := TornLogs(filepath.Join(t.TempDir(), "never-created"))
	if err != nil || len(torn) != 0 {
		t.Fatalf("TornLogs(missing dir) = %v, %v; want none, nil", torn, err)
	}
}
