package persistence

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/dgraph-io/badger/v4"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/norsk-oss/norsk-manager/persistence/auditchain"
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

// ACLSummary counts what a store's ACL record holds (never a secret).
type ACLSummary struct {
	// Tokens is the number of tokens, Expired those of them whose expire
	// time had passed at the time given.
	Tokens, Expired int
	// BootstrapIndex is how many times AclBootstrap succeeded (0: ACLs
	// were never bootstrapped).
	BootstrapIndex uint64
}

// ACLSummary counts the ACL record's tokens, and those expired at now;
// the zero summary before the first bootstrap.
func (r *Reader) ACLSummary(now time.Time) (ACLSummary, error) {
	rec, _, err := r.ACL()
	if errors.Is(err, ErrNotFound) {
		return ACLSummary{}, nil
	}
	if err != nil {
		return ACLSummary{}, err
	}
	sum := ACLSummary{Tokens: len(rec.GetTokens()), BootstrapIndex: rec.GetBootstrapIndex()}
	for _, t := range rec.GetTokens() {
		if exp := t.GetToken().GetExpireTime(); exp != nil && !exp.AsTime().After(now) {
			sum.Expired++
		}
	}
	return sum, nil
}

// ACLResetKind is the audit kind of a reset of the ACL record by
// "norsk-manager restore --acl-reset" (docs/design/backup.md).
const ACLResetKind = "acl.reset"

// resetACL deletes the ACL record — every token, their secret-index
// entries and the bootstrap index, so that AclBootstrap succeeds again
// without the reset file — as the next applied index, with an audit entry
// of kind ACLResetKind by who at the time at, whose payload counts what
// was dropped. It returns what the record held and whether there was one
// to drop (none: ACLs never bootstrapped; nothing is written). The store
// must have no log running (restore: offline, before the Raft state is
// seeded).
func (s *Store) resetACL(at time.Time, who string) (ACLSummary, bool, error) {
	var sum ACLSummary
	var seq Seq
	err := s.View(func(r *Reader) error {
		var err error
		if _, seq, err = r.ACL(); err != nil {
			return err
		}
		sum, err = r.ACLSummary(at)
		return err
	})
	if errors.Is(err, ErrNotFound) {
		return sum, false, nil
	}
	if err != nil {
		return sum, false, err
	}
	payload, err := json.Marshal(map[string]string{
		"tokens_dropped": strconv.Itoa(sum.Tokens), "bootstrap_index": strconv.FormatUint(sum.BootstrapIndex, 10),
		"reason": "restore --acl-reset",
	})
	if err != nil {
		return sum, false, err
	}
	cmd := &internalpb.AppendCommand{
		EntityKey: string(ACLKey), ExpectedSeq: uint64(seq), Delete: true, At: timestamppb.New(at),
		Audit: &internalpb.AuditIntent{Source: auditchain.SourceManager, Kind: ACLResetKind, Who: who, Payload: string(payload)},
	}
	results, err := s.fsm.ApplyBatch(s.fsm.AppliedIndex()+1, []*internalpb.AppendCommand{cmd})
	if err == nil && len(results) == 1 {
		err = results[0].err
	}
	if err != nil {
		return sum, false, fmt.Errorf("reset the ACL tokens: %w", err)
	}
	return sum, true, nil
}
