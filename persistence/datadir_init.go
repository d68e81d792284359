package persistence

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	"github.com/dgraph-io/badger/v4"
)

// Initialising a data dir survives a SIGKILL at any instant. The marker is
// written last, once badger has created the store and its format key: a
// marker therefore always means "this data dir has a store", and a
// missing store under a marker is damage, never a first start that was
// cut short. A first start killed before its marker leaves a data dir
// holding only store/ (and perhaps the marker's temporary file); the next
// start finishes the initialisation if the store holds nothing but its
// format key (interruptedInit, initPlan.finish) — Open never returned, so
// nothing was written to it — and refuses the dir otherwise.

// initPlan is the marker a new data dir gets once its store is open.
type initPlan struct {
	marker marker
	// resumed: the data dir holds what an interrupted first start leaves;
	// finish checks that its store is empty before adopting it.
	resumed bool
}

// errNotDataDir refuses a non-empty dir without a marker.
func errNotDataDir(dir string) error {
	return fmt.Errorf("data dir %s is not empty and has no %s marker: it is not a norsk-manager data dir "+
		"(or its marker was removed); refusing to initialise over it: %w", dir, markerFile, ErrCorrupt)
}

// interruptedInit reports whether a data dir without a marker holds only
// what a first start killed before writing its marker leaves: the store/
// directory without tables (the first start writes one key, to its
// write-ahead log) and perhaps the marker's temporary file.
func interruptedInit(dir string, entries []os.DirEntry) bool {
	for _, e := range entries {
		switch {
		case e.Name() == storeSubdir && e.IsDir():
		case e.Name() == markerFile+".tmp" && e.Type().IsRegular():
		default:
			return false
		}
	}
	ssts, err := filepath.Glob(filepath.Join(dir, storeSubdir, "*.sst"))
	return err == nil && len(ssts) == 0
}

// finish checks a resumed initialisation's store and writes the marker.
func (p *initPlan) finish(db *badger.DB, dir string, logger *slog.Logger) error {
	if p.resumed {
		if err := onlyFormatKey(db); err != nil {
			return errors.Join(errNotDataDir(dir), err)
		}
		_ = os.Remove(filepath.Join(dir, markerFile+".tmp"))
		logger.Warn("finishing the initialisation of a data dir whose first start was interrupted (its store is empty)", "dir", dir)
	}
	if err := writeMarker(dir, p.marker); err != nil {
		return err
	}
	logger.Info("initialised new data dir", "dir", dir, "mode", p.marker.Mode)
	return nil
}

// onlyFormatKey fails if the store holds any key but meta/format.
func onlyFormatKey(db *badger.DB) error {
	return db.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			if k := it.Item().Key(); string(k) != string(keyFormat) {
				return fmt.Errorf("its store/ holds data (key %q)", strings.ToValidUTF8(string(k), "?"))
			}
		}
		return nil
	})
}
