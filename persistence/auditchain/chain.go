package auditchain

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"math"

	"github.com/norsk-oss/norsk-manager/proto/managerpb"
)

// Well-known values of AuditLogEntry fields.
const (
	// SourceManager is the source of the entries the manager writes for
	// the changes it accepts.
	SourceManager = "manager"
	// KindAnchor is the kind of the entry that stands for the entries
	// retention dropped: its seq and hash are those of the last dropped
	// entry, and its hash is not recomputed (its content is gone).
	KindAnchor = "audit.anchor"
	// encodingTag starts every canonical encoding (version 1).
	encodingTag = "norsk-audit-v1"
)

// Canonical returns the bytes an entry's hash is computed over (version 1):
//
//	"norsk-audit-v1"                    14 bytes, ASCII
//	seq                                 u64, big-endian (two's complement)
//	timestamp_ms                        u64, big-endian IEEE-754 bits of the double
//	source, kind, who, payload, prev_hash   each: u32 big-endian byte length, then the UTF-8 bytes
//
// The hash field itself is not part of it.
func Canonical(e *managerpb.AuditLogEntry) []byte {
	fields := []string{e.GetSource(), e.GetKind(), e.GetWho(), e.GetPayload(), e.GetPrevHash()}
	n := len(encodingTag) + 16
	for _, f := range fields {
		n += 4 + len(f)
	}
	b := make([]byte, 0, n)
	b = append(b, encodingTag...)
	b = binary.BigEndian.AppendUint64(b, uint64(e.GetSeq()))
	b = binary.BigEndian.AppendUint64(b, math.Float64bits(e.GetTimestampMs()))
	for _, f := range fields {
		b = binary.BigEndian.AppendUint32(b, uint32(len(f)))
		b = append(b, f...)
	}
	return b
}

// Hash returns the lowercase hex SHA-256 (64 characters) of e's canonical
// encoding: the value of e.hash for every entry but an anchor.
func Hash(e *managerpb.AuditLogEntry) string {
	sum := sha256.Sum256(Canonical(e))
	return hex.EncodeToString(sum[:])
}

// MismatchError names the first entry of a chain that does not verify.
type MismatchError struct {
	// Seq is the seq of the entry (as stored; for a missing entry, the seq
	// that was expected).
	Seq int64
	// Reason says what does not match.
	Reason string
}

func (e *MismatchError) Error() string {
	return fmt.Sprintf("audit entry %d: %s", e.Seq, e.Reason)
}

// Verifier recomputes a chain fed to it entry by entry, oldest first. The
// zero value is ready; it is not safe for concurrent use.
type Verifier struct {
	last  *managerpb.AuditLogEntry
	count int
}

// Next checks e against the entries before it: the first entry must be
// seq 1 with an empty prev_hash, or an anchor (whose hash is taken as
// given); every later entry must have the next seq, the previous entry's
// hash as prev_hash, and its own recomputed hash; an anchor may only come
// first. It returns a *MismatchError for the first entry that fails (and
// keeps failing after it: stop at the first error).
func (v *Verifier) Next(e *managerpb.AuditLogEntry) error {
	if err := v.check(e); err != nil {
		return err
	}
	v.last = e
	v.count++
	return nil
}

func (v *Verifier) check(e *managerpb.AuditLogEntry) error {
	bad := func(format string, args ...any) error {
		return &MismatchError{Seq: e.GetSeq(), Reason: fmt.Sprintf(format, args...)}
	}
	anchor := e.GetKind() == KindAnchor && e.GetSource() == SourceManager
	if v.last == nil {
		switch {
		case anchor:
			if len(e.GetHash()) != sha256.Size*2 {
				return bad("the anchor's hash %q is not a SHA-256 in hex", e.GetHash())
			}
			return nil
		case e.GetSeq() != 1:
			return bad("the log starts at seq %d without an anchor: the entries before it are missing", e.GetSeq())
		case e.GetPrevHash() != "":
			return bad("the first entry has prev_hash %q, want empty", e.GetPrevHash())
		}
	} else {
		switch {
		case e.GetSeq() != v.last.GetSeq()+1:
			return &MismatchError{Seq: v.last.GetSeq() + 1, Reason: fmt.Sprintf("missing: the entry after %d is %d", v.last.GetSeq(), e.GetSeq())}
		case anchor:
			return bad("an anchor in the middle of the chain (after entry %d)", v.last.GetSeq())
		case e.GetPrevHash() != v.last.GetHash():
			return bad("prev_hash %s is not the hash of entry %d (%s)", e.GetPrevHash(), v.last.GetSeq(), v.last.GetHash())
		}
	}
	if h := Hash(e); h != e.GetHash() {
		return bad("its content does not match its hash (stored %s, recomputed %s): the entry was changed", e.GetHash(), h)
	}
	return nil
}

// Count returns how many entries verified so far (anchors included).
func (v *Verifier) Count() int { return v.count }

// Last returns the last entry that verified (nil: none).
func (v *Verifier) Last() *managerpb.AuditLogEntry { return v.last }
