package actors

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/norsk-oss/norsk-manager/persistence"
	"github.com/norsk-oss/norsk-manager/proto/errorpb"
	"github.com/norsk-oss/norsk-manager/proto/internalpb"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
)

// MaxRecentRequests bounds how many request ids a record remembers for
// answering retried commands. It is a window counted in writes to the
// entity, so it must outlast a retry's delay at the entity's write rate:
// with 32, a retried UpdateJob of a job written ~20 times a second whose
// first attempt committed during a 2 s actor-layer rejoin was no longer
// recognised and was refused as a stale hash although it had been applied
// (test/robustness, seed 10260787532910283385). 256 ids cost a hot
// record about 10 KB; a record written less often holds fewer.
const MaxRecentRequests = 256

// RememberRequest returns recent with id appended, keeping the newest
// MaxRecentRequests; an empty id leaves recent unchanged.
func RememberRequest(recent []string, id string) []string {
	if id == "" {
		return recent
	}
	recent = append(recent, id)
	if over := len(recent) - MaxRecentRequests; over > 0 {
		recent = slices.Delete(recent, 0, over)
	}
	return recent
}

// Commit is what every grain does to change its entity: append the next
// record (nil: delete the entity) with its events through the journal,
// expecting seq. The returned reply is nil on success and otherwise the
// answer for the caller: ABORTED when another writer got there first,
// RESOURCE_EXHAUSTED when the change is over the store's size limits or
// the data dir's filesystem is under its free-space reserve (not applied), UNAVAILABLE when the outcome is unknown (a timeout, a closed
// store). After any failure, and for a Duplicate result, the grain must
// reload its record before the next command.
func Commit(j persistence.Journal, key persistence.EntityKey, seq persistence.Seq, reqID string,
	next proto.Message, events []*managerpb.EventStreamEvent, at time.Time, timeout time.Duration) (persistence.AppendResult, *internalpb.Reply) {
	return CommitAudited(j, key, seq, reqID, next, events, at, timeout, nil)
}

// CommitAudited is Commit whose append also writes audit (nil: none) to
// the audit log, in the same apply, if the change is applied
// (docs/design/audit.md).
func CommitAudited(j persistence.Journal, key persistence.EntityKey, seq persistence.Seq, reqID string,
	next proto.Message, events []*managerpb.EventStreamEvent, at time.Time, timeout time.Duration,
	audit *internalpb.AuditIntent) (persistence.AppendResult, *internalpb.Reply) {
	change := persistence.Change{RequestID: reqID, Events: events, At: at, Delete: next == nil, Audit: audit}
	if next != nil {
		b, err := proto.Marshal(next)
		if err != nil {
			return persistence.AppendResult{}, Fail(errorpb.Code_INTERNAL, "%s: encode record: %v", key, err)
		}
		change.Record = b
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	res, err := j.Append(ctx, key, seq, change)
	switch {
	case errors.Is(err, persistence.ErrSeqConflict):
		return res, Fail(errorpb.Code_ABORTED, "%s was modified concurrently; retry", key)
	case errors.Is(err, persistence.ErrTooLarge):
		return res, Fail(errorpb.Code_RESOURCE_EXHAUSTED, "%s: the change is too large to store: %v", key, err)
	case errors.Is(err, persistence.ErrNoSpace):
		var ns *persistence.NoSpaceError
		if errors.As(err, &ns) {
			return res, Fail(errorpb.Code_RESOURCE_EXHAUSTED, "%v", ns)
		}
		return res, Fail(errorpb.Code_RESOURCE_EXHAUSTED, "%s: %v", key, err)
	case err != nil:
		return res, Fail(errorpb.Code_UNAVAILABLE, "%s: could not persist the change: %v", key, err)
	}
	return res, nil
}

// LoadRecord reads key's record through the journal into rec. found is
// false for an entity that does not exist; seq is then that of its
// tombstone (0 if it never existed), which a re-creation must expect. An
// error (I/O, undecodable bytes) is for the grain to crash on: its
// supervisor restarts it and it loads again.
func LoadRecord(j persistence.Journal, key persistence.EntityKey, rec proto.Message) (found bool, seq persistence.Seq, err error) {
	found, seq, _, err = LoadRecordOrTombstone(j, key, rec)
	return found, seq, err
}

// LoadRecordOrTombstone is LoadRecord that also returns, for a deleted
// entity, the request ids its tombstone keeps (the commands applied to it
// last, its delete included): a grain answers a retried command among
// them as a repeat, and carries them into the record of a re-creation, so
// that a retried delete of the old incarnation never deletes the new one.
func LoadRecordOrTombstone(j persistence.Journal, key persistence.EntityKey, rec proto.Message) (found bool, seq persistence.Seq, deleted []string, err error) {
	b, seq, err := j.Load(context.Background(), key)
	switch {
	case errors.Is(err, persistence.ErrNotFound):
		return false, seq, persistence.TombstoneRequests(b), nil
	case err != nil:
		return false, 0, nil, fmt.Errorf("load %s: %w", key, err)
	}
	if err := proto.Unmarshal(b, rec); err != nil {
		return false, 0, nil, fmt.Errorf("decode %s: %w", key, err)
	}
	return true, seq, nil, nil
}

// FreshnessTimeout bounds Current when the command carries no deadline
// (one-way reports).
const FreshnessTimeout = 10 * time.Second

// Current tells a grain, before it answers a command from its in-memory
// record, whether that record is still the entity's newest committed one:
// it compares seq with Journal.LastSeq, which in a cluster first waits for
// the read barrier, so the comparison reflects every write acknowledged
// (through any manager, by any activation) before the call. stale is true
// when the grain must reload before it decides: another activation of the
// grain (a manager that was frozen or cut off and runs again, or the
// overlap of a passivation) or another manager wrote since it loaded.
//
// Fencing appends with the expected sequence protects writes only; a
// refusal (stale current_hash, "no such instance", NOT_FOUND) or a read
// answered from an old record would be a false answer. This is the check
// that makes every answer linearizable (ARCHITECTURE §7.7;
// docs/design/grains.md "Freshness").
//
// The wait is bounded by deadline (the command's) or FreshnessTimeout. A
// non-nil fail is the answer for the caller when the check could not be
// made: UNAVAILABLE (no Raft leader, or no answer in time), nothing done.
func Current(j persistence.Journal, key persistence.EntityKey, seq persistence.Seq, deadline *timestamppb.Timestamp) (stale bool, fail *internalpb.Reply) {
	until := time.Now().Add(FreshnessTimeout)
	if deadline != nil && deadline.AsTime().Before(until) {
		until = deadline.AsTime()
	}
	ctx, cancel := context.WithDeadline(context.Background(), until)
	defer cancel()
	last, err := j.LastSeq(ctx, key)
	if err != nil {
		return false, Fail(errorpb.Code_UNAVAILABLE, "%s: could not confirm the record is current, nothing was done: %v", key, err)
	}
	return last != seq, nil
}
