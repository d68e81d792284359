package persistence

import (
	"fmt"
	"log/slog"
	"strings"

	"github.com/dgraph-io/badger/v4"
	"github.com/dgraph-io/badger/v4/options"
)

// withIntegrity turns on the checksum verification every store runs with
// (integrity.go): every table block read from disk and every value-log
// read is verified; whole tables are verified before open by
// inspectBadgerDir instead of by badger.
func withIntegrity(opts badger.Options) badger.Options {
	return opts.WithChecksumVerificationMode(options.OnBlockRead).WithVerifyValueChecksum(true)
}

// openedDir is a badger DB opened by openBadgerDir with the lock that
// keeps other processes out of its directory.
type openedDir struct {
	db   *badger.DB
	lock *dirLock
	// inspection is what the pre-open checks found (tables, their size).
	inspection dirInspection
}

// close closes the DB, then releases the lock.
func (o *openedDir) close() error {
	err := o.db.Close()
	o.lock.release()
	return err
}

// openBadgerDir opens the badger DB in opts.Dir for a store of mode (which
// selects the advice a damage error gives; dataDir names the manager's
// data dir, which every error message starts with). In order, and with
// nothing changed when a step fails:
//
//  1. it takes the directory's lock for as long as the DB is open, or
//     fails with ErrInUse (another manager, or verify, holds it);
//  2. it verifies the MANIFEST and every table (inspectBadgerDir) and
//     fails with an error that unwraps to a *DamageError (and ErrCorrupt),
//     naming the first damaged file, the count of others, and the way out;
//  3. it removes zero-length logs a crash left (removeEmptyLogs), which
//     badger cannot open;
//  4. it opens badger with checksum verification on (withIntegrity).
func openBadgerDir(opts badger.Options, dataDir string, mode Mode, logger *slog.Logger) (*openedDir, error) {
	dir := opts.Dir
	lock, err := lockStoreDir(dir, dataDir)
	if err != nil {
		return nil, err
	}
	opts = withIntegrity(opts)
	in, err := inspectBadgerDir(dir, opts)
	if err != nil {
		lock.release()
		return nil, fmt.Errorf("data dir %s: %w", dataDir, err)
	}
	if len(in.damage) > 0 {
		lock.release()
		return nil, damageRefusal(dataDir, mode, in.damage)
	}
	if err := removeEmptyLogs(dir, in.emptyLogs, logger); err != nil {
		lock.release()
		return nil, fmt.Errorf("data dir %s: %w", dataDir, err)
	}
	db, err := badger.Open(opts)
	if err != nil {
		lock.release()
		return nil, fmt.Errorf("data dir %s: open badger store in %s: %w", dataDir, dir, err)
	}
	return &openedDir{db: db, lock: lock, inspection: in}, nil
}

// damageRefusal is the error Open returns for a damaged store: the first
// damaged file, how many more, and what to do.
func damageRefusal(dataDir string, mode Mode, damage []*DamageError) error {
	return &refusal{dataDir: dataDir, mode: mode, damage: damage}
}

// refusal is a damaged store's refusal; it unwraps to the first
// *DamageError (and so to ErrCorrupt) and keeps the others for Verify.
type refusal struct {
	dataDir string
	mode    Mode
	damage  []*DamageError
}

// Error names the first damaged file, the others' count, the advice for
// the mode and the verify command.
func (e *refusal) Error() string {
	more := ""
	if n := len(e.damage) - 1; n > 0 {
		more = fmt.Sprintf(" (and %d more damaged file(s))", n)
	}
	return fmt.Sprintf("data dir %s: store file %v%s; refusing to start on a store that may have lost data, nothing was changed. %s. "+
		"norsk-manager verify --data-dir %s lists every damaged file",
		e.dataDir, e.damage[0], more, DamageAdvice(e.mode), e.dataDir)
}

// Unwrap returns the first damage (errors.As *DamageError, errors.Is
// ErrCorrupt).
func (e *refusal) Unwrap() error { return e.damage[0] }

// DamageAdvice says what an operator can do about a damaged store of a
// manager of mode (ModeUnchecked: either).
func DamageAdvice(mode Mode) string {
	restore := "restore the latest snapshot of this manager with norsk-manager restore"
	rebuild := "rebuild this cluster member from the cluster: stop it, move its --data-dir aside and start it again with the same " +
		"--name and cluster flags on an empty --data-dir; the leader sends it the cluster's state (README, \"Rebuilding a cluster member\")"
	switch mode {
	case ModeSingle:
		return "To recover, " + restore
	case ModeCluster:
		return "To recover, " + rebuild
	}
	return "To recover, " + strings.Join([]string{restore, "or, for a cluster member, " + rebuild}, " ")
}
