package persistence

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync"

	"github.com/dgraph-io/badger/v4"
	"github.com/dgraph-io/badger/v4/options"
	"github.com/dgraph-io/badger/v4/table"
	"github.com/dgraph-io/ristretto/v2/z"
)

// Integrity checks of a badger directory, run before badger opens it
// (openBadgerDir) and by Verify.
//
// Badger on its own opens a damaged store silently: by default it verifies
// no table checksums; with table verification on it *drops* a table whose
// checksum fails and carries on without it (levels.go, "Ignoring table");
// a table whose footer or first block is damaged makes it panic in a
// goroutine of its own, which no caller can recover (both seen in
// TestOpen_DamagedTable). So the tables the MANIFEST lists are
// verified here first, each with badger's own table code (table.OpenTable
// with options.OnTableRead: the index checksum and every block's checksum)
// in our goroutine, with its panics recovered and reported as damage.
// Badger itself then runs with options.OnBlockRead (every block read from
// disk later is verified again) and VerifyValueChecksum (every value-log
// read is verified), so no table is read twice at open.

// dirInspection is what inspectBadgerDir found in a badger directory.
type dirInspection struct {
	// tables is the number of tables the MANIFEST lists, tableBytes their
	// total size in bytes.
	tables     int
	tableBytes int64
	// damage lists every file that failed a check, in file-name order.
	damage []*DamageError
	// emptyLogs are zero-length write-ahead (.mem) and value (.vlog) logs:
	// crash leftovers that hold no data (see removeEmptyLogs).
	emptyLogs []string
	// replayEnd is where badger's replay of each non-empty write-ahead log
	// and of the newest value log ends, by file name (scanStoreLogs).
	replayEnd map[string]int64
}

// storeFileSuffixes are the badger files whose presence means a store
// exists in a directory.
var storeFileSuffixes = []string{".sst", ".vlog", ".mem"}

// inspectBadgerDir checks the MANIFEST and every table it lists in dir,
// the write-ahead logs and the newest value log (scanStoreLogs), and finds
// empty logs. It only reads. An error is returned only when dir
// cannot be read at all; damage is reported in the result.
func inspectBadgerDir(dir string, opts badger.Options) (dirInspection, error) {
	var in dirInspection
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return in, nil
	}
	if err != nil {
		return in, fmt.Errorf("read store dir %s: %w", dir, err)
	}
	hasStoreFiles := false
	var logs []string
	logSizes := map[string]int64{}
	for _, e := range entries {
		name := e.Name()
		for _, suf := range storeFileSuffixes {
			if strings.HasSuffix(name, suf) {
				hasStoreFiles = true
			}
		}
		if strings.HasSuffix(name, ".mem") || strings.HasSuffix(name, ".vlog") {
			fi, err := e.Info()
			if err != nil || !fi.Mode().IsRegular() {
				continue
			}
			logs, logSizes[name] = append(logs, name), fi.Size()
			if fi.Size() == 0 {
				in.emptyLogs = append(in.emptyLogs, filepath.Join(dir, name))
			}
		}
	}
	manifestPath := filepath.Join(dir, "MANIFEST")
	mf, err := os.Open(manifestPath)
	if errors.Is(err, fs.ErrNotExist) {
		if hasStoreFiles {
			in.damage = append(in.damage, &DamageError{Path: manifestPath,
				Reason: "missing while the directory holds store files (badger would start empty and delete the tables)"})
		}
		return in, nil
	}
	if err != nil {
		return in, fmt.Errorf("open %s: %w", manifestPath, err)
	}
	m, _, err := badger.ReplayManifestFile(mf, opts.ExternalMagicVersion, opts)
	mf.Close()
	if err != nil {
		in.damage = append(in.damage, &DamageError{Path: manifestPath, Reason: "unreadable", Err: err})
		return in, nil
	}
	ids := make([]uint64, 0, len(m.Tables))
	for id := range m.Tables {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	sizes, damage := verifyTables(dir, ids, m.Tables, opts)
	for i := range ids {
		in.tables++
		in.tableBytes += sizes[i]
		if damage[i] != nil {
			in.damage = append(in.damage, damage[i])
		}
	}
	logDamage, replayEnd, err := scanStoreLogs(dir, logs, logSizes, opts)
	if err != nil {
		return in, err
	}
	in.replayEnd = replayEnd
	in.damage = append(in.damage, logDamage...)
	return in, nil
}

// verifyTables verifies the tables ids of dir on up to GOMAXPROCS (at
// most 4) goroutines, which all end before it returns, and returns each
// table's size and damage (nil if sound) in the order of ids.
func verifyTables(dir string, ids []uint64, tms map[uint64]badger.TableManifest, opts badger.Options) ([]int64, []*DamageError) {
	sizes, damage := make([]int64, len(ids)), make([]*DamageError, len(ids))
	next := make(chan int)
	var wg sync.WaitGroup
	for range min(runtime.GOMAXPROCS(0), 4, len(ids)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				sizes[i], damage[i] = verifyTable(table.NewFilename(ids[i], dir), tms[ids[i]], opts)
			}
		}()
	}
	for i := range ids {
		next <- i
	}
	close(next)
	wg.Wait()
	return sizes, damage
}

// verifyTable verifies the index and block checksums of the table at path
// with badger's table code and returns its size. Panics in badger's code
// (a damaged footer or first block) are recovered and reported as damage.
func verifyTable(path string, tm badger.TableManifest, opts badger.Options) (size int64, derr *DamageError) {
	fi, err := os.Stat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return 0, &DamageError{Path: path, Reason: "missing: the MANIFEST lists this table but the file is gone"}
	case err != nil:
		return 0, &DamageError{Path: path, Reason: "cannot be read", Err: err}
	case fi.Size() == 0:
		return 0, &DamageError{Path: path, Reason: "empty: the MANIFEST lists this table but the file has no content"}
	case tm.KeyID != 0:
		return fi.Size(), &DamageError{Path: path, Reason: fmt.Sprintf("the MANIFEST says the table is encrypted (key %d); this store never encrypts", tm.KeyID)}
	}
	mf, err := z.OpenMmapFile(path, os.O_RDONLY, 0)
	if err != nil {
		return fi.Size(), &DamageError{Path: path, Reason: "cannot be read", Err: err}
	}
	defer func() {
		if r := recover(); r != nil {
			derr = &DamageError{Path: path, Reason: "malformed: badger's table reader crashed on it", Err: fmt.Errorf("panic: %s", firstLine(r))}
		}
		// The table is never used: close the mapping and file directly
		// (Table.DecrRef would delete the file). OpenTable may already have
		// closed them on some errors; a second close only errs.
		_ = mf.Close(-1)
	}()
	topts := table.Options{
		ReadOnly:    true,
		ChkMode:     options.OnTableRead,
		BlockSize:   opts.BlockSize,
		Compression: tm.Compression,
	}
	if _, err := table.OpenTable(mf, topts); err != nil {
		return fi.Size(), &DamageError{Path: path, Reason: tableReason(err), Err: err}
	}
	return fi.Size(), nil
}

// tableReason words a table.OpenTable failure.
func tableReason(err error) string {
	msg := err.Error()
	switch {
	case strings.Contains(msg, "checksum"):
		return "fails its checksum"
	case strings.Contains(msg, "decode compressed"):
		return "a block cannot be decompressed"
	}
	return "cannot be opened"
}

// firstLine returns the first line of a recovered panic value (badger's
// table panics carry a multi-line dump).
func firstLine(r any) string {
	s := fmt.Sprint(r)
	s = strings.TrimSpace(s)
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	return s
}

// removeEmptyLogs removes zero-length write-ahead (.mem) and value (.vlog)
// logs from a store directory whose lock this process holds, and syncs
// the directory. Badger v4 (up to 4.9.6, the newest; upstream issue
// dgraph-io/badger#2207) cannot open a directory holding one: it treats
// the file as new, grows it, and fails with "Create a new file" (a second
// start then works). A SIGKILL leaves one in two windows:
//
//   - creation: badger creates the file (open O_CREAT) and only then
//     sizes it (ftruncate) and writes its 20-byte header; killed between
//     the two, the file is empty and was never mapped, so nothing was ever
//     written to it;
//   - deletion: a write-ahead log whose memtable was flushed to a table
//     (recorded in the synced MANIFEST), or a value log the garbage
//     collector has moved out of, is truncated to zero and then unlinked;
//     killed between the two, it is empty, and what it held lives
//     elsewhere.
//
// A log that ever held an entry has its header and the entry before the
// entry's sync returns, and a file's length only shrinks in the deletion
// path, so a zero-length log never holds an acknowledged write: removing
// it loses nothing. Non-empty logs are left to badger, which replays them
// up to their last complete entry. This must run only under the store's
// lock: a live badger's log is empty for an instant after it creates it.
func removeEmptyLogs(dir string, paths []string, logger interface {
	Warn(msg string, args ...any)
}) error {
	for _, p := range paths {
		if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("remove empty log %s: %w", p, err)
		}
		logger.Warn("removed an empty log a crash left behind (it holds no data; badger cannot open a directory with one)", "path", p)
	}
	if len(paths) == 0 {
		return nil
	}
	return syncDir(dir)
}

// syncDir fsyncs a directory, making renames and removals in it durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
