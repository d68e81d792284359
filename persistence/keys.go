package persistence

import (
	"encoding/binary"
	"strings"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"
)

// Key layout. Every key the store writes is built by a function in this file.
//
//	meta/format                      → u64 data format version (FormatVersion)
//	meta/applied                     → u64 log index of the last applied batch
//	meta/ev_head                     → u64 newest event-log index (0: none yet)
//	meta/ev_first                    → u64 oldest retained event-log index
//	meta/restoring                   → u64 applied index of a snapshot being restored
//	meta/ev_base                     → u64 event-log index the log restarted after (a restore or recovery; absent: 0)
//	meta/au_head                     → u64 newest audit seq (absent: 0, no entries)
//	meta/au_dropped                  → u64 last audit seq retention dropped (absent: 0); au/<it> is the anchor
//	ent/<entity key>                 → u64 seq ‖ record bytes
//	ev/<u64 index>                   → StoredEvent
//	au/<u64 seq>                     → managerpb.AuditLogEntry (audit.go)
//	ix/job/tag/<lp name><lp value><id>    → ""   tag index (name, value)
//	ix/job/start/<time><id>               → ""   start_date_time index, all jobs
//	ix/job/pre/<time><id>                 → ""   start index of PRE jobs only
//	ix/job/state/<state byte><id>         → ""   job state index
//	ix/job/node/<lp node><lp job><role>   → ""   instances by node
//	ix/node/token/<sha256 token>          → node id (live slots)
//	ix/node/revoked/<sha256 token>        → node id (deregistered slots)
//	ix/node/revoked/cred/<sha256 credential> → node id (deregistered slots' credentials)
//	ix/node/cred/<sha256 credential>      → node id
//	ix/bundle/pending/<id>                → ""   bundles with unfinished work
//	ix/acl/secret/<sha256 secret>         → AclTokenRecord (acl.go)
//
// meta/restoring exists only while RestoreSnapshot replaces the store's
// content; found at Open it means a restore was interrupted and the content
// is incomplete (Store.RestoreInterrupted). It is never part of a snapshot.
//
// The Raft log and stable store (RaftStore) is a separate badger DB with
// its own keys:
//
//	log/<u64 index>                  → a raft.Log (encodeRaftLog)
//	stable/<key>                     → raw bytes (raft's StableStore)
//
// <lp x> is x preceded by its length as a uvarint, so that prefixes of
// arbitrary strings never collide. <time> is a start time as timeKey
// encodes it (12 bytes, byte order = time order); an unset start_date_time
// is stored as the epoch.
const (
	prefixMeta  = "meta/"
	prefixEnt   = "ent/"
	prefixEv    = "ev/"
	prefixIndex = "ix/"
	prefixAudit = "au/"

	ixJobTag     = "ix/job/tag/"
	ixJobStart   = "ix/job/start/"
	ixJobPre     = "ix/job/pre/"
	ixJobState   = "ix/job/state/"
	ixJobNode    = "ix/job/node/"
	ixNodeToken  = "ix/node/token/"
	ixNodeRevoke = "ix/node/revoked/"
	ixNodeCred   = "ix/node/cred/"
	// ixBundlePending lists the bundles whose grain has work left
	// (BundleRecord.pending_work): the reviver wakes them.
	ixBundlePending = "ix/bundle/pending/"
	// ixACLSecret finds an ACL token by the SHA-256 of its secret.
	ixACLSecret = "ix/acl/secret/"
)

var (
	keyFormat  = []byte("meta/format")
	keyApplied = []byte("meta/applied")
	keyEvHead  = []byte("meta/ev_head")
	keyEvFirst = []byte("meta/ev_first")
	// keyRestoring marks an unfinished snapshot restore.
	keyRestoring = []byte("meta/restoring")
	// keyEvBase is where the event log restarted (RestartEventLog): every
	// index at or below it belongs to the log before a restore or recovery.
	keyEvBase = []byte("meta/ev_base")
	// keyAuditHead and keyAuditDropped bound the audit log (audit.go).
	keyAuditHead    = []byte("meta/au_head")
	keyAuditDropped = []byte("meta/au_dropped")
)

// Raft store prefixes (a separate badger DB, see RaftStore).
const (
	prefixRaftLog    = "log/"
	prefixRaftStable = "stable/"
)

// raftLogKey is the key of the Raft log entry at index: byte order is index
// order.
func raftLogKey(index uint64) []byte {
	return binary.BigEndian.AppendUint64([]byte(prefixRaftLog), index)
}

// raftLogIndex returns the index of a raftLogKey.
func raftLogIndex(key []byte) uint64 {
	return binary.BigEndian.Uint64(key[len(prefixRaftLog):])
}

func raftStableKey(key []byte) []byte { return append([]byte(prefixRaftStable), key...) }

// EntityKey names one entity of the journal: "<kind>/<id>", for example
// "job/abc" or "node/n1". The kind never contains '/'.
type EntityKey string

// Entity kinds used in entity keys.
const (
	KindJob  = "job"
	KindNode = "node"
	KindPool = "pool"
	// KindBundle is the kind of bundle records (internalpb.BundleRecord).
	KindBundle = "bundle"
	// KindPlacementPool is the kind of placement pools
	// (internalpb.PoolRecord, docs/design/pools.md). Not "pool": that kind
	// is the mock provider's URL pool, whose key "pool/mock" a pool named
	// "mock" would take.
	KindPlacementPool = "placementpool"
	// KindProvider is the kind of provider health records
	// (internalpb.ProviderHealthRecord), one per cloud: "aws", "oci".
	KindProvider = "provider"
	// KindACL is the kind of the one ACL record (internalpb.AclRecord,
	// ACLKey): every token of the cluster.
	KindACL = "acl"
)

// JobKey returns the entity key of job id.
func JobKey(id string) EntityKey { return EntityKey(KindJob + "/" + id) }

// NodeKey returns the entity key of node id.
func NodeKey(id string) EntityKey { return EntityKey(KindNode + "/" + id) }

// BundleKey returns the entity key of bundle id.
func BundleKey(id string) EntityKey { return EntityKey(KindBundle + "/" + id) }

// PlacementPoolKey returns the entity key of the placement pool name.
func PlacementPoolKey(name string) EntityKey { return EntityKey(KindPlacementPool + "/" + name) }

// ProviderKey returns the entity key of the health record of a cloud
// provider ("aws", "oci").
func ProviderKey(name string) EntityKey { return EntityKey(KindProvider + "/" + name) }

// MockPoolKey is the entity key of the mock provider's URL pool.
const MockPoolKey = EntityKey(KindPool + "/mock")

// Kind returns the kind part of the key ("" if malformed).
func (k EntityKey) Kind() string {
	kind, _, ok := strings.Cut(string(k), "/")
	if !ok {
		return ""
	}
	return kind
}

// ID returns the identity part of the key.
func (k EntityKey) ID() string {
	_, id, _ := strings.Cut(string(k), "/")
	return id
}

func entKey(k EntityKey) []byte { return append([]byte(prefixEnt), k...) }

func evKey(i Index) []byte { return binary.BigEndian.AppendUint64([]byte(prefixEv), uint64(i)) }

// auditKey is the key of the audit entry seq: byte order is seq order.
func auditKey(seq uint64) []byte { return binary.BigEndian.AppendUint64([]byte(prefixAudit), seq) }

func appendLP(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// readLP decodes a length-prefixed string at the start of b and returns it
// with the rest of b; ok is false if b is malformed.
func readLP(b []byte) (s string, rest []byte, ok bool) {
	n, w := binary.Uvarint(b)
	if w <= 0 || uint64(len(b)-w) < n {
		return "", nil, false
	}
	return string(b[w : w+int(n)]), b[w+int(n):], true
}

// timeKeyLen is the length of a time key.
const timeKeyLen = 12

// timeKey encodes a timestamp so that byte order is time order: seconds
// since the Unix epoch with the sign bit flipped (8 bytes, big-endian),
// then nanoseconds (4 bytes). A nil timestamp is the epoch. Every
// timestamp proto3 allows (years 1 to 9999) encodes exactly.
func timeKey(ts *timestamppb.Timestamp) []byte {
	b := binary.BigEndian.AppendUint64(make([]byte, 0, timeKeyLen), uint64(ts.GetSeconds())^(1<<63))
	return binary.BigEndian.AppendUint32(b, uint32(ts.GetNanos()))
}

func timeFromKey(b []byte) time.Time {
	sec := int64(binary.BigEndian.Uint64(b) ^ (1 << 63))
	return time.Unix(sec, int64(binary.BigEndian.Uint32(b[8:12]))).UTC()
}

func jobTagKey(name, value, id string) []byte {
	b := appendLP([]byte(ixJobTag), name)
	b = appendLP(b, value)
	return append(b, id...)
}

func jobTagNamePrefix(name string) []byte { return appendLP([]byte(ixJobTag), name) }

func jobTagValuePrefix(name, value string) []byte {
	return appendLP(appendLP([]byte(ixJobTag), name), value)
}

func jobStartKey(ts *timestamppb.Timestamp, id string) []byte {
	return append(append([]byte(ixJobStart), timeKey(ts)...), id...)
}

func jobPreKey(ts *timestamppb.Timestamp, id string) []byte {
	return append(append([]byte(ixJobPre), timeKey(ts)...), id...)
}

func jobStateKey(state byte, id string) []byte {
	return append(append([]byte(ixJobState), state), id...)
}

func jobNodeKey(node, job, role string) []byte {
	b := appendLP([]byte(ixJobNode), node)
	b = appendLP(b, job)
	return append(b, role...)
}

func jobNodePrefix(node string) []byte { return appendLP([]byte(ixJobNode), node) }

func nodeTokenKey(tokenHash []byte) []byte   { return append([]byte(ixNodeToken), tokenHash...) }
func nodeRevokedKey(tokenHash []byte) []byte { return append([]byte(ixNodeRevoke), tokenHash...) }
func nodeCredKey(credHash []byte) []byte     { return append([]byte(ixNodeCred), credHash...) }

// nodeRevokedCredKey is under ixNodeRevoke (whose entries Verify expects
// to outlive their records) and longer than any nodeRevokedKey (a SHA-256
// follows both prefixes), so the two never collide.
func nodeRevokedCredKey(credHash []byte) []byte {
	return append([]byte(ixNodeRevoke+"cred/"), credHash...)
}

func bundlePendingKey(id string) []byte { return append([]byte(ixBundlePending), id...) }

func u64(v uint64) []byte { return binary.BigEndian.AppendUint64(nil, v) }
