package persistence

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/dgraph-io/badger/v4"
	"github.com/stretchr/testify/require"

	"github.com/norsk-oss/norsk-manager/persistence/backupfile"
	"github.com/norsk-oss/norsk-manager/proto/internalpb"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
)

// backupBytes takes a whole backup of s.
func backupBytes(t testing.TB, s *Store) ([]byte, *Backup) {
	t.Helper()
	b, err := s.BeginBackup(BackupInfo{ManagerVersion: "test", Now: func() time.Time { return time.Date(2026, 5, 6, 7, 8, 9, 0, time.UTC) }})
	require.NoError(t, err)
	t.Cleanup(b.Close)
	var buf bytes.Buffer
	n, err := b.WriteTo(&buf)
	require.NoError(t, err)
	require.Equal(t, int64(buf.Len()), n)
	return buf.Bytes(), b
}

func writeTemp(t testing.TB, b []byte) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "backup.nmb")
	require.NoError(t, os.WriteFile(p, b, 0o600))
	return p
}

func TestBackup_RoundTrip(t *testing.T) {
	src, srcLog := TestStore(t)
	populate(t, srcLog, "src", 5)
	want := dumpStore(t, src)
	file, b := backupBytes(t, src)

	m := b.Meta()
	var marker struct {
		StoreID string `json:"store_id"`
	}
	mb, err := os.ReadFile(filepath.Join(src.cfg.Dir, markerFile))
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(mb, &marker))
	_, head := src.EventBounds()
	require.Equal(t, backupfile.Meta{StoreID: marker.StoreID, StoreFormat: FormatVersion, AppliedIndex: src.FSM().AppliedIndex(),
		EventHead: uint64(head), Keys: uint64(len(want)), CreatedAt: time.Date(2026, 5, 6, 7, 8, 9, 0, time.UTC), ManagerVersion: "test"}, m)
	require.Equal(t, int64(len(file)), b.EstimatedSize(), "small values: the estimate is exact")
	require.Equal(t, uint64(len(want)), b.KeysWritten())

	got, err := VerifyBackup(bytes.NewReader(file))
	require.NoError(t, err)
	require.Equal(t, m, got)
	// The envelope alone checks out without the store's code.
	em, size, err := backupfile.Verify(bytes.NewReader(file))
	require.NoError(t, err)
	require.Equal(t, m, em)
	require.Equal(t, int64(len(file)), size)

	dst, dstLog := TestStore(t)
	populate(t, dstLog, "dst", 3)
	require.NoError(t, dstLog.Close())
	rm, err := dst.RestoreBackup(writeTemp(t, file))
	require.NoError(t, err)
	require.Equal(t, m, rm)
	require.Equal(t, want, dumpStore(t, dst))
	require.Equal(t, storeMetaOf(src), storeMetaOf(dst))
}

// TestBackup_ConsistentUnderWrites takes a backup while a writer creates
// jobs one after another: the backup holds every job acknowledged before
// it began, and exactly a prefix of the writer's jobs (one read view, no
// torn state), matching its applied index and event head.
func TestBackup_ConsistentUnderWrites(t *testing.T) {
	ctx := context.Background()
	src, log := TestStore(t)
	var (
		mu    sync.Mutex
		acked int // jobs 0..acked-1 are acknowledged
	)
	stop := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				done <- nil
				return
			default:
			}
			id := fmt.Sprintf("job-%06d", i)
			if _, err := log.Append(ctx, JobKey(id), 0, Change{Record: jobRecord(id, nil, time.Time{}), Events: []*managerpb.EventStreamEvent{jobDeleted(id)}}); err != nil {
				done <- err
				return
			}
			mu.Lock()
			acked = i + 1
			mu.Unlock()
		}
	}()
	waitAcked := func(n int) {
		deadline := time.Now().Add(10 * time.Second)
		for {
			mu.Lock()
			a := acked
			mu.Unlock()
			if a >= n {
				return
			}
			require.True(t, time.Now().Before(deadline), "writer stuck at %d", a)
			time.Sleep(time.Millisecond) // poll
		}
	}
	waitAcked(50)
	mu.Lock()
	before := acked
	mu.Unlock()
	file, b := backupBytes(t, src)
	waitAcked(before + 50) // the writer went on during the backup
	close(stop)
	require.NoError(t, <-done)

	dst, dstLog := TestStore(t)
	require.NoError(t, dstLog.Close())
	_, err := dst.RestoreBackup(writeTemp(t, file))
	require.NoError(t, err)
	var n int
	require.NoError(t, dst.View(func(r *Reader) error {
		return r.Jobs(func(rec *internalpb.JobRecord) error {
			require.Equal(t, fmt.Sprintf("job-%06d", n), rec.GetJob().GetJob().GetJobId().GetJobId(), "jobs form a prefix")
			n++
			return nil
		})
	}))
	require.GreaterOrEqual(t, n, before, "every job acknowledged before the backup began is in it")
	require.Equal(t, uint64(n), b.Meta().EventHead, "one event per job")
	require.Equal(t, uint64(n), b.Meta().AppliedIndex, "one batch per sequential append")
	require.Equal(t, b.Meta().AppliedIndex, dst.FSM().AppliedIndex())
}

func TestStore_BeginBackup_RefusedDuringRestore(t *testing.T) {
	s, _ := TestStore(t)
	require.NoError(t, s.db.Update(func(txn *badger.Txn) error { return setU64(txn, keyRestoring, 5) }))
	_, err := s.BeginBackup(BackupInfo{})
	require.ErrorIs(t, err, ErrRestoring)
}

func TestVerifyBackup_RefusesBad(t *testing.T) {
	src, srcLog := TestStore(t)
	populate(t, srcLog, "src", 3)
	good, b := backupBytes(t, src)
	hb, err := backupfile.EncodeHeader(b.Meta())
	require.NoError(t, err)
	hdrLen := len(hb)
	// resum recomputes the file checksum, so that only the deeper checks
	// can object.
	resum := func(x []byte) []byte {
		body := x[:len(x)-sha256.Size]
		sum := sha256.Sum256(body)
		return append(bytes.Clone(body), sum[:]...)
	}
	with := func(f func(x []byte) []byte) []byte { return f(bytes.Clone(good)) }
	otherMeta := func(f func(m *backupfile.Meta)) []byte {
		m := b.Meta()
		f(&m)
		h, err := backupfile.EncodeHeader(m)
		require.NoError(t, err)
		return resum(append(h, good[hdrLen:]...))
	}
	cases := []struct {
		name string
		file []byte
		want string
	}{
		{"empty", nil, "ends inside its header"},
		{"truncated header", good[:10], "ends inside its header"},
		{"truncated metadata", good[:hdrLen-3], "ends inside its metadata"},
		{"truncated in the snapshot", good[:hdrLen+(len(good)-hdrLen)/2], "snapshot truncated"},
		{"missing file checksum", good[:len(good)-sha256.Size], "ends before its checksum"},
		{"truncated file checksum", good[:len(good)-1], "ends before its checksum"},
		{"flipped bit in the file checksum", with(func(x []byte) []byte { x[len(x)-1] ^= 1; return x }), "does not match"},
		{"flipped bit in the metadata", with(func(x []byte) []byte { x[hdrLen-2] ^= 0x20; return x }), ""},
		{"flipped bit in a record", with(func(x []byte) []byte { x[hdrLen+(len(x)-hdrLen)/2] ^= 1; return x }), ""},
		{"trailing data", append(bytes.Clone(good), 0), "after its checksum"},
		{"bad magic", with(func(x []byte) []byte { x[0] = 'X'; return resum(x) }), "not a norsk-manager backup"},
		{"future version", with(func(x []byte) []byte { binary.BigEndian.PutUint32(x[8:], 2); return resum(x) }), "backup format version 2, this build reads 1"},
		{"metadata not JSON", with(func(x []byte) []byte { x[16] = '!'; return resum(x) }), "metadata is not valid JSON"},
		{"huge metadata length", with(func(x []byte) []byte { binary.BigEndian.PutUint32(x[12:], 1<<30); return resum(x) }), "metadata length"},
		{"metadata disagrees on the applied index", otherMeta(func(m *backupfile.Meta) { m.AppliedIndex++ }), "applied index"},
		{"metadata disagrees on the keys", otherMeta(func(m *backupfile.Meta) { m.Keys-- }), "keys"},
		{"snapshot of another store format", with(func(x []byte) []byte { binary.BigEndian.PutUint32(x[hdrLen+12:], 99); return resum(x) }), "store format 99"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := VerifyBackup(bytes.NewReader(tc.file))
			require.ErrorIs(t, err, ErrCorrupt)
			require.ErrorContains(t, err, tc.want)

			dst, dstLog := TestStore(t)
			populate(t, dstLog, "dst", 2)
			require.NoError(t, dstLog.Close())
			before, meta := dumpStore(t, dst), storeMetaOf(dst)
			_, err = dst.RestoreBackup(writeTemp(t, tc.file))
			require.ErrorIs(t, err, ErrCorrupt)
			require.Equal(t, before, dumpStore(t, dst), "a refused backup must not touch the store")
			require.Equal(t, meta, storeMetaOf(dst))
		})
	}
}

// TestStore_RestartEventLog: after a restart no event is retained, every
// earlier index is below the oldest retained one, the head moved by the
// skip, appends continue after it, and the base survives a snapshot.
func TestStore_RestartEventLog(t *testing.T) {
	ctx := context.Background()
	cfg := DefaultConfig(t.TempDir())
	cfg.SyncWrites, cfg.GCInterval = false, 0
	s, log := TestStoreWithConfig(t, cfg)
	populate(t, log, "a", 4)
	require.NoError(t, log.Close())
	_, oldHead := s.EventBounds()
	require.NotZero(t, oldHead)

	head, err := s.RestartEventLog(1000)
	require.NoError(t, err)
	require.Equal(t, oldHead+1000, head)
	first, h := s.EventBounds()
	require.Equal(t, head, h)
	require.Equal(t, head+1, first, "nothing retained")
	base, err := s.EventLogBase()
	require.NoError(t, err)
	require.Equal(t, head, base)
	_, err = s.ReadEvents(oldHead, 10)
	require.ErrorIs(t, err, ErrEventsTrimmed)
	evs, err := s.ReadEvents(head+1, 10)
	require.NoError(t, err)
	require.Empty(t, evs)
	for k := range dumpStore(t, s) {
		require.NotContains(t, k, prefixEv, "old events deleted")
	}

	log = NewLocalLog(s)
	res, err := log.Append(ctx, JobKey("new"), 0, Change{Record: jobRecord("new", nil, time.Time{}), Events: []*managerpb.EventStreamEvent{jobDeleted("new")}})
	require.NoError(t, err)
	require.NoError(t, log.Close())
	require.Equal(t, head+1, res.LastEvent)
	evs, err = s.ReadEvents(head+1, 10)
	require.NoError(t, err)
	require.Len(t, evs, 1)

	// The base is state: it travels in snapshots, and reopening keeps it.
	dst, dstLog := TestStore(t)
	require.NoError(t, dstLog.Close())
	require.NoError(t, dst.RestoreSnapshot(bytes.NewReader(snapshotBytes(t, s))))
	base2, err := dst.EventLogBase()
	require.NoError(t, err)
	require.Equal(t, head, base2)
	require.NoError(t, s.Close())
	s, err = Open(cfg)
	require.NoError(t, err)
	defer s.Close()
	first, h = s.EventBounds()
	require.Equal(t, [2]Index{head + 1, head + 1}, [2]Index{first, h})

	_, err = s.RestartEventLog(0)
	require.Error(t, err)
}

func TestRandomEventSkip_Range(t *testing.T) {
	for range 100 {
		k := RandomEventSkip()
		require.GreaterOrEqual(t, k, uint64(MinEventSkip))
		require.Less(t, k, uint64(2*MinEventSkip))
	}
}
