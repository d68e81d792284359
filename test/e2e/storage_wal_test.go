package e2e

import (
	"bytes"
	"context"
	"crypto/md5"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/norsk-oss/norsk-manager/test/testproc"
)

// fileMD5s returns the md5 of every file under dir (the lock files
// included) with its size and mode, and every directory, by path. Badger's
// logs are sparse (a 2 GiB value log): holes are hashed as their length,
// not read.
func fileMD5s(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	require.NoError(t, filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		if d.IsDir() {
			out[p] = "dir " + fi.Mode().String()
			return nil
		}
		out[p] = fmt.Sprintf("%s %d %s", fi.Mode(), fi.Size(), sparseMD5(t, p, fi.Size()))
		return nil
	}))
	return out
}

// sparseMD5 is the md5 of the data regions of the file at path, each with
// its offset.
func sparseMD5(t *testing.T, path string, size int64) string {
	t.Helper()
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	h := md5.New()
	for off := int64(0); off < size; {
		data, err := unix.Seek(int(f.Fd()), off, unix.SEEK_DATA)
		if errors.Is(err, unix.ENXIO) {
			break
		}
		require.NoError(t, err)
		hole, err := unix.Seek(int(f.Fd()), data, unix.SEEK_HOLE)
		require.NoError(t, err)
		fmt.Fprintf(h, "@%d:", data)
		_, err = io.Copy(h, io.NewSectionReader(f, data, hole-data))
		require.NoError(t, err)
		off = hole
	}
	return fmt.Sprintf("%x", h.Sum(nil))
}

// runVerify runs norsk-manager verify on dir and returns its exit code and
// output.
func runVerify(t *testing.T, dir string) (int, string) {
	t.Helper()
	v := start(t, "verify", "norsk-manager", "verify", "--data-dir", dir)
	code, exited := v.Exited(60 * time.Second)
	require.True(t, exited, "verify did not end:\n%s", v.Output())
	return code, v.Output()
}

// TestStorage_DamagedWAL is the review's experiment: a single manager with
// 60 jobs, all still in its write-ahead log (no table yet), is SIGKILLed,
// and 256 0xff bytes are written at byte 23000 of the log (the review wrote
// four; since the audit entries joined each append, four bytes at some
// offsets are reported sound with every record intact — an open question
// in docs/design/persistence.md; 256 bytes always reach a record's
// entry). Before, verify
// said "sound" and the manager served 29 jobs without a word. Now verify
// exits 1 naming the log, the manager refuses to start naming it and the
// way out, and neither changes a byte of the data dir — nor does verify on
// the undamaged dir the kill left (md5 of every file before and after).
func TestStorage_DamagedWAL(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	port := testproc.FreePort(t)
	m := startManager(t, dir, port)
	cl := storageClient(t, m.addr)
	for i := range 60 {
		_, err := cl.CreateJob(context.Background(), storageJob(fmt.Sprintf("wal-%03d", i)))
		require.NoError(t, err)
	}
	m.Kill()
	ssts, err := filepath.Glob(filepath.Join(dir, "store", "*.sst"))
	require.NoError(t, err)
	require.Empty(t, ssts, "every job is still in the write-ahead log")
	wal := nonEmpty(t, filepath.Join(dir, "store", "*.mem"))

	before := fileMD5s(t, dir)
	code, out := runVerify(t, dir)
	require.Equal(t, 0, code, "the dir a kill left is sound:\n%s", out)
	require.Contains(t, out, "60 job")
	require.Equal(t, before, fileMD5s(t, dir), "verify changed the data dir")

	f, err := os.OpenFile(wal, os.O_WRONLY, 0)
	require.NoError(t, err)
	_, err = f.WriteAt(bytes.Repeat([]byte{0xff}, 256), 23000)
	require.NoError(t, err)
	require.NoError(t, f.Close())
	before = fileMD5s(t, dir)

	code, out = runVerify(t, dir)
	require.Equal(t, 1, code, "verify exits 1 on damage:\n%s", out)
	require.Contains(t, out, "DAMAGED")
	require.Contains(t, out, wal+" is damaged: write-ahead log damaged at byte")
	require.Equal(t, before, fileMD5s(t, dir), "verify changed the damaged data dir")

	p := start(t, "manager-damaged", "norsk-manager", "--data-dir", dir, "--api-addr", testproc.Addr(port))
	code, exited := p.Exited(30 * time.Second)
	require.True(t, exited, "a manager on a damaged write-ahead log must refuse to start:\n%s", p.Output())
	require.NotZero(t, code)
	out = p.Output()
	for _, want := range []string{wal + " is damaged", "silently drop", "refusing to start", "norsk-manager restore", "norsk-manager verify --data-dir " + dir} {
		require.Contains(t, out, want)
	}
	// A start records its pid in the lock file it takes; nothing else.
	lock := filepath.Join(dir, "store", "norsk-manager.lock")
	after := fileMD5s(t, dir)
	delete(before, lock)
	delete(after, lock)
	require.Equal(t, before, after, "a refused start changes nothing but its pid in the lock file")
}

// nonEmpty returns the one non-empty file matching pattern.
func nonEmpty(t *testing.T, pattern string) string {
	t.Helper()
	ms, err := filepath.Glob(pattern)
	require.NoError(t, err)
	var out []string
	for _, m := range ms {
		if fi, err := os.Stat(m); err == nil && fi.Size() > 0 {
			out = append(out, m)
		}
	}
	require.Len(t, out, 1, "non-empty %s: %s", pattern, strings.Join(ms, ", "))
	return out[0]
}
