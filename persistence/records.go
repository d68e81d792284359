package persistence

import (
	"bytes"
	"crypto/sha256"
	"fmt"

	"github.com/dgraph-io/badger/v4"
	"google.golang.org/protobuf/proto"

	"github.com/norsk-oss/norsk-manager/proto/internalpb"
)

// record is a decoded entity record of any kind.
type record interface {
	proto.Message
	GetRecentRequests() []string
}

// newRecord returns an empty record of an entity kind, or ErrCorrupt for
// a kind the store does not know.
func newRecord(kind string) (record, error) {
	switch kind {
	case KindJob:
		return &internalpb.JobRecord{}, nil
	case KindNode:
		return &internalpb.NodeRecord{}, nil
	case KindPool:
		return &internalpb.MockPoolRecord{}, nil
	case KindBundle:
		return &internalpb.BundleRecord{}, nil
	case KindProvider:
		return &internalpb.ProviderHealthRecord{}, nil
	case KindPlacementPool:
		return &internalpb.PoolRecord{}, nil
	case KindACL:
		return &internalpb.AclRecord{}, nil
	}
	return nil, fmt.Errorf("unknown entity kind %q: %w", kind, ErrCorrupt)
}

// decodeRecord decodes the record bytes of an entity of the given kind.
func decodeRecord(kind string, b []byte) (record, error) {
	r, err := newRecord(kind)
	if err != nil {
		return nil, err
	}
	if err := proto.Unmarshal(b, r); err != nil {
		return nil, fmt.Errorf("decode %s record: %v: %w", kind, err, ErrCorrupt)
	}
	return r, nil
}

// indexEntries returns the secondary-index entries (key → value) of a
// record; nil for a nil record.
func indexEntries(key EntityKey, r record) map[string][]byte {
	switch r := r.(type) {
	case *internalpb.JobRecord:
		return jobIndexEntries(key.ID(), r)
	case *internalpb.NodeRecord:
		return nodeIndexEntries(key.ID(), r)
	case *internalpb.BundleRecord:
		return bundleIndexEntries(key.ID(), r)
	case *internalpb.AclRecord:
		return aclIndexEntries(r)
	}
	return nil
}

// updateIndexes replaces the index entries of old by those of next (either
// may be nil) and writes the tombstones a deletion leaves.
func updateIndexes(txn *badger.Txn, key EntityKey, old, next record) error {
	before, after := indexEntries(key, old), indexEntries(key, next)
	for k := range before {
		if _, keep := after[k]; !keep {
			if err := txn.Delete([]byte(k)); err != nil {
				return err
			}
		}
	}
	for k, v := range after {
		if pv, had := before[k]; had && bytes.Equal(pv, v) {
			continue
		}
		if err := txn.Set([]byte(k), v); err != nil {
			return err
		}
	}
	if n, ok := old.(*internalpb.NodeRecord); ok && next == nil {
		return writeRevoked(txn, key.ID(), n)
	}
	return nil
}

// writeRevoked leaves the tombstones of a deleted (deregistered) slot: its
// token and its credential stay recognisable, so that a worker presenting
// either learns the slot was deregistered rather than unknown — and, told
// so, stops the jobs it still runs for it (a worker restarting on its state
// directory presents the credential alone).
func writeRevoked(txn *badger.Txn, id string, n *internalpb.NodeRecord) error {
	if t := n.GetToken(); t != "" {
		if err := txn.Set(nodeRevokedKey(secretHash(t)), []byte(id)); err != nil {
			return err
		}
	}
	if c := n.GetCredential(); c != "" {
		return txn.Set(nodeRevokedCredKey(secretHash(c)), []byte(id))
	}
	return nil
}

func jobIndexEntries(id string, r *internalpb.JobRecord) map[string][]byte {
	job := r.GetJob().GetJob()
	m := make(map[string][]byte, len(job.GetTags())+4+len(r.GetInstances()))
	for name, value := range job.GetTags() {
		m[string(jobTagKey(name, value, id))] = nil
	}
	m[string(jobStartKey(job.GetStartDateTime(), id))] = nil
	m[string(jobStateKey(byte(job.GetState()), id))] = nil
	if job.GetState() == 0 { // PRE
		m[string(jobPreKey(job.GetStartDateTime(), id))] = nil
	}
	for _, in := range r.GetInstances() {
		m[string(jobNodeKey(in.GetNodeId(), id, in.GetRole()))] = nil
	}
	return m
}

func nodeIndexEntries(id string, r *internalpb.NodeRecord) map[string][]byte {
	m := make(map[string][]byte, 2)
	if t := r.GetToken(); t != "" {
		m[string(nodeTokenKey(secretHash(t)))] = []byte(id)
	}
	if c := r.GetCredential(); c != "" {
		m[string(nodeCredKey(secretHash(c)))] = []byte(id)
	}
	return m
}

// secretHash is the index form of a token or credential: indexes never hold
// a secret itself.
func secretHash(s string) []byte {
	h := sha256.Sum256([]byte(s))
	return h[:]
}

func bundleIndexEntries(id string, r *internalpb.BundleRecord) map[string][]byte {
	if !r.GetPendingWork() {
		return nil
	}
	return map[string][]byte{string(bundlePendingKey(id)): nil}
}
