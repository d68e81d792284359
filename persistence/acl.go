package persistence

import (
	"errors"
	"fmt"

	"github.com/dgraph-io/badger/v4"
	"google.golang.org/protobuf/proto"

	"github.com/norsk-oss/norsk-manager/proto/internalpb"
)

// ACL tokens (issue 12 §2; docs/design/security.md, "ACL tokens"). Every
// token of the cluster is in one record, ACLKey, written whole through the
// journal like any entity: bootstrap, create and revoke are each one
// append expecting the sequence read, so two bootstraps cannot both
// succeed. The record holds each secret's SHA-256, never a secret, and
// the secondary index ix/acl/secret/<hash> maps a presented secret's hash
// to its token in one read, on every replica (a revocation removes the
// entry in the same transaction as the record).

// ACLKey is the entity key of the ACL record (internalpb.AclRecord).
const ACLKey = EntityKey(KindACL + "/tokens")

// SecretHashLen is the length of a token's secret hash (SHA-256).
const SecretHashLen = 32

// ACL returns the ACL record and its sequence, or ErrNotFound (with
// sequence 0) before the first bootstrap.
func (r *Reader) ACL() (*internalpb.AclRecord, Seq, error) {
	rec := &internalpb.AclRecord{}
	seq, err := r.entity(ACLKey, rec)
	return rec, seq, err
}

// ACLTokenBySecretHash returns the stored token whose secret has the
// SHA-256 hash, or ErrNotFound (no such token, or revoked). The caller
// compares the hash itself in constant time (the token's SecretHash) if
// it wants to; the lookup is by the hash, so its timing says nothing about
// the secret.
func (r *Reader) ACLTokenBySecretHash(hash []byte) (*internalpb.AclTokenRecord, error) {
	if len(hash) != SecretHashLen {
		return nil, fmt.Errorf("acl secret hash of %d bytes, want %d: %w", len(hash), SecretHashLen, ErrNotFound)
	}
	item, err := r.txn.Get(aclSecretKey(hash))
	if errors.Is(err, badger.ErrKeyNotFound) {
		return nil, ErrNotFound
	}
	if err != nil {
		return nil, err
	}
	tok := &internalpb.AclTokenRecord{}
	if err := item.Value(func(v []byte) error { return proto.Unmarshal(v, tok) }); err != nil {
		return nil, fmt.Errorf("decode acl token index entry: %v: %w", err, ErrCorrupt)
	}
	return tok, nil
}

func aclSecretKey(hash []byte) []byte { return append([]byte(ixACLSecret), hash...) }

// aclIndexEntries indexes every token of r by its secret hash, the value
// being the token record itself. A token without a well-formed hash is
// not indexed (it can never authenticate).
func aclIndexEntries(r *internalpb.AclRecord) map[string][]byte {
	m := make(map[string][]byte, len(r.GetTokens()))
	for _, t := range r.GetTokens() {
		if len(t.GetSecretHash()) != SecretHashLen {
			continue
		}
		b, err := proto.MarshalOptions{Deterministic: true}.Marshal(t)
		if err != nil {
			continue // unreachable: a decoded message marshals
		}
		m[string(aclSecretKey(t.GetSecretHash()))] = b
	}
	return m
}
