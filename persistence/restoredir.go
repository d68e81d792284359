package persistence

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/norsk-oss/norsk-manager/persistence/backupfile"
)

// RestoreStaging is the directory inside a data dir where RestoreDataDir
// builds the restored store before moving it into place. Found in a data
// dir, it is the remains of a restore that did not finish.
const RestoreStaging = ".restore-incomplete"

// RestoreDirConfig configures RestoreDataDir.
type RestoreDirConfig struct {
	// From is the backup file. Required.
	From string
	// Dir is the new data dir: it must not exist or be an empty directory.
	// Required.
	Dir string
	// Mode is the mode the data dir is created in: ModeSingle, or
	// ModeCluster with Seed writing the Raft state (required then).
	Mode Mode
	// EventSkip is how far the event head moves (RestartEventLog); 0 means
	// RandomEventSkip().
	EventSkip uint64
	// Seed, if set, runs with the restored store open, before it is closed
	// and moved into place; dir is the data dir being built (not Dir). A
	// cluster restore writes the Raft state of a new cluster there.
	Seed func(s *Store, dir string) error
	// ACLReset drops every ACL token the backup holds, and its bootstrap
	// index, so that the restored manager needs a new AclBootstrap; the
	// reset is written to the audit log (kind ACLResetKind). Without it
	// every token in the backup is valid again, also one revoked after
	// the backup was taken (docs/design/backup.md, "ACL tokens").
	ACLReset bool
	// Now is the restore's time (the audit entry's, and what makes a token
	// expired in RestoreDirResult.ACL); zero means time.Now().
	Now time.Time
	// Logger receives logs; nil logs nothing.
	Logger *slog.Logger
}

// RestoreDirResult describes a restored data dir.
type RestoreDirResult struct {
	// Meta is the backup's metadata.
	Meta backupfile.Meta
	// EventBase is the event index the restored log continues after: every
	// index a client holds from before the restore gets a stream_reset.
	EventBase Index
	// ACL is what the backup's ACL record held: with ACLReset, what was
	// dropped; without, the tokens that are valid again (those not
	// Expired).
	ACL ACLSummary
	// ACLReset is true when ACLReset dropped a record (false if the backup
	// held none).
	ACLReset bool
}

// RestoreDataDir makes Dir a data dir holding exactly the backup From
// (docs/design/backup.md). It refuses, before writing anything, a Dir that
// is not empty and a backup that fails VerifyBackup (truncated, bad
// checksum, another format version: errors wrapping ErrCorrupt, naming the
// file and the reason). It then builds the store in Dir/RestoreStaging —
// restore, RestartEventLog, Seed — and moves it into Dir, the marker file
// last, so that a crash at any moment leaves either a Dir without a marker
// (which no manager opens and RestoreDataDir refuses, saying why) or the
// complete data dir. On failure it removes what it created.
func RestoreDataDir(cfg RestoreDirConfig) (RestoreDirResult, error) {
	var res RestoreDirResult
	switch {
	case cfg.From == "" || cfg.Dir == "":
		return res, errors.New("restore: the backup file and the data dir are required")
	case cfg.Mode != ModeSingle && cfg.Mode != ModeCluster:
		return res, fmt.Errorf("restore: mode %q must be %q or %q", cfg.Mode, ModeSingle, ModeCluster)
	case cfg.Mode == ModeCluster && cfg.Seed == nil:
		// A cluster member's store with state but no Raft state would be
		// bootstrapped at Raft index 1, and the FSM would skip every entry
		// up to the restored applied index.
		return res, errors.New("restore: a cluster member's data dir needs its Raft state (Seed)")
	}
	logger := cfg.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	created, err := checkRestoreTarget(cfg.Dir)
	if err != nil {
		return res, err
	}
	f, err := os.Open(cfg.From)
	if err != nil {
		return res, fmt.Errorf("restore: %w", err)
	}
	res.Meta, err = VerifyBackup(f)
	f.Close()
	if err != nil {
		return res, fmt.Errorf("restore: backup file %s: %w; nothing was written", cfg.From, err)
	}
	if created {
		if err := os.MkdirAll(cfg.Dir, 0o700); err != nil {
			return res, fmt.Errorf("restore: create data dir: %w", err)
		}
	}
	staging := filepath.Join(cfg.Dir, RestoreStaging)
	undo := func() {
		os.RemoveAll(staging)
		if created {
			os.Remove(cfg.Dir)
		}
	}
	if cfg.Now.IsZero() {
		cfg.Now = time.Now()
	}
	err = buildRestored(cfg, staging, &res, logger)
	if err != nil {
		undo()
		return res, err
	}
	if err := moveIntoPlace(staging, cfg.Dir); err != nil {
		// Past the first rename the dir is not ours to clean: leave it for
		// the operator, whom the error tells.
		return res, fmt.Errorf("restore: move the restored store into %s: %w; remove the directory's content and run restore again", cfg.Dir, err)
	}
	logger.Info("restored data dir", "dir", cfg.Dir, "from", cfg.From, "applied_index", res.Meta.AppliedIndex,
		"keys", res.Meta.Keys, "event_base", res.EventBase, "mode", cfg.Mode,
		"acl_tokens", res.ACL.Tokens, "acl_bootstrap_index", res.ACL.BootstrapIndex, "acl_reset", res.ACLReset)
	return res, nil
}

// checkRestoreTarget accepts a dir that does not exist (created: true) or
// is an empty directory.
func checkRestoreTarget(dir string) (created bool, err error) {
	entries, err := os.ReadDir(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return true, nil
	case err != nil:
		return false, fmt.Errorf("restore: data dir %s: %w", dir, err)
	case len(entries) == 0:
		return false, nil
	}
	names := make([]string, 0, 3)
	for _, e := range entries {
		if e.Name() == RestoreStaging {
			return false, fmt.Errorf("restore: data dir %s holds the remains of a restore that did not finish (%s); "+
				"remove the directory's content and run restore again; nothing was changed", dir, RestoreStaging)
		}
		if len(names) < 3 {
			names = append(names, e.Name())
		}
	}
	more := ""
	if len(entries) > len(names) {
		more = fmt.Sprintf(" and %d more", len(entries)-len(names))
	}
	return false, fmt.Errorf("restore: data dir %s is not empty (it holds %s%s): restore writes only a new or empty directory, "+
		"so that it can never mix a backup with other state; nothing was changed", dir, strings.Join(names, ", "), more)
}

// buildRestored makes staging a complete data dir holding the backup and
// records the restored event log's base and ACL record in res.
func buildRestored(cfg RestoreDirConfig, staging string, res *RestoreDirResult, logger *slog.Logger) error {
	scfg := DefaultConfig(staging)
	// AuditRetention 0: the ACL reset's audit entry trims nothing; the
	// manager trims with its own setting at its next entry.
	scfg.Mode, scfg.GCInterval, scfg.AuditRetention, scfg.Logger = cfg.Mode, 0, 0, logger
	s, err := Open(scfg)
	if err != nil {
		return fmt.Errorf("restore: %w", err)
	}
	err = fillRestored(s, cfg, res)
	if cerr := s.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("restore: close the restored store: %w", cerr)
	}
	return err
}

func fillRestored(s *Store, cfg RestoreDirConfig, res *RestoreDirResult) error {
	if _, err := s.RestoreBackup(cfg.From); err != nil {
		return fmt.Errorf("restore: backup file %s: %w", cfg.From, err)
	}
	var err error
	if cfg.ACLReset {
		res.ACL, res.ACLReset, err = s.resetACL(cfg.Now, "norsk-manager restore")
	} else {
		err = s.View(func(r *Reader) error {
			var err error
			res.ACL, err = r.ACLSummary(cfg.Now)
			return err
		})
	}
	if err != nil {
		return fmt.Errorf("restore: %w", err)
	}
	skip := cfg.EventSkip
	if skip == 0 {
		skip = RandomEventSkip()
	}
	if res.EventBase, err = s.RestartEventLog(skip); err != nil {
		return fmt.Errorf("restore: %w", err)
	}
	if cfg.Seed != nil {
		if err := cfg.Seed(s, s.cfg.Dir); err != nil {
			return fmt.Errorf("restore: %w", err)
		}
	}
	return nil
}

// moveIntoPlace renames every entry of staging into dir, the marker file
// last, syncing dir after each step, then removes staging.
func moveIntoPlace(staging, dir string) error {
	entries, err := os.ReadDir(staging)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if e.Name() == markerFile {
			continue
		}
		if err := os.Rename(filepath.Join(staging, e.Name()), filepath.Join(dir, e.Name())); err != nil {
			return err
		}
	}
	if err := syncDir(dir); err != nil {
		return err
	}
	if err := os.Rename(filepath.Join(staging, markerFile), filepath.Join(dir, markerFile)); err != nil {
		return err
	}
	if err := syncDir(dir); err != nil {
		return err
	}
	if err := os.RemoveAll(staging); err != nil {
		return err
	}
	return syncDir(dir)
}
