package persistence

import (
	"context"
	"crypto/sha256"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/norsk-oss/norsk-manager/persistence/auditchain"
	"github.com/norsk-oss/norsk-manager/proto/internalpb"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
)

// aclBackup writes a backup of a store holding jobs and, when tokens > 0,
// an ACL record of that many tokens (the last one expired) bootstrapped
// twice, each write audited; it returns the backup's path and the
// tokens' secret hashes.
func aclBackup(t *testing.T, tokens int) (string, [][]byte) {
	t.Helper()
	src, log := TestStore(t)
	populate(t, log, "src", 3)
	now := time.Now()
	var hashes [][]byte
	if tokens > 0 {
		rec := &internalpb.AclRecord{BootstrapIndex: 2}
		for i := range tokens {
			h := sha256.Sum256(fmt.Appendf(nil, "secret-%d", i))
			tok := &managerpb.AclToken{AccessorId: fmt.Sprintf("acc-%d", i), Name: fmt.Sprintf("t%d", i), Role: "management"}
			if i == tokens-1 {
				tok.ExpireTime = timestamppb.New(now.Add(-time.Hour))
			}
			rec.Tokens = append(rec.Tokens, &internalpb.AclTokenRecord{Token: tok, SecretHash: h[:]})
			hashes = append(hashes, h[:])
		}
		b, err := proto.Marshal(rec)
		require.NoError(t, err)
		_, err = log.Append(context.Background(), ACLKey, 0, Change{Record: b, At: now,
			Audit: &internalpb.AuditIntent{Source: auditchain.SourceManager, Kind: "acl.bootstrap", Who: "anonymous", Payload: "{}"}})
		require.NoError(t, err)
	}
	file, _ := backupBytes(t, src)
	return writeTemp(t, file), hashes
}

// openRestored opens the restored single manager's data dir dir.
func openRestored(t *testing.T, dir string) *Store {
	t.Helper()
	cfg := DefaultConfig(dir)
	cfg.Mode, cfg.GCInterval = ModeSingle, 0
	s, err := Open(cfg)
	require.NoError(t, err)
	t.Cleanup(func() { s.Close() })
	return s
}

// TestRestoreDataDir_ACLTokens (issue 21 §8): a restore counts the ACL
// tokens it brings back — every one valid again, also one revoked after
// the backup — and with ACLReset drops them all and the bootstrap index,
// in an audited apply: the tokens no longer authenticate, the audit log
// records the reset and still verifies, and a first bootstrap (expecting
// the sequence read, as the gateway's) succeeds again.
func TestRestoreDataDir_ACLTokens(t *testing.T) {
	from, hashes := aclBackup(t, 3)
	at := time.Now().Truncate(time.Millisecond)

	t.Run("kept", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "restored")
		res, err := RestoreDataDir(RestoreDirConfig{From: from, Dir: dir, Mode: ModeSingle, Now: at})
		require.NoError(t, err)
		require.Equal(t, ACLSummary{Tokens: 3, Expired: 1, BootstrapIndex: 2}, res.ACL)
		require.False(t, res.ACLReset)
		s := openRestored(t, dir)
		require.NoError(t, s.View(func(r *Reader) error {
			_, err := r.ACLTokenBySecretHash(hashes[0])
			return err
		}), "a token in the backup authenticates again")
		require.NoError(t, s.Close())
		rep, err := Verify(context.Background(), dir, nil)
		require.NoError(t, err)
		require.True(t, rep.Sound(), "a restored dir, its event log restarted and empty, verifies sound: %v", rep.Damage)
	})

	t.Run("reset", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "restored")
		res, err := RestoreDataDir(RestoreDirConfig{From: from, Dir: dir, Mode: ModeSingle, ACLReset: true, Now: at})
		require.NoError(t, err)
		require.Equal(t, ACLSummary{Tokens: 3, Expired: 1, BootstrapIndex: 2}, res.ACL, "what was dropped")
		require.True(t, res.ACLReset)

		s := openRestored(t, dir)
		var seq Seq
		require.NoError(t, s.View(func(r *Reader) error {
			for _, h := range hashes {
				_, err := r.ACLTokenBySecretHash(h)
				require.ErrorIs(t, err, ErrNotFound, "a dropped token does not authenticate")
			}
			var err error
			_, seq, err = r.ACL()
			require.ErrorIs(t, err, ErrNotFound, "no record: ACLs not bootstrapped")
			sum, err := r.ACLSummary(at)
			require.NoError(t, err)
			require.Zero(t, sum)
			first, head, err := r.AuditBounds()
			require.NoError(t, err)
			require.Equal(t, uint64(2), head, "the backup's entry and the reset's")
			var kinds []*managerpb.AuditLogEntry
			require.NoError(t, r.AuditEntries(first, head, 10, func(e *managerpb.AuditLogEntry) error { kinds = append(kinds, e); return nil }))
			last := kinds[len(kinds)-1]
			require.Equal(t, ACLResetKind, last.GetKind())
			require.Equal(t, "norsk-manager restore", last.GetWho())
			require.Equal(t, float64(at.UnixMilli()), last.GetTimestampMs())
			require.JSONEq(t, `{"tokens_dropped":"3","bootstrap_index":"2","reason":"restore --acl-reset"}`, last.GetPayload())
			return nil
		}))
		require.NoError(t, s.Close())
		rep, err := Verify(context.Background(), dir, nil)
		require.NoError(t, err)
		require.True(t, rep.Sound(), "the restored dir, its audit chain with the reset, verifies: %v", rep.Damage)

		s = openRestored(t, dir)
		log := NewLocalLog(s)
		defer log.Close()
		b, err := proto.Marshal(&internalpb.AclRecord{BootstrapIndex: 1})
		require.NoError(t, err)
		_, err = log.Append(context.Background(), ACLKey, seq, Change{Record: b, At: time.Now()})
		require.NoError(t, err, "a first bootstrap again")
	})

	t.Run("nothing to reset", func(t *testing.T) {
		from, _ := aclBackup(t, 0)
		dir := filepath.Join(t.TempDir(), "restored")
		res, err := RestoreDataDir(RestoreDirConfig{From: from, Dir: dir, Mode: ModeSingle, ACLReset: true})
		require.NoError(t, err)
		require.Zero(t, res.ACL)
		require.False(t, res.ACLReset)
		s := openRestored(t, dir)
		require.NoError(t, s.View(func(r *Reader) error {
			_, head, err := r.AuditBounds()
			require.Zero(t, head, "no audit entry when nothing was reset")
			return err
		}))
	})
}
