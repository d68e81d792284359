package persistence

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestRestoreDataDir_NewAndEmptyDirs(t *testing.T) {
	src, srcLog := TestStore(t)
	populate(t, srcLog, "src", 4)
	want := dumpStore(t, src)
	_, head := src.EventBounds()
	file, _ := backupBytes(t, src)
	from := writeTemp(t, file)

	for _, tc := range []struct {
		name string
		dir  func(t *testing.T) string
	}{
		{"missing dir", func(t *testing.T) string { return filepath.Join(t.TempDir(), "a", "new") }},
		{"empty dir", func(t *testing.T) string { return t.TempDir() }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := tc.dir(t)
			res, err := RestoreDataDir(RestoreDirConfig{From: from, Dir: dir, Mode: ModeSingle, EventSkip: 1000})
			require.NoError(t, err)
			require.Equal(t, head+1000, res.EventBase)
			entries, err := os.ReadDir(dir)
			require.NoError(t, err)
			var names []string
			for _, e := range entries {
				names = append(names, e.Name())
			}
			require.ElementsMatch(t, []string{markerFile, storeSubdir}, names, "no staging left behind")

			cfg := DefaultConfig(dir)
			cfg.Mode, cfg.GCInterval = ModeCluster, 0
			_, err = Open(cfg)
			require.ErrorIs(t, err, ErrWrongMode, "the dir records the mode it was restored in")
			cfg.Mode = ModeSingle
			s, err := Open(cfg)
			require.NoError(t, err)
			defer s.Close()
			got := dumpStore(t, s)
			for k, v := range want {
				if len(k) >= len(prefixEv) && k[:len(prefixEv)] == prefixEv {
					continue // the restarted log keeps no events
				}
				if k == string(keyEvHead) || k == string(keyEvFirst) {
					continue
				}
				require.Equal(t, v, got[k], "key %q", k)
			}
			require.Equal(t, src.FSM().AppliedIndex(), s.FSM().AppliedIndex())
			first, h := s.EventBounds()
			require.Equal(t, [2]Index{head + 1001, head + 1000}, [2]Index{first, h})
		})
	}
}

// TestRestoreDataDir_Refuses: a non-empty dir, the remains of an
// interrupted restore and a bad backup are refused with the reason, and
// nothing is written; a failing seed leaves nothing behind.
func TestRestoreDataDir_Refuses(t *testing.T) {
	src, srcLog := TestStore(t)
	populate(t, srcLog, "src", 2)
	good, _ := backupBytes(t, src)

	t.Run("non-empty dir", func(t *testing.T) {
		dir := t.TempDir()
		require.NoError(t, os.WriteFile(filepath.Join(dir, "notes.txt"), []byte("x"), 0o600))
		_, err := RestoreDataDir(RestoreDirConfig{From: writeTemp(t, good), Dir: dir, Mode: ModeSingle})
		require.ErrorContains(t, err, "is not empty (it holds notes.txt)")
		require.ErrorContains(t, err, "nothing was changed")
		requireEntries(t, dir, "notes.txt")
	})
	t.Run("interrupted restore", func(t *testing.T) {
		dir := t.TempDir()
		require.NoError(t, os.Mkdir(filepath.Join(dir, RestoreStaging), 0o700))
		_, err := RestoreDataDir(RestoreDirConfig{From: writeTemp(t, good), Dir: dir, Mode: ModeSingle})
		require.ErrorContains(t, err, "remains of a restore that did not finish")
		requireEntries(t, dir, RestoreStaging)
	})
	for _, tc := range []struct {
		name string
		file []byte
		want string
	}{
		{"truncated", good[:len(good)/2], "truncated"},
		{"bad checksum", append(append([]byte(nil), good[:len(good)-1]...), good[len(good)-1]^1), "does not match"},
		{"not a backup", []byte("hello"), "ends inside its header"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			parent := t.TempDir()
			dir := filepath.Join(parent, "new")
			from := writeTemp(t, tc.file)
			_, err := RestoreDataDir(RestoreDirConfig{From: from, Dir: dir, Mode: ModeSingle})
			require.ErrorIs(t, err, ErrCorrupt)
			require.ErrorContains(t, err, from)
			require.ErrorContains(t, err, tc.want)
			require.ErrorContains(t, err, "nothing was written")
			requireEntries(t, parent)
		})
	}
	t.Run("cluster without raft state", func(t *testing.T) {
		parent := t.TempDir()
		_, err := RestoreDataDir(RestoreDirConfig{From: writeTemp(t, good), Dir: filepath.Join(parent, "new"), Mode: ModeCluster})
		require.ErrorContains(t, err, "needs its Raft state")
		requireEntries(t, parent)
	})
	t.Run("failing seed", func(t *testing.T) {
		parent := t.TempDir()
		dir := filepath.Join(parent, "new")
		_, err := RestoreDataDir(RestoreDirConfig{From: writeTemp(t, good), Dir: dir, Mode: ModeCluster,
			Seed: func(*Store, string) error { return errors.New("no raft today") }})
		require.ErrorContains(t, err, "no raft today")
		requireEntries(t, parent)
	})
}

// requireEntries checks the names in dir.
func requireEntries(t *testing.T, dir string, want ...string) {
	t.Helper()
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	require.ElementsMatch(t, want, names)
}
