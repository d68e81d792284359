package persistence

import (
	"context"
	"time"

	"github.com/norsk-oss/norsk-manager/proto/internalpb"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
)

// Seq is an entity's sequence number: the number of appends applied to it.
// 0 means the entity does not exist (or was deleted).
type Seq uint64

// Index is a position in the global event log, 1-based and strictly
// increasing in apply order. 0 means "before the first event".
type Index uint64

// Change is what one append does to one entity.
type Change struct {
	// RequestID identifies the command that produced the change. A change
	// whose RequestID is among the entity's recent ones is not applied
	// again (AppendResult.Duplicate). May be empty.
	RequestID string
	// Record is the entity's next state, a marshalled internalpb record
	// (JobRecord for "job/…", NodeRecord for "node/…", MockPoolRecord for
	// "pool/…", PoolRecord for "placementpool/…"). Ignored when Delete is
	// set.
	Record []byte
	// Delete removes the entity (and its index entries).
	Delete bool
	// Events are appended to the global event log in order; their
	// log_index is assigned by the store.
	Events []*managerpb.EventStreamEvent
	// At is the time of the change (stored with the events, and the
	// audit entry's timestamp).
	At time.Time
	// Audit, if set, is the audit entry the change writes in the same
	// apply when it is applied (not on a conflict, a failure or a
	// Duplicate). With an empty entity key the append writes only this
	// entry (AppendAuditEntry); expectedSeq and the other fields must then
	// be zero. docs/design/audit.md.
	Audit *internalpb.AuditIntent
}

// AppendResult is the outcome of a successful append.
type AppendResult struct {
	// Seq is the entity's sequence number after the append; for an
	// audit-only append (Change.Audit with an empty key), the seq of the
	// audit entry written.
	Seq Seq
	// LastEvent is the log index of the last event the append wrote (0 if
	// it wrote none).
	LastEvent Index
	// Duplicate is true if the change's RequestID had already been applied
	// to the entity; nothing was written and Seq is the current sequence.
	Duplicate bool
}

// Journal is the write path grains use. Implementations: *LocalLog (one
// manager, group commit), and the Raft log of the HA manager.
type Journal interface {
	// Append applies change to the entity key if and only if the entity's
	// last sequence equals expectedSeq (0: the entity must not exist). It
	// blocks until the change is durable (fsynced; in a cluster, committed
	// by a quorum) and applied to the local FSM, or ctx ends. A failed check
	// returns a *ConflictError (errors.Is ErrSeqConflict) and writes
	// nothing. After ctx ends the append may still be applied: the outcome
	// is unknown, as with any consensus write. The Events slice must not be
	// modified after the call.
	Append(ctx context.Context, key EntityKey, expectedSeq Seq, change Change) (AppendResult, error)

	// Load returns the entity's record bytes and sequence as applied on
	// this manager, or ErrNotFound; for a deleted entity, ErrNotFound with
	// the tombstone's sequence and payload (TombstoneRequests). The
	// returned slice is the caller's.
	Load(ctx context.Context, key EntityKey) ([]byte, Seq, error)

	// LastSeq returns the entity's sequence (0 if it does not exist).
	LastSeq(ctx context.Context, key EntityKey) (Seq, error)
}
