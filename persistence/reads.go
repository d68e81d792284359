package persistence

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/dgraph-io/badger/v4"
	"google.golang.org/protobuf/proto"

	"github.com/norsk-oss/norsk-manager/proto/internalpb"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
)

// Reader is a consistent, read-only view of the store (one badger read
// transaction): everything read through one Reader reflects the same
// applied batch. Valid only inside the View callback that made it.
type Reader struct {
	txn *badger.Txn
}

// View runs fn with a consistent Reader. Records returned by the Reader
// are the caller's to keep but must not be modified if shared.
func (s *Store) View(fn func(r *Reader) error) error {
	return s.db.View(func(txn *badger.Txn) error { return fn(&Reader{txn: txn}) })
}

// Load returns an entity's record bytes and sequence. For a deleted entity
// it returns ErrNotFound with the sequence of the deletion (appends that
// re-create it must expect that sequence) and the tombstone's payload
// (TombstoneRequests decodes it; nil for an entity that never existed).
func (s *Store) Load(key EntityKey) ([]byte, Seq, error) {
	var e entity
	err := s.db.View(func(txn *badger.Txn) error {
		var err error
		e, err = loadEntity(txn, key)
		return err
	})
	if err != nil {
		return nil, 0, fmt.Errorf("load %s: %w", key, err)
	}
	if !e.live {
		return e.record, e.seq, ErrNotFound
	}
	return e.record, e.seq, nil
}

// Seq returns the entity's sequence as applied on this manager (0 if it
// never existed; a deleted entity keeps its tombstone's), without copying
// its record: the cheap check of whether a grain's record is still the
// newest. Errors: I/O or ErrCorrupt (wrapped).
func (s *Store) Seq(key EntityKey) (Seq, error) {
	var seq Seq
	err := s.db.View(func(txn *badger.Txn) error {
		item, err := txn.Get(entKey(key))
		if errors.Is(err, badger.ErrKeyNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		return item.Value(func(v []byte) error {
			if len(v) < 9 {
				return fmt.Errorf("entity %s: value of %d bytes: %w", key, len(v), ErrCorrupt)
			}
			seq = Seq(binary.BigEndian.Uint64(v))
			return nil
		})
	})
	if err != nil {
		return 0, fmt.Errorf("sequence of %s: %w", key, err)
	}
	return seq, nil
}

// Job returns the job record of id and its sequence, or ErrNotFound.
func (r *Reader) Job(id string) (*internalpb.JobRecord, Seq, error) {
	rec := &internalpb.JobRecord{}
	seq, err := r.entity(JobKey(id), rec)
	return rec, seq, err
}

// Node returns the node record of id and its sequence, or ErrNotFound.
func (r *Reader) Node(id string) (*internalpb.NodeRecord, Seq, error) {
	rec := &internalpb.NodeRecord{}
	seq, err := r.entity(NodeKey(id), rec)
	return rec, seq, err
}

func (r *Reader) entity(key EntityKey, into proto.Message) (Seq, error) {
	e, err := loadEntity(r.txn, key)
	if err != nil {
		return 0, err
	}
	if !e.live {
		return e.seq, ErrNotFound
	}
	if err := proto.Unmarshal(e.record, into); err != nil {
		return 0, fmt.Errorf("decode %s: %v: %w", key, err, ErrCorrupt)
	}
	return e.seq, nil
}

// Nodes calls fn for every live node record, in node-id order, until fn
// returns an error (which Nodes returns).
func (r *Reader) Nodes(fn func(*internalpb.NodeRecord) error) error {
	return r.entities(KindNode, func() proto.Message { return &internalpb.NodeRecord{} }, func(m proto.Message) error {
		return fn(m.(*internalpb.NodeRecord))
	})
}

// ProviderHealth returns the published health of every cloud provider, in
// provider-name order (initial_data_complete).
func (r *Reader) ProviderHealth() ([]*managerpb.ProviderHealth, error) {
	var out []*managerpb.ProviderHealth
	err := r.entities(KindProvider, func() proto.Message { return &internalpb.ProviderHealthRecord{} }, func(m proto.Message) error {
		out = append(out, m.(*internalpb.ProviderHealthRecord).GetHealth())
		return nil
	})
	return out, err
}

// Jobs calls fn for every live job record, in job-id order.
func (r *Reader) Jobs(fn func(*internalpb.JobRecord) error) error {
	return r.entities(KindJob, func() proto.Message { return &internalpb.JobRecord{} }, func(m proto.Message) error {
		return fn(m.(*internalpb.JobRecord))
	})
}

func (r *Reader) entities(kind string, newRec func() proto.Message, fn func(proto.Message) error) error {
	return r.entitiesSeq(kind, newRec, func(m proto.Message, _ Seq) error { return fn(m) })
}

// entitiesSeq calls fn for every live entity of kind with its sequence, in
// key order, until fn returns an error (which it returns).
func (r *Reader) entitiesSeq(kind string, newRec func() proto.Message, fn func(proto.Message, Seq) error) error {
	return r.entitiesKeyed(kind, newRec, func(_ EntityKey, m proto.Message, seq Seq) error { return fn(m, seq) })
}

// entitiesKeyed is entitiesSeq with each entity's key.
func (r *Reader) entitiesKeyed(kind string, newRec func() proto.Message, fn func(EntityKey, proto.Message, Seq) error) error {
	prefix := []byte(prefixEnt + kind + "/")
	it := r.txn.NewIterator(badger.IteratorOptions{Prefix: prefix, PrefetchValues: true, PrefetchSize: 64})
	defer it.Close()
	for it.Seek(prefix); it.ValidForPrefix(prefix); it.Next() {
		v, err := it.Item().ValueCopy(nil)
		if err != nil {
			return err
		}
		key := EntityKey(it.Item().Key()[len(prefixEnt):])
		e, err := decodeEntity(key, v)
		if err != nil {
			return err
		}
		if !e.live {
			continue
		}
		m := newRec()
		if err := proto.Unmarshal(e.record, m); err != nil {
			return fmt.Errorf("decode %s: %v: %w", key, err, ErrCorrupt)
		}
		if err := fn(key, m, e.seq); err != nil {
			return err
		}
	}
	return nil
}

// JobIDsInState calls fn with the id of every job in state, in id order.
func (r *Reader) JobIDsInState(state managerpb.Job_JobState, fn func(id string) error) error {
	prefix := jobStateKey(byte(state), "")
	return r.scanKeys(prefix, func(rest []byte) error { return fn(string(rest)) })
}

// InstanceRef names one instance of a job: (job id, role).
type InstanceRef struct {
	JobID string
	Role  string
}

// InstancesOnNode returns the instances that job records place on node,
// ordered by job id then role.
func (r *Reader) InstancesOnNode(node string) ([]InstanceRef, error) {
	var out []InstanceRef
	err := r.scanKeys(jobNodePrefix(node), func(rest []byte) error {
		job, role, ok := readLP(rest)
		if !ok {
			return fmt.Errorf("malformed instance index key under node %q: %w", node, ErrCorrupt)
		}
		out = append(out, InstanceRef{JobID: job, Role: string(role)})
		return nil
	})
	return out, err
}

// DuePreJobs returns up to max ids of PRE jobs whose start_date_time is at
// or before now (as an index time key), oldest first.
func (r *Reader) DuePreJobs(nowKey []byte, max int) ([]string, error) {
	var ids []string
	prefix := []byte(ixJobPre)
	it := r.txn.NewIterator(badger.IteratorOptions{Prefix: prefix})
	defer it.Close()
	for it.Seek(prefix); it.ValidForPrefix(prefix) && len(ids) < max; it.Next() {
		k := it.Item().Key()[len(prefix):]
		if len(k) < timeKeyLen || bytes.Compare(k[:timeKeyLen], nowKey) > 0 {
			break
		}
		ids = append(ids, string(k[timeKeyLen:]))
	}
	return ids, nil
}

// NodeIDByToken resolves a registration token. revoked is true when the
// token belonged to a slot that was deregistered. ErrNotFound if neither.
func (r *Reader) NodeIDByToken(token string) (id string, revoked bool, err error) {
	h := secretHash(token)
	if id, err := r.value(nodeTokenKey(h)); err == nil {
		return id, false, nil
	} else if !errors.Is(err, ErrNotFound) {
		return "", false, err
	}
	id, err = r.value(nodeRevokedKey(h))
	if err != nil {
		return "", false, err
	}
	return id, true, nil
}

// NodeIDByCredential resolves a node credential, or returns ErrNotFound.
func (r *Reader) NodeIDByCredential(cred string) (string, error) {
	return r.value(nodeCredKey(secretHash(cred)))
}

// NodeIDByRevokedCredential returns the node id of the deregistered slot
// whose worker held credential cred, or ErrNotFound if no slot deregistered
// in this store had it (slots deregistered before the store kept revoked
// credentials are not found either).
func (r *Reader) NodeIDByRevokedCredential(cred string) (string, error) {
	return r.value(nodeRevokedCredKey(secretHash(cred)))
}

func (r *Reader) value(key []byte) (string, error) {
	item, err := r.txn.Get(key)
	if errors.Is(err, badger.ErrKeyNotFound) {
		return "", ErrNotFound
	}
	if err != nil {
		return "", err
	}
	v, err := item.ValueCopy(nil)
	return string(v), err
}

// scanKeys calls fn with the remainder of every key under prefix (keys
// only: values are not read).
func (r *Reader) scanKeys(prefix []byte, fn func(rest []byte) error) error {
	it := r.txn.NewIterator(badger.IteratorOptions{Prefix: prefix})
	defer it.Close()
	for it.Seek(prefix); it.ValidForPrefix(prefix); it.Next() {
		if err := fn(it.Item().KeyCopy(nil)[len(prefix):]); err != nil {
			return err
		}
	}
	return nil
}

// EventHead returns the newest event-log index as of this view (0: no
// event yet).
func (r *Reader) EventHead() (Index, error) {
	h, err := getU64(r.txn, keyEvHead)
	return Index(h), err
}

// EventBounds returns the oldest retained and the newest event-log index
// as of this view; with an empty log first is head+1. Unlike
// Store.EventBounds (a cache that can lag), these agree with every event
// the same view reads: they are written in the transaction that writes
// the events.
func (r *Reader) EventBounds() (first, head Index, err error) {
	f, err := getU64(r.txn, keyEvFirst)
	if err != nil {
		return 0, 0, err
	}
	h, err := getU64(r.txn, keyEvHead)
	if err != nil {
		return 0, 0, err
	}
	return Index(max(f, 1)), Index(h), nil
}

// PreJobs calls fn with the id and start time of every PRE job, earliest
// start first (keys only: records are not read).
func (r *Reader) PreJobs(fn func(id string, start time.Time) error) error {
	return r.scanKeys([]byte(ixJobPre), func(rest []byte) error {
		if len(rest) < timeKeyLen {
			return fmt.Errorf("malformed PRE index key: %w", ErrCorrupt)
		}
		return fn(string(rest[timeKeyLen:]), timeFromKey(rest[:timeKeyLen]))
	})
}

// EarliestPreStart returns the earliest start_date_time of a PRE job; ok is
// false if there is none.
func (r *Reader) EarliestPreStart() (start time.Time, ok bool, err error) {
	prefix := []byte(ixJobPre)
	it := r.txn.NewIterator(badger.IteratorOptions{Prefix: prefix})
	defer it.Close()
	it.Seek(prefix)
	if !it.ValidForPrefix(prefix) {
		return time.Time{}, false, nil
	}
	k := it.Item().Key()[len(prefix):]
	if len(k) < timeKeyLen {
		return time.Time{}, false, fmt.Errorf("malformed PRE index key: %w", ErrCorrupt)
	}
	return timeFromKey(k[:timeKeyLen]), true, nil
}

// AllInstances calls fn for every instance placed on a node by a job
// record, ordered by node id (keys only: records are not read).
func (r *Reader) AllInstances(fn func(node string, ref InstanceRef) error) error {
	return r.scanKeys([]byte(ixJobNode), func(rest []byte) error {
		node, rest, ok := readLP(rest)
		if !ok {
			return fmt.Errorf("malformed instance index key: %w", ErrCorrupt)
		}
		job, role, ok := readLP(rest)
		if !ok {
			return fmt.Errorf("malformed instance index key: %w", ErrCorrupt)
		}
		return fn(node, InstanceRef{JobID: job, Role: string(role)})
	})
}
