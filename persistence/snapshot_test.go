package persistence

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"testing"
	"time"

	"github.com/dgraph-io/badger/v4"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	"github.com/norsk-oss/norsk-manager/proto/internalpb"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
)

// dumpStore returns every key/value of the store (hex key → value).
func dumpStore(t testing.TB, s *Store) map[string]string {
	t.Helper()
	out := map[string]string{}
	require.NoError(t, s.db.View(func(txn *badger.Txn) error {
		return eachKV(txn, true, func(k, v []byte) error {
			out[string(k)] = string(v)
			return nil
		})
	}))
	return out
}

// storeMetaOf returns the FSM's cached meta, to compare with a reload.
func storeMetaOf(s *Store) [3]uint64 {
	first, head := s.EventBounds()
	return [3]uint64{s.FSM().AppliedIndex(), uint64(first), uint64(head)}
}

// populate writes jobs with tags and start times, nodes with tokens,
// deletions and events through log, using ids with prefix.
func populate(t testing.TB, log Journal, prefix string, n int) {
	t.Helper()
	ctx := context.Background()
	start := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	for i := range n {
		id := fmt.Sprintf("%s-job-%d", prefix, i)
		_, err := log.Append(ctx, JobKey(id), 0, Change{
			RequestID: "r-" + id,
			Record:    jobRecord(id, map[string]string{"team": prefix, "i": fmt.Sprint(i)}, start.Add(time.Duration(i)*time.Minute), "r-"+id),
			Events:    []*managerpb.EventStreamEvent{jobDeleted(id)},
			At:        start,
		})
		require.NoError(t, err)
		node := fmt.Sprintf("%s-node-%d", prefix, i)
		b, err := proto.Marshal(&internalpb.NodeRecord{Token: "tok-" + node, Credential: "cred-" + node})
		require.NoError(t, err)
		_, err = log.Append(ctx, NodeKey(node), 0, Change{Record: b, At: start})
		require.NoError(t, err)
		if i%3 == 0 {
			_, err = log.Append(ctx, NodeKey(node), 1, Change{Delete: true, At: start})
			require.NoError(t, err)
		}
	}
}

func snapshotBytes(t testing.TB, s *Store) []byte {
	t.Helper()
	var buf bytes.Buffer
	require.NoError(t, s.WriteSnapshot(&buf))
	return buf.Bytes()
}

func TestStore_WriteSnapshot_Header(t *testing.T) {
	s, log := TestStore(t)
	populate(t, log, "a", 4)
	b := snapshotBytes(t, s)
	hdr, err := ReadSnapshotHeader(bytes.NewReader(b))
	require.NoError(t, err)
	require.Equal(t, uint32(snapshotVersion), hdr.Version)
	require.Equal(t, uint32(FormatVersion), hdr.Format)
	require.Equal(t, s.FSM().AppliedIndex(), hdr.Applied)
	require.Equal(t, uint64(len(dumpStore(t, s))), hdr.Count)
	sum := sha256.Sum256(b[:len(b)-sha256.Size])
	require.Equal(t, sum[:], b[len(b)-sha256.Size:], "the trailer is the SHA-256 of the rest")
}

func TestStore_RestoreSnapshot_RoundTrip(t *testing.T) {
	ctx := context.Background()
	cfg := DefaultConfig(t.TempDir())
	cfg.SyncWrites, cfg.GCInterval, cfg.EventRetention = false, 0, 7 // trimmed event log
	src, srcLog := TestStoreWithConfig(t, cfg)
	populate(t, srcLog, "src", 6)
	want := dumpStore(t, src)
	snap := snapshotBytes(t, src)

	// The target has content of its own, all of which must go.
	dst, dstLog := TestStore(t)
	populate(t, dstLog, "dst", 20)
	require.NoError(t, dstLog.Close(), "nothing may write during a restore")

	// A reader waiting for the target's head to move is woken by the restore.
	_, headCh := dst.fsm.headChanged()
	require.NoError(t, dst.RestoreSnapshot(bytes.NewReader(snap)))
	require.Equal(t, want, dumpStore(t, dst))
	require.Equal(t, storeMetaOf(src), storeMetaOf(dst))
	require.False(t, dst.RestoreInterrupted())
	select {
	case <-headCh:
	default:
		t.Fatal("event waiters not woken by the restore")
	}

	// Reads and indexes work on the restored content.
	var revoked bool
	require.NoError(t, dst.View(func(r *Reader) error {
		_, seq, err := r.Job("src-job-1")
		require.NoError(t, err)
		require.Equal(t, Seq(1), seq)
		_, _, err = r.Job("dst-job-1")
		require.ErrorIs(t, err, ErrNotFound)
		id, err := r.NodeIDByCredential("cred-src-node-1")
		require.NoError(t, err)
		require.Equal(t, "src-node-1", id)
		id, err = r.NodeIDByRevokedCredential("cred-src-node-0")
		require.NoError(t, err, "a deleted node's credential stays recognisable")
		require.Equal(t, "src-node-0", id)
		_, err = r.NodeIDByRevokedCredential("cred-src-node-1")
		require.ErrorIs(t, err, ErrNotFound, "a live node's credential is not revoked")
		_, err = r.NodeIDByCredential("cred-src-node-0")
		require.ErrorIs(t, err, ErrNotFound)
		_, revoked, err = r.NodeIDByToken("tok-src-node-0")
		return err
	}))
	require.True(t, revoked, "a deleted node's token stays recognisable")
	first, head := dst.EventBounds()
	evs, err := dst.ReadEvents(first, 100)
	require.NoError(t, err)
	require.Len(t, evs, int(head-first+1))

	// Appends continue from the restored state: indexes and sequences.
	log := NewLocalLog(dst)
	defer log.Close()
	res, err := log.Append(ctx, JobKey("src-job-1"), 1, Change{Record: jobRecord("src-job-1", nil, time.Time{}), Events: []*managerpb.EventStreamEvent{jobDeleted("x")}})
	require.NoError(t, err)
	require.Equal(t, Seq(2), res.Seq)
	require.Equal(t, head+1, res.LastEvent)
	require.Equal(t, src.FSM().AppliedIndex()+1, dst.FSM().AppliedIndex())
}

func TestStore_RestoreSnapshot_EmptyStore(t *testing.T) {
	src, _ := TestStore(t)
	dst, dstLog := TestStore(t)
	populate(t, dstLog, "dst", 3)
	require.NoError(t, dstLog.Close())
	require.NoError(t, dst.RestoreSnapshot(bytes.NewReader(snapshotBytes(t, src))))
	require.Equal(t, dumpStore(t, src), dumpStore(t, dst))
	require.Equal(t, uint64(0), dst.FSM().AppliedIndex())
}

func TestStore_RestoreSnapshot_RefusesCorrupt(t *testing.T) {
	src, srcLog := TestStore(t)
	populate(t, srcLog, "src", 3)
	good := snapshotBytes(t, src)
	hdrCount := binary.BigEndian.Uint64(good[24:32])

	// resum recomputes the trailer, so that only the parser can object.
	resum := func(b []byte) []byte {
		body := b[:len(b)-sha256.Size]
		sum := sha256.Sum256(body)
		return append(bytes.Clone(body), sum[:]...)
	}
	with := func(f func(b []byte) []byte) []byte { return f(bytes.Clone(good)) }
	cases := []struct {
		name string
		snap []byte
		want string
	}{
		{"empty", nil, "truncated"},
		{"truncated header", good[:10], "truncated"},
		{"truncated in a record", good[:len(good)/2], "truncated"},
		{"missing trailer", good[:len(good)-sha256.Size], "truncated"},
		{"truncated trailer", good[:len(good)-1], "truncated"},
		{"flipped bit in a value", with(func(b []byte) []byte { b[len(b)/2] ^= 1; return b }), ""},
		{"flipped bit in the trailer", with(func(b []byte) []byte { b[len(b)-1] ^= 1; return b }), "checksum"},
		{"trailing garbage", append(bytes.Clone(good), 0), "after its checksum"},
		{"bad magic", with(func(b []byte) []byte { b[0] = 'X'; return resum(b) }), "not a norsk-manager snapshot"},
		{"future snapshot version", with(func(b []byte) []byte { binary.BigEndian.PutUint32(b[8:], 9); return resum(b) }), "snapshot format version 9"},
		{"other store format", with(func(b []byte) []byte { binary.BigEndian.PutUint32(b[12:], 99); return resum(b) }), "store format 99"},
		{"count too high", with(func(b []byte) []byte { binary.BigEndian.PutUint64(b[24:], hdrCount+1); return resum(b) }), ""},
		{"count too low", with(func(b []byte) []byte { binary.BigEndian.PutUint64(b[24:], hdrCount-1); return resum(b) }), ""},
		{"huge key length", with(func(b []byte) []byte { binary.BigEndian.PutUint32(b[32:], 1<<31); return resum(b) }), "key of"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dst, dstLog := TestStore(t)
			populate(t, dstLog, "dst", 2)
			before, meta := dumpStore(t, dst), storeMetaOf(dst)
			err := dst.RestoreSnapshot(bytes.NewReader(tc.snap))
			require.ErrorIs(t, err, ErrCorrupt)
			require.ErrorContains(t, err, tc.want)
			require.Equal(t, before, dumpStore(t, dst), "a refused snapshot must not touch the store")
			require.Equal(t, meta, storeMetaOf(dst))
			require.False(t, dst.RestoreInterrupted())
			// The store still takes appends.
			_, err = dstLog.Append(context.Background(), JobKey("after"), 0, Change{Record: jobRecord("after", nil, time.Time{})})
			require.NoError(t, err)
		})
	}
}

// TestStore_RestoreInterrupted: a store left with the restore mark (a
// crash during RestoreSnapshot) says so after reopening, refuses applies,
// and is repaired by a complete restore.
func TestStore_RestoreInterrupted(t *testing.T) {
	ctx := context.Background()
	src, srcLog := TestStore(t)
	populate(t, srcLog, "src", 2)
	snap := snapshotBytes(t, src)

	cfg := DefaultConfig(t.TempDir())
	cfg.SyncWrites, cfg.GCInterval = false, 0
	s, err := Open(cfg)
	require.NoError(t, err)
	require.False(t, s.RestoreInterrupted())
	require.NoError(t, s.db.Update(func(txn *badger.Txn) error { return setU64(txn, keyRestoring, 5) }))
	require.NoError(t, s.Close())

	s, err = Open(cfg)
	require.NoError(t, err)
	defer s.Close()
	require.True(t, s.RestoreInterrupted())
	log := NewLocalLog(s)
	_, err = log.Append(ctx, JobKey("a"), 0, Change{Record: jobRecord("a", nil, time.Time{})})
	require.ErrorIs(t, err, ErrCorrupt, "no apply on a half-restored store")
	require.Contains(t, err.Error(), "interrupted snapshot restore")
	require.NoError(t, log.Close())
	_, err = s.World().Read()
	require.ErrorIs(t, err, ErrCorrupt, "nothing reads the World of a half-restored store")

	var buf bytes.Buffer
	require.NoError(t, s.WriteSnapshot(&buf))
	hdr, err := ReadSnapshotHeader(&buf)
	require.NoError(t, err)
	require.Equal(t, uint64(len(dumpStore(t, s))), hdr.Count, "the restore mark is never part of a snapshot")

	require.NoError(t, s.RestoreSnapshot(bytes.NewReader(snap)))
	require.False(t, s.RestoreInterrupted())
	require.Equal(t, dumpStore(t, src), dumpStore(t, s))
	_, err = s.World().Read()
	require.NoError(t, err, "a complete restore rebuilds the World")
}
