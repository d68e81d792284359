package persistence

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/dgraph-io/badger/v4"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/norsk-oss/norsk-manager/persistence/auditchain"
	"github.com/norsk-oss/norsk-manager/proto/internalpb"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
)

// The audit log (docs/design/audit.md) is a hash chain of
// managerpb.AuditLogEntry under au/<seq>, written only by the FSM: an
// append that carries an AuditIntent writes the next entry in the same
// badger transaction as its change, with seq = head + 1, prev_hash = the
// head's hash and hash = auditchain.Hash. Everything comes from the
// command (its at is the timestamp), so every replica holds the same
// chain. Retention keeps Config.AuditRetention entries after the anchor:
// the oldest retained entry is replaced by an anchor (auditchain.KindAnchor)
// with the seq, timestamp and hash of the entry it replaces, and the one
// before it deleted.

// maxAuditTrimPerEntry bounds how many entries one appended entry drops,
// so that lowering AuditRetention on a long log converges over later
// appends instead of failing one append with a transaction too big.
const maxAuditTrimPerEntry = 64

// auditCursor is the audit log's bounds during one applied batch.
type auditCursor struct {
	loaded, changed bool
	// head is the newest seq (0: empty log), hash its entry's hash;
	// dropped is the last seq retention dropped (0: none), whose key holds
	// the anchor.
	head, dropped uint64
	hash          string
}

func (c *auditCursor) load(txn *badger.Txn) error {
	if c.loaded {
		return nil
	}
	var err error
	if c.head, err = getU64(txn, keyAuditHead); err != nil {
		return err
	}
	if c.dropped, err = getU64(txn, keyAuditDropped); err != nil {
		return err
	}
	if c.head > 0 {
		e, err := getAuditEntry(txn, c.head)
		if err != nil {
			return err
		}
		c.hash = e.GetHash()
	}
	c.loaded = true
	return nil
}

// save writes the bounds if the batch changed them.
func (c *auditCursor) save(txn *badger.Txn) error {
	if !c.changed {
		return nil
	}
	if err := setU64(txn, keyAuditHead, c.head); err != nil {
		return err
	}
	return setU64(txn, keyAuditDropped, c.dropped)
}

// applyAuditOnly applies a command that writes only its audit entry
// (AppendAuditEntry): its result's Seq is the entry's seq.
func (ab *applyBatch) applyAuditOnly(txn *badger.Txn, cmd *internalpb.AppendCommand) (AppendResult, error) {
	if cmd.GetExpectedSeq() != 0 || len(cmd.GetRecord()) > 0 || cmd.GetDelete() || len(cmd.GetEvents()) > 0 {
		return AppendResult{}, &invalidCommandError{fmt.Errorf("an audit-only append carries an entity change: %w", ErrCorrupt)}
	}
	if err := ab.appendAudit(txn, cmd.GetAudit(), cmd.GetAt()); err != nil {
		return AppendResult{}, err
	}
	return AppendResult{Seq: Seq(ab.audit.head)}, nil
}

// appendAudit writes the next audit entry for in at time at and trims the
// log to the retention limit.
func (ab *applyBatch) appendAudit(txn *badger.Txn, in *internalpb.AuditIntent, at *timestamppb.Timestamp) error {
	c := &ab.audit
	if err := c.load(txn); err != nil {
		return fmt.Errorf("audit log: %w", err)
	}
	e := &managerpb.AuditLogEntry{
		Seq:         int64(c.head + 1),
		TimestampMs: float64(at.AsTime().UnixMilli()),
		Source:      in.GetSource(),
		Kind:        in.GetKind(),
		Payload:     in.GetPayload(),
		Who:         in.GetWho(),
		PrevHash:    c.hash,
	}
	e.Hash = auditchain.Hash(e)
	if err := putAuditEntry(txn, e); err != nil {
		return err
	}
	c.head, c.hash, c.changed = c.head+1, e.Hash, true
	return ab.trimAudit(txn)
}

// trimAudit drops the oldest entries beyond the retention limit (at most
// maxAuditTrimPerEntry), replacing the last dropped one by an anchor.
func (ab *applyBatch) trimAudit(txn *badger.Txn) error {
	c, keep := &ab.audit, ab.fsm.auditRetention
	for n := 0; keep > 0 && c.head-c.dropped > keep && n < maxAuditTrimPerEntry; n++ {
		next := c.dropped + 1
		e, err := getAuditEntry(txn, next)
		if err != nil {
			return err
		}
		if c.dropped > 0 {
			if err := txn.Delete(auditKey(c.dropped)); err != nil {
				return err
			}
		}
		if err := putAuditEntry(txn, AuditAnchor(e)); err != nil {
			return err
		}
		c.dropped = next
	}
	return nil
}

// AuditAnchor returns the anchor that replaces e when retention drops it:
// e's seq, timestamp and hash, source "manager", kind "audit.anchor", and
// a payload naming the last dropped seq.
func AuditAnchor(e *managerpb.AuditLogEntry) *managerpb.AuditLogEntry {
	return &managerpb.AuditLogEntry{Seq: e.GetSeq(), TimestampMs: e.GetTimestampMs(), Source: auditchain.SourceManager,
		Kind: auditchain.KindAnchor, Payload: fmt.Sprintf(`{"dropped_through":%d}`, e.GetSeq()), Hash: e.GetHash()}
}

func putAuditEntry(txn *badger.Txn, e *managerpb.AuditLogEntry) error {
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(e)
	if err != nil {
		return fmt.Errorf("encode audit entry %d: %w", e.GetSeq(), err)
	}
	return txn.Set(auditKey(uint64(e.GetSeq())), b)
}

func getAuditEntry(txn *badger.Txn, seq uint64) (*managerpb.AuditLogEntry, error) {
	item, err := txn.Get(auditKey(seq))
	if errors.Is(err, badger.ErrKeyNotFound) {
		return nil, fmt.Errorf("audit entry %d is missing: %w", seq, ErrCorrupt)
	}
	if err != nil {
		return nil, err
	}
	e := &managerpb.AuditLogEntry{}
	err = item.Value(func(v []byte) error { return proto.Unmarshal(v, e) })
	if err != nil {
		return nil, fmt.Errorf("audit entry %d does not decode: %v: %w", seq, err, ErrCorrupt)
	}
	return e, nil
}

// AuditBounds returns the oldest retained audit seq (the anchor's, once
// retention dropped entries) and the newest; 0, 0 for an empty log.
func (r *Reader) AuditBounds() (first, head uint64, err error) {
	var c auditCursor
	if c.head, err = getU64(r.txn, keyAuditHead); err != nil {
		return 0, 0, err
	}
	if c.dropped, err = getU64(r.txn, keyAuditDropped); err != nil {
		return 0, 0, err
	}
	if c.head == 0 {
		return 0, 0, nil
	}
	return max(c.dropped, 1), c.head, nil
}

// AuditEntries calls fn with the stored audit entries whose seq is in
// [from, to] (to 0: up to the newest), oldest first, at most limit of them
// (0: no limit); fn's error stops the scan and is returned. The entries
// are the caller's. An entry that does not decode is ErrCorrupt.
func (r *Reader) AuditEntries(from, to uint64, limit int, fn func(*managerpb.AuditLogEntry) error) error {
	it := r.txn.NewIterator(badger.IteratorOptions{Prefix: []byte(prefixAudit), PrefetchValues: true, PrefetchSize: 64})
	defer it.Close()
	n := 0
	for it.Seek(auditKey(from)); it.Valid(); it.Next() {
		item := it.Item()
		seq := auditSeqOf(item.Key())
		if to > 0 && seq > to || limit > 0 && n >= limit {
			return nil
		}
		e := &managerpb.AuditLogEntry{}
		if err := item.Value(func(v []byte) error { return proto.Unmarshal(v, e) }); err != nil {
			return fmt.Errorf("audit entry %d does not decode: %v: %w", seq, err, ErrCorrupt)
		}
		if err := fn(e); err != nil {
			return err
		}
		n++
	}
	return nil
}

// auditSeqOf returns the seq of an auditKey (0 for a malformed key).
func auditSeqOf(key []byte) uint64 {
	if len(key) != len(prefixAudit)+8 {
		return 0
	}
	return binary.BigEndian.Uint64(key[len(prefixAudit):])
}
