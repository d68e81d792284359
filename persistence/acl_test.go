package persistence

import (
	"context"
	"crypto/sha256"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/norsk-oss/norsk-manager/proto/internalpb"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
)

func aclToken(id, secret string) *internalpb.AclTokenRecord {
	h := sha256.Sum256([]byte(secret))
	return &internalpb.AclTokenRecord{Token: &managerpb.AclToken{AccessorId: id, Name: "n-" + id, Role: "read"}, SecretHash: h[:]}
}

func aclLookup(t *testing.T, s *Store, secret string) (*internalpb.AclTokenRecord, error) {
	t.Helper()
	h := sha256.Sum256([]byte(secret))
	var tok *internalpb.AclTokenRecord
	err := s.View(func(r *Reader) error {
		var err error
		tok, err = r.ACLTokenBySecretHash(h[:])
		return err
	})
	return tok, err
}

// TestStore_ACL_IndexFollowsRecord: a token is found by its secret's hash
// once stored, no longer once removed from the record (a revocation), and
// the store verifies sound with the index (Verify recomputes it).
func TestStore_ACL_IndexFollowsRecord(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	cfg := DefaultConfig(dir)
	cfg.GCInterval = 0
	s, err := Open(cfg)
	require.NoError(t, err)
	l := NewLocalLog(s)

	err = s.View(func(r *Reader) error { _, _, err := r.ACL(); return err })
	require.ErrorIs(t, err, ErrNotFound)

	rec := &internalpb.AclRecord{BootstrapIndex: 1, Tokens: []*internalpb.AclTokenRecord{aclToken("a", "sa"), aclToken("b", "sb")}}
	_, err = l.Append(ctx, ACLKey, 0, Change{Record: mustMarshal(t, rec)})
	require.NoError(t, err)
	tok, err := aclLookup(t, s, "sb")
	require.NoError(t, err)
	require.Equal(t, "b", tok.GetToken().GetAccessorId())
	_, err = aclLookup(t, s, "nope")
	require.ErrorIs(t, err, ErrNotFound)

	rec.Tokens = rec.Tokens[:1] // revoke b
	_, err = l.Append(ctx, ACLKey, 1, Change{Record: mustMarshal(t, rec)})
	require.NoError(t, err)
	_, err = aclLookup(t, s, "sb")
	require.ErrorIs(t, err, ErrNotFound, "a revoked token is gone from the index")
	tok, err = aclLookup(t, s, "sa")
	require.NoError(t, err)
	require.Equal(t, "a", tok.GetToken().GetAccessorId())
	err = s.View(func(r *Reader) error {
		got, seq, err := r.ACL()
		require.Equal(t, Seq(2), seq)
		require.Len(t, got.GetTokens(), 1)
		return err
	})
	require.NoError(t, err)

	l.Close()
	require.NoError(t, s.Close())
	rep, err := Verify(ctx, dir, nil)
	require.NoError(t, err)
	require.True(t, rep.Sound(), "%v", rep.Damage)
	require.Equal(t, 1, rep.Store.Entities[KindACL])
}

// TestReader_ACLTokenBySecretHash_BadLength: a hash that is not 32 bytes
// finds nothing (and is not a prefix scan).
func TestReader_ACLTokenBySecretHash_BadLength(t *testing.T) {
	s, _ := TestStore(t)
	err := s.View(func(r *Reader) error { _, err := r.ACLTokenBySecretHash([]byte("short")); return err })
	require.ErrorIs(t, err, ErrNotFound)
}
