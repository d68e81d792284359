package persistence

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// modeDir makes a data dir initialised by an open in mode created; legacy
// strips the mode from its marker (a marker written before modes were
// recorded) and raft adds the raft/ subdirectory a cluster member has.
func modeDir(t *testing.T, created Mode, legacy, raft bool) string {
	t.Helper()
	d := filepath.Join(t.TempDir(), "data")
	cfg := DefaultConfig(d)
	cfg.Mode = created
	s, err := Open(cfg)
	require.NoError(t, err)
	require.NoError(t, s.Close())
	if raft {
		require.NoError(t, os.MkdirAll(filepath.Join(d, raftSubdir), 0o700))
	}
	if legacy {
		m := readMarker(t, d)
		m.Mode = ""
		require.NoError(t, writeMarker(d, m))
	}
	return d
}

func readMarker(t *testing.T, dir string) marker {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, markerFile))
	require.NoError(t, err)
	var m marker
	require.NoError(t, json.Unmarshal(b, &m))
	return m
}

// TestOpen_Mode: a data dir records the mode it was initialised in and is
// refused, untouched, when opened in the other mode; a marker without a
// mode is inferred as cluster if the dir has a raft/ subdirectory and
// single otherwise, and the inferred mode is recorded once accepted.
func TestOpen_Mode(t *testing.T) {
	cases := []struct {
		name    string
		created Mode
		legacy  bool // marker without a mode
		raft    bool // raft/ subdirectory present
		open    Mode
		refuse  []string // substrings of the refusal; nil: accepted
		record  Mode     // the marker's mode after an accepted open
	}{
		{"single reopened single", ModeSingle, false, false, ModeSingle, nil, ModeSingle},
		{"cluster reopened cluster", ModeCluster, false, true, ModeCluster, nil, ModeCluster},
		{"single opened as cluster", ModeSingle, false, false, ModeCluster,
			[]string{`holds a single manager's state (mode "single", recorded in its marker)`, "as a cluster member", "fresh --data-dir"}, ""},
		{"cluster opened as single", ModeCluster, false, true, ModeSingle,
			[]string{`holds a cluster member's state (mode "cluster"`, "as a single manager", "start it with its cluster flags", "fresh --data-dir"}, ""},
		{"cluster without raft dir opened as single", ModeCluster, false, false, ModeSingle,
			[]string{`mode "cluster"`}, ""},
		{"legacy single opened as single", ModeUnchecked, true, false, ModeSingle, nil, ModeSingle},
		{"legacy single opened as cluster", ModeUnchecked, true, false, ModeCluster,
			[]string{`mode "single", inferred: its marker predates modes and it has no raft/`}, ""},
		{"legacy cluster opened as cluster", ModeUnchecked, true, true, ModeCluster, nil, ModeCluster},
		{"legacy cluster opened as single", ModeUnchecked, true, true, ModeSingle,
			[]string{`mode "cluster", inferred: its marker predates modes and it has a raft/`, "start it with its cluster flags"}, ""},
		{"unchecked open of a cluster dir", ModeCluster, false, true, ModeUnchecked, nil, ModeCluster},
		{"unchecked open of a legacy dir records nothing", ModeUnchecked, true, true, ModeUnchecked, nil, ModeUnchecked},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := modeDir(t, tc.created, tc.legacy, tc.raft)
			before := listDir(t, dir)
			markerBefore, err := os.ReadFile(filepath.Join(dir, markerFile))
			require.NoError(t, err)
			cfg := DefaultConfig(dir)
			cfg.Mode = tc.open
			s, err := Open(cfg)
			if tc.refuse == nil {
				require.NoError(t, err)
				require.NoError(t, s.Close())
				require.Equal(t, tc.record, readMarker(t, dir).Mode)
				return
			}
			require.ErrorIs(t, err, ErrWrongMode)
			require.Contains(t, err.Error(), dir)
			require.Contains(t, err.Error(), "nothing was changed")
			for _, w := range tc.refuse {
				require.Contains(t, err.Error(), w)
			}
			require.Equal(t, before, listDir(t, dir), "a refused data dir must be left untouched")
			markerAfter, err := os.ReadFile(filepath.Join(dir, markerFile))
			require.NoError(t, err)
			require.Equal(t, string(markerBefore), string(markerAfter), "a refused data dir's marker must be left untouched")
		})
	}
}

// TestOpen_NewDirRecordsMode: a new data dir records the mode it was
// opened in (none for an unchecked open).
func TestOpen_NewDirRecordsMode(t *testing.T) {
	for _, mode := range []Mode{ModeSingle, ModeCluster, ModeUnchecked} {
		t.Run(string(mode)+"_", func(t *testing.T) {
			d := filepath.Join(t.TempDir(), "data")
			cfg := DefaultConfig(d)
			cfg.Mode = mode
			s, err := Open(cfg)
			require.NoError(t, err)
			require.NoError(t, s.Close())
			require.Equal(t, mode, readMarker(t, d).Mode)
		})
	}
}

func TestConfig_Validate_Mode(t *testing.T) {
	cfg := DefaultConfig("x")
	cfg.Mode = "solo"
	require.ErrorContains(t, cfg.Validate(), `Mode "solo"`)
}
