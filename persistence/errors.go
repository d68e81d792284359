package persistence

import (
	"errors"
	"fmt"
)

var (
	// ErrNotFound is returned by reads and Load when the entity (or event)
	// does not exist.
	ErrNotFound = errors.New("persistence: not found")

	// ErrSeqConflict is wrapped by *ConflictError: an append's expected
	// sequence did not match the entity's last sequence. Another writer
	// (a stale grain activation, or a concurrent one) got there first; the
	// caller reloads and retries or gives up.
	ErrSeqConflict = errors.New("persistence: sequence conflict")

	// ErrClosed is returned by every operation after Close.
	ErrClosed = errors.New("persistence: store closed")

	// ErrCorrupt is wrapped when stored bytes cannot be decoded or the data
	// dir is not a norsk-manager store of a known format.
	ErrCorrupt = errors.New("persistence: data corrupt")

	// ErrWrongMode is wrapped when a data dir belongs to the other manager
	// mode (Config.Mode): a single manager's dir opened by a cluster
	// member, or the reverse.
	ErrWrongMode = errors.New("persistence: data dir belongs to another manager mode")

	// ErrTooLarge is wrapped when one change is larger than the store
	// accepts in one append (Config.MaxBatchBytes); nothing is written.
	ErrTooLarge = errors.New("persistence: change too large")

	// ErrNoSpace is wrapped by *NoSpaceError: a write refused because the
	// data dir's filesystem has less free space than the reserve
	// (Config.MinFreeDisk, DiskGuard). Nothing was written; writes resume
	// by themselves once space is freed. Answered RESOURCE_EXHAUSTED.
	ErrNoSpace = errors.New("persistence: data dir low on space")

	// ErrEventsTrimmed is returned by ReadEvents when the requested index is
	// older than the oldest retained event.
	ErrEventsTrimmed = errors.New("persistence: events no longer retained")

	// ErrRestoring is returned by BeginBackup while a snapshot restore
	// replaces the store's content (a cluster member installing the
	// leader's snapshot): there is no consistent state to copy until it
	// ends. Retry later, or on another manager.
	ErrRestoring = errors.New("persistence: the store is being restored from a snapshot")

	// ErrInUse is wrapped when a store is opened while another process (a
	// running manager, or norsk-manager verify) holds it: the data dir is
	// in use by another manager. Nothing was read or changed.
	ErrInUse = errors.New("persistence: data dir in use by another manager")
)

// ConflictError reports a failed expected-sequence check.
type ConflictError struct {
	Key      EntityKey
	Expected Seq
	Actual   Seq
}

// Error names the entity and both sequences.
func (e *ConflictError) Error() string {
	return fmt.Sprintf("persistence: sequence conflict on %s: expected %d, found %d", e.Key, e.Expected, e.Actual)
}

// Unwrap makes errors.Is(err, ErrSeqConflict) true.
func (e *ConflictError) Unwrap() error { return ErrSeqConflict }

// DamageError reports a store file that fails an integrity check (a
// checksum, a missing table, an undecodable record). Open refuses such a
// store and Verify reports it; nothing in the store was changed. It wraps
// ErrCorrupt.
type DamageError struct {
	// Path is the damaged file (a badger table, the MANIFEST, a value log),
	// or the store directory when no single file is to blame.
	Path string
	// Reason says what failed, in words (e.g. "block 3 fails its checksum").
	Reason string
	// Err is the underlying error, if any.
	Err error
}

// Error names the file and the reason.
func (e *DamageError) Error() string {
	if e.Err != nil {
		return fmt.Sprintf("%s is damaged: %s (%v)", e.Path, e.Reason, e.Err)
	}
	return fmt.Sprintf("%s is damaged: %s", e.Path, e.Reason)
}

// Unwrap makes errors.Is(err, ErrCorrupt) true and keeps the cause.
func (e *DamageError) Unwrap() []error {
	if e.Err != nil {
		return []error{ErrCorrupt, e.Err}
	}
	return []error{ErrCorrupt}
}
