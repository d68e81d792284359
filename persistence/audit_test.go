package persistence

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/norsk-oss/norsk-manager/persistence/auditchain"
	"github.com/norsk-oss/norsk-manager/proto/internalpb"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
)

func intent(kind, id string) *internalpb.AuditIntent {
	return &internalpb.AuditIntent{Source: auditchain.SourceManager, Kind: kind, Who: "alice", Payload: fmt.Sprintf(`{"job_id":%q}`, id)}
}

// auditEntries reads the whole audit log and its bounds.
func auditEntries(t *testing.T, s *Store) (entries []*managerpb.AuditLogEntry, first, head uint64) {
	t.Helper()
	require.NoError(t, s.View(func(r *Reader) error {
		var err error
		if first, head, err = r.AuditBounds(); err != nil {
			return err
		}
		return r.AuditEntries(0, 0, 0, func(e *managerpb.AuditLogEntry) error {
			entries = append(entries, e)
			return nil
		})
	}))
	return entries, first, head
}

// verifyChain runs the chain verifier over entries.
func verifyChain(entries []*managerpb.AuditLogEntry) error {
	var v auditchain.Verifier
	for _, e := range entries {
		if err := v.Next(e); err != nil {
			return err
		}
	}
	return nil
}

// TestFSM_Audit_ChainedWithTheChange: an append with an audit intent
// writes one entry in the same apply, with the append's time, the intent's
// fields and the next seq, chained to the one before; an audit-only append
// writes just its entry and returns its seq.
func TestFSM_Audit_ChainedWithTheChange(t *testing.T) {
	s, l := TestStore(t)
	ctx := context.Background()
	at := time.UnixMilli(1_700_000_000_123)
	for i, id := range []string{"a", "b", "c"} {
		_, err := l.Append(ctx, JobKey(id), 0, Change{RequestID: "r" + id, Record: jobRecord(id, nil, time.Time{}),
			At: at.Add(time.Duration(i) * time.Second), Audit: intent("job.create", id)})
		require.NoError(t, err)
	}
	res, err := l.Append(ctx, "", 0, Change{At: at, Audit: &internalpb.AuditIntent{Source: "norsk-mgr", Kind: "origin.switch", Who: "bob", Payload: "opaque"}})
	require.NoError(t, err)
	require.Equal(t, Seq(4), res.Seq, "an audit-only append returns the entry's seq")

	entries, first, head := auditEntries(t, s)
	require.Len(t, entries, 4)
	require.Equal(t, []uint64{1, 4}, []uint64{first, head})
	require.NoError(t, verifyChain(entries))
	e := entries[1]
	require.Equal(t, int64(2), e.GetSeq())
	require.Equal(t, float64(at.Add(time.Second).UnixMilli()), e.GetTimestampMs())
	require.Equal(t, []string{"manager", "job.create", "alice", `{"job_id":"b"}`}, []string{e.GetSource(), e.GetKind(), e.GetWho(), e.GetPayload()})
	require.Equal(t, entries[0].GetHash(), e.GetPrevHash())
	require.Equal(t, "origin.switch", entries[3].GetKind())
	// Ranges.
	var seqs []int64
	require.NoError(t, s.View(func(r *Reader) error {
		return r.AuditEntries(2, 3, 0, func(e *managerpb.AuditLogEntry) error { seqs = append(seqs, e.GetSeq()); return nil })
	}))
	require.Equal(t, []int64{2, 3}, seqs)
}

// TestFSM_Audit_OnlyAppliedChanges: a conflicting append, a repeated
// request id and a malformed audit-only append write no entry.
func TestFSM_Audit_OnlyAppliedChanges(t *testing.T) {
	s, l := TestStore(t)
	ctx := context.Background()
	ch := Change{RequestID: "r1", Record: jobRecord("a", nil, time.Time{}, "r1"), At: time.Now(), Audit: intent("job.create", "a")}
	_, err := l.Append(ctx, JobKey("a"), 0, ch)
	require.NoError(t, err)
	res, err := l.Append(ctx, JobKey("a"), 1, ch) // same request id
	require.NoError(t, err)
	require.True(t, res.Duplicate)
	ch.RequestID = "r2"
	_, err = l.Append(ctx, JobKey("a"), 0, ch) // stale expected seq
	require.ErrorIs(t, err, ErrSeqConflict)
	_, err = l.Append(ctx, "", 3, Change{At: time.Now(), Audit: intent("x", "y")})
	require.ErrorIs(t, err, ErrCorrupt)
	entries, _, _ := auditEntries(t, s)
	require.Len(t, entries, 1)
}

// TestFSM_Audit_Retention: beyond AuditRetention the oldest entries are
// dropped and the oldest retained one replaced by an anchor carrying its
// hash, so the log still verifies; appends go on chaining.
func TestFSM_Audit_Retention(t *testing.T) {
	cfg := DefaultConfig(t.TempDir())
	cfg.SyncWrites, cfg.GCInterval, cfg.AuditRetention = false, 0, 3
	s, l := TestStoreWithConfig(t, cfg)
	ctx := context.Background()
	var all []string
	for i := range 10 {
		_, err := l.Append(ctx, "", 0, Change{At: time.UnixMilli(int64(i)), Audit: intent("k", fmt.Sprint(i))})
		require.NoError(t, err)
		entries, _, _ := auditEntries(t, s)
		all = append(all, entries[len(entries)-1].GetHash())
	}
	entries, first, head := auditEntries(t, s)
	require.Equal(t, []uint64{7, 10}, []uint64{first, head})
	require.Len(t, entries, 4, "the anchor and 3 entries")
	require.Equal(t, auditchain.KindAnchor, entries[0].GetKind())
	require.Equal(t, all[6], entries[0].GetHash(), "the anchor keeps the hash of the entry it replaces")
	require.NoError(t, verifyChain(entries))
}

// TestFSM_Audit_Deterministic: two stores applying the same appends hold
// byte-identical chains (every replica computes the same hashes).
func TestFSM_Audit_Deterministic(t *testing.T) {
	s1, l1 := TestStore(t)
	s2, l2 := TestStore(t)
	at := time.UnixMilli(1_700_000_000_000)
	for _, l := range []*LocalLog{l1, l2} {
		for i := range 5 {
			id := fmt.Sprint("j", i)
			_, err := l.Append(context.Background(), JobKey(id), 0, Change{Record: jobRecord(id, nil, time.Time{}), At: at, Audit: intent("job.create", id)})
			require.NoError(t, err)
		}
	}
	e1, _, _ := auditEntries(t, s1)
	e2, _, _ := auditEntries(t, s2)
	require.Len(t, e1, 5)
	for i := range e1 {
		require.Equal(t, e1[i].GetHash(), e2[i].GetHash())
	}
}

// TestSnapshot_CarriesAuditChain: a snapshot restored into another store
// carries the chain, and the next append chains onto its head.
func TestSnapshot_CarriesAuditChain(t *testing.T) {
	s1, l1 := TestStore(t)
	for i := range 4 {
		_, err := l1.Append(context.Background(), "", 0, Change{At: time.Now(), Audit: intent("k", fmt.Sprint(i))})
		require.NoError(t, err)
	}
	var buf bytes.Buffer
	require.NoError(t, s1.WriteSnapshot(&buf))
	s2, l2 := TestStore(t)
	require.NoError(t, s2.RestoreSnapshot(&buf))
	_, err := l2.Append(context.Background(), "", 0, Change{At: time.Now(), Audit: intent("k", "after")})
	require.NoError(t, err)
	e1, _, _ := auditEntries(t, s1)
	e2, _, head := auditEntries(t, s2)
	require.Equal(t, uint64(5), head)
	require.Equal(t, e1[3].GetHash(), e2[3].GetHash())
	require.NoError(t, verifyChain(e2))
}

// TestVerify_AuditTampered: Verify checks the chain of a stopped data dir
// and, after one byte of a stored entry is changed (through badger, so
// every checksum passes), names that entry.
func TestVerify_AuditTampered(t *testing.T) {
	d := filepath.Join(t.TempDir(), "data")
	cfg := DefaultConfig(d)
	cfg.Mode, cfg.SyncWrites, cfg.GCInterval = ModeSingle, false, 0
	s, err := Open(cfg)
	require.NoError(t, err)
	l := NewLocalLog(s)
	for i := range 6 {
		id := fmt.Sprint("j", i)
		_, err := l.Append(context.Background(), JobKey(id), 0, Change{Record: jobRecord(id, nil, time.Time{}), At: time.Now(), Audit: intent("job.create", id)})
		require.NoError(t, err)
	}
	l.Close()
	require.NoError(t, s.Close())

	r, err := Verify(context.Background(), d, nil)
	require.NoError(t, err)
	require.True(t, r.Sound(), "%v", r.Damage)
	require.Equal(t, []uint64{6, 1, 6}, []uint64{uint64(r.Store.AuditEntries), r.Store.AuditFirst, r.Store.AuditHead})

	require.NoError(t, TamperAuditEntry(d, 4))
	r, err = Verify(context.Background(), d, nil)
	require.NoError(t, err)
	require.False(t, r.Sound())
	require.Len(t, r.Damage, 1, "one changed entry is one damage: %v", r.Damage)
	require.Contains(t, r.Damage[0].Error(), "audit entry 4: its content does not match its hash")

	require.True(t, errors.Is(TamperAuditEntry(d, 99), ErrNotFound))
}
