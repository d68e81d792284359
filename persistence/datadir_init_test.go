package persistence

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/dgraph-io/badger/v4"
	"github.com/stretchr/testify/require"
)

// badgerDir makes dir the crash image of a badger DB holding keys, as a
// first start killed before writing its marker leaves it (or, with other
// keys, a store that is not a new one): the files of an open DB after a
// sync, copied before it closes (a close would flush them to a table).
func badgerDir(t *testing.T, dir string, keys ...string) {
	t.Helper()
	src := t.TempDir()
	// Small logs: the copy reads the sparse files whole.
	db, err := badger.Open(badger.DefaultOptions(src).WithLogger(nil).WithSyncWrites(true).
		WithMemTableSize(1 << 20).WithValueThreshold(1 << 10).WithValueLogFileSize(1 << 20))
	require.NoError(t, err)
	require.NoError(t, db.Update(func(txn *badger.Txn) error {
		for _, k := range keys {
			if err := txn.Set([]byte(k), u64(1)); err != nil {
				return err
			}
		}
		return nil
	}))
	require.NoError(t, db.Sync())
	require.NoError(t, os.CopyFS(dir, os.DirFS(src)))
	require.NoError(t, os.Remove(filepath.Join(dir, "LOCK")))
	require.NoError(t, db.Close())
}

// TestOpen_InterruptedInit: a first start SIGKILLed before it wrote the
// data dir's marker (which is written last) leaves store/ and perhaps the
// marker's temporary file; the next start finishes the initialisation when
// the store holds nothing but its format key, and refuses, changing
// nothing, a store/ that holds data or tables.
func TestOpen_InterruptedInit(t *testing.T) {
	cases := []struct {
		name   string
		setup  func(t *testing.T, d string)
		refuse string // substring of the refusal; "" accepted
	}{
		{"store created, no key yet", func(t *testing.T, d string) {
			require.NoError(t, os.MkdirAll(filepath.Join(d, storeSubdir), 0o700))
		}, ""},
		{"format key written", func(t *testing.T, d string) {
			badgerDir(t, filepath.Join(d, storeSubdir), string(keyFormat))
		}, ""},
		{"marker half written", func(t *testing.T, d string) {
			badgerDir(t, filepath.Join(d, storeSubdir), string(keyFormat))
			require.NoError(t, os.WriteFile(filepath.Join(d, markerFile+".tmp"), []byte(`{"form`), 0o600))
		}, ""},
		{"store with data", func(t *testing.T, d string) {
			badgerDir(t, filepath.Join(d, storeSubdir), string(keyFormat), "ent/job/a")
		}, `holds data (key "ent/job/a")`},
		{"another file", func(t *testing.T, d string) {
			require.NoError(t, os.MkdirAll(filepath.Join(d, storeSubdir), 0o700))
			require.NoError(t, os.WriteFile(filepath.Join(d, "notes.txt"), nil, 0o600))
		}, "not a norsk-manager data dir"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			d := filepath.Join(t.TempDir(), "data")
			tc.setup(t, d)
			cfg := DefaultConfig(d)
			cfg.Mode = ModeSingle
			s, err := Open(cfg)
			if tc.refuse != "" {
				require.ErrorIs(t, err, ErrCorrupt)
				require.Contains(t, err.Error(), tc.refuse)
				_, err := os.Stat(filepath.Join(d, markerFile))
				require.ErrorIs(t, err, os.ErrNotExist, "a refused dir gets no marker")
				return
			}
			require.NoError(t, err)
			require.NoError(t, s.Close())
			require.Equal(t, ModeSingle, readMarker(t, d).Mode)
			_, err = os.Stat(filepath.Join(d, markerFile+".tmp"))
			require.ErrorIs(t, err, os.ErrNotExist)
			s, err = Open(cfg)
			require.NoError(t, err, "and it opens as an ordinary data dir afterwards")
			require.NoError(t, s.Close())
		})
	}
	t.Run("tables", func(t *testing.T) {
		d := filledDir(t, ModeSingle, 10)
		require.NoError(t, os.Remove(filepath.Join(d, markerFile)))
		before := dirDigest(t, d)
		_, err := Open(DefaultConfig(d))
		require.ErrorIs(t, err, ErrCorrupt)
		require.Contains(t, err.Error(), "not a norsk-manager data dir")
		require.Equal(t, before, dirDigest(t, d), "a store with tables is not opened at all")
	})
}
