package persistence

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/norsk-oss/norsk-manager/proto/commonpb"
	"github.com/norsk-oss/norsk-manager/proto/internalpb"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
)

func jobRecord(id string, tags map[string]string, start time.Time, reqs ...string) []byte {
	job := &managerpb.Job{JobId: &commonpb.JobId{JobId: id}, Tags: tags}
	if !start.IsZero() {
		job.StartDateTime = timestamppb.New(start)
	}
	b, err := proto.Marshal(&internalpb.JobRecord{Job: &managerpb.JobWithHistory{Job: job}, RecentRequests: reqs})
	if err != nil {
		panic(err)
	}
	return b
}

func jobDeleted(id string) *managerpb.EventStreamEvent {
	return &managerpb.EventStreamEvent{Event: &managerpb.EventStreamEvent_JobDeleted{
		JobDeleted: &managerpb.JobDeleted{JobId: &commonpb.JobId{JobId: id}}}}
}

func TestLocalLog_Append_Sequences(t *testing.T) {
	ctx := context.Background()
	_, log := TestStore(t)
	key := JobKey("a")

	res, err := log.Append(ctx, key, 0, Change{RequestID: "r1", Record: jobRecord("a", nil, time.Time{}, "r1")})
	require.NoError(t, err)
	require.Equal(t, Seq(1), res.Seq)

	// A second create (expected 0) conflicts and names both sequences.
	_, err = log.Append(ctx, key, 0, Change{RequestID: "r2", Record: jobRecord("a", nil, time.Time{}, "r2")})
	var ce *ConflictError
	require.ErrorAs(t, err, &ce)
	require.ErrorIs(t, err, ErrSeqConflict)
	require.Equal(t, Seq(0), ce.Expected)
	require.Equal(t, Seq(1), ce.Actual)

	// A replayed request id is answered as a duplicate, not a conflict.
	res, err = log.Append(ctx, key, 0, Change{RequestID: "r1", Record: jobRecord("a", nil, time.Time{}, "r1")})
	require.NoError(t, err)
	require.True(t, res.Duplicate)
	require.Equal(t, Seq(1), res.Seq)

	// Delete leaves a tombstone whose sequence a re-create must expect.
	res, err = log.Append(ctx, key, 1, Change{RequestID: "r3", Delete: true})
	require.NoError(t, err)
	require.Equal(t, Seq(2), res.Seq)
	tomb, seq, err := log.Load(ctx, key)
	require.ErrorIs(t, err, ErrNotFound)
	require.Equal(t, Seq(2), seq)
	require.Equal(t, []string{"r1", "r3"}, TombstoneRequests(tomb), "the tombstone keeps the last request ids, the delete's included")
	// The delete retried (its grain saw seq 1) is a duplicate, not a conflict.
	res, err = log.Append(ctx, key, 1, Change{RequestID: "r3", Delete: true})
	require.NoError(t, err)
	require.True(t, res.Duplicate)
	require.Equal(t, Seq(2), res.Seq)
	_, err = log.Append(ctx, key, 0, Change{Record: jobRecord("a", nil, time.Time{})})
	require.ErrorIs(t, err, ErrSeqConflict, "a stale writer that saw no entity must not resurrect it")
	res, err = log.Append(ctx, key, 2, Change{Record: jobRecord("a", nil, time.Time{})})
	require.NoError(t, err)
	require.Equal(t, Seq(3), res.Seq)
}

func TestLocalLog_Append_ConcurrentGroupCommit(t *testing.T) {
	ctx := context.Background()
	store, log := TestStore(t)
	const writers, perWriter = 32, 20
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			key := JobKey(fmt.Sprintf("w%d", w))
			for i := range perWriter {
				_, err := log.Append(ctx, key, Seq(i), Change{
					Record: jobRecord(key.ID(), map[string]string{"i": fmt.Sprint(i)}, time.Time{}),
					Events: []*managerpb.EventStreamEvent{jobDeleted(key.ID())},
				})
				if err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	first, head := store.EventBounds()
	require.Equal(t, Index(1), first)
	require.Equal(t, Index(writers*perWriter), head)
	require.Less(t, store.FSM().AppliedIndex(), uint64(writers*perWriter), "concurrent appends should share batches")
	evs, err := store.ReadEvents(1, writers*perWriter+10)
	require.NoError(t, err)
	require.Len(t, evs, writers*perWriter)
	for i, ev := range evs {
		require.Equal(t, uint64(i+1), ev.GetEvent().GetLogIndex())
	}
}

func TestEventLog_Retention(t *testing.T) {
	ctx := context.Background()
	cfg := DefaultConfig(t.TempDir())
	cfg.SyncWrites, cfg.GCInterval, cfg.EventRetention = false, 0, 5
	store, log := TestStoreWithConfig(t, cfg)
	for i := range 8 {
		_, err := log.Append(ctx, JobKey("x"), Seq(i), Change{Record: jobRecord("x", nil, time.Time{}), Events: []*managerpb.EventStreamEvent{jobDeleted("x")}})
		require.NoError(t, err)
	}
	first, head := store.EventBounds()
	require.Equal(t, Index(4), first)
	require.Equal(t, Index(8), head)
	_, err := store.ReadEvents(3, 10)
	require.ErrorIs(t, err, ErrEventsTrimmed)
	evs, err := store.ReadEvents(4, 10)
	require.NoError(t, err)
	require.Len(t, evs, 5)
	evs, err = store.ReadEvents(9, 10)
	require.NoError(t, err)
	require.Empty(t, evs)
}

func TestStore_WaitForEvents(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	store, log := TestStore(t)
	got := make(chan Index, 1)
	go func() {
		h, _ := store.WaitForEvents(ctx, 0)
		got <- h
	}()
	_, err := log.Append(ctx, JobKey("x"), 0, Change{Record: jobRecord("x", nil, time.Time{}), Events: []*managerpb.EventStreamEvent{jobDeleted("x")}})
	require.NoError(t, err)
	select {
	case h := <-got:
		require.Equal(t, Index(1), h)
	case <-ctx.Done():
		t.Fatal("WaitForEvents did not wake on a new event")
	}
}

func TestStore_Reopen_KeepsState(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	cfg := DefaultConfig(dir)
	cfg.GCInterval = 0
	s, err := Open(cfg)
	require.NoError(t, err)
	l := NewLocalLog(s)
	_, err = l.Append(ctx, JobKey("a"), 0, Change{Record: jobRecord("a", map[string]string{"k": "v"}, time.Time{}), Events: []*managerpb.EventStreamEvent{jobDeleted("a")}})
	require.NoError(t, err)
	require.NoError(t, l.Close())
	require.NoError(t, s.Close())

	s, err = Open(cfg)
	require.NoError(t, err)
	defer s.Close()
	_, seq, err := s.Load(JobKey("a"))
	require.NoError(t, err)
	require.Equal(t, Seq(1), seq)
	_, head := s.EventBounds()
	require.Equal(t, Index(1), head)
	require.Equal(t, uint64(1), s.FSM().AppliedIndex())
}

func TestOpen_RefusesBadDataDirs(t *testing.T) {
	cases := []struct {
		name  string
		setup func(t *testing.T) string
		want  string
	}{
		{"foreign non-empty dir", func(t *testing.T) string {
			d := t.TempDir()
			require.NoError(t, os.WriteFile(filepath.Join(d, "x"), []byte("x"), 0o600))
			return d
		}, "not a norsk-manager data dir"},
		{"store missing", func(t *testing.T) string {
			d := filepath.Join(t.TempDir(), "data")
			s, err := Open(DefaultConfig(d))
			require.NoError(t, err)
			require.NoError(t, s.Close())
			require.NoError(t, os.RemoveAll(filepath.Join(d, storeSubdir)))
			return d
		}, "store"},
		{"corrupt marker", func(t *testing.T) string {
			d := t.TempDir()
			require.NoError(t, os.WriteFile(filepath.Join(d, markerFile), []byte("{not json"), 0o600))
			return d
		}, "marker file"},
		{"corrupt store", func(t *testing.T) string {
			d := filepath.Join(t.TempDir(), "data")
			s, err := Open(DefaultConfig(d))
			require.NoError(t, err)
			require.NoError(t, s.Close())
			require.NoError(t, os.WriteFile(filepath.Join(d, storeSubdir, "MANIFEST"), []byte("garbage, not a manifest"), 0o600))
			return d
		}, "MANIFEST is damaged"},
		{"future format", func(t *testing.T) string {
			d := t.TempDir()
			require.NoError(t, os.WriteFile(filepath.Join(d, markerFile), []byte(`{"format": 99}`), 0o600))
			return d
		}, "format version 99"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := tc.setup(t)
			before := listDir(t, dir)
			_, err := Open(DefaultConfig(dir))
			require.Error(t, err)
			require.ErrorIs(t, err, ErrCorrupt)
			require.Contains(t, err.Error(), tc.want)
			require.Contains(t, err.Error(), dir)
			require.Equal(t, before, listDir(t, dir), "a refused data dir must be left untouched")
		})
	}
}

func listDir(t *testing.T, dir string) []string {
	var out []string
	require.NoError(t, filepath.Walk(dir, func(p string, _ os.FileInfo, err error) error {
		out = append(out, strings.TrimPrefix(p, dir))
		return err
	}))
	return out
}

func TestOpen_NewDirIsInitialised(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "new", "data")
	s, err := Open(DefaultConfig(dir))
	require.NoError(t, err)
	require.NoError(t, s.Close())
	_, err = os.Stat(filepath.Join(dir, markerFile))
	require.NoError(t, err)
}

func TestLocalLog_Closed(t *testing.T) {
	store, log := TestStore(t)
	_ = store
	require.NoError(t, log.Close())
	_, err := log.Append(context.Background(), JobKey("a"), 0, Change{Record: jobRecord("a", nil, time.Time{})})
	require.True(t, errors.Is(err, ErrClosed), "got %v", err)
}

// TestLocalLog_LargeAppendDoesNotFailOthers: when a batch is too big for
// one badger transaction, the appends are applied on their own; a change
// over the limit fails alone with ErrTooLarge.
func TestLocalLog_LargeAppendDoesNotFailOthers(t *testing.T) {
	ctx := context.Background()
	cfg := DefaultConfig(t.TempDir())
	cfg.SyncWrites, cfg.GCInterval = false, 0
	cfg.MemTableSize, cfg.MaxBatchBytes = 8<<20, 900<<10 // badger's txn limit: 1.2 MiB
	_, log := TestStoreWithConfig(t, cfg)
	big := strings.Repeat("x", 800<<10)
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 8 {
				id := fmt.Sprintf("big-%d-%d", w, i)
				_, err := log.Append(ctx, JobKey(id), 0, Change{Record: bigJobRecord(id, big)})
				errs <- err
			}
		}()
	}
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 8 {
				id := fmt.Sprintf("small-%d-%d", w, i)
				_, err := log.Append(ctx, JobKey(id), 0, Change{Record: jobRecord(id, nil, time.Time{})})
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	_, err := log.Append(ctx, JobKey("huge"), 0, Change{Record: bigJobRecord("huge", big+big)})
	require.ErrorIs(t, err, ErrTooLarge)
	require.Contains(t, err.Error(), "job/huge")
	// An index key over badger's key limit fails its own append only.
	_, err = log.Append(ctx, JobKey("longtag"), 0, Change{Record: jobRecord("longtag", map[string]string{"t": strings.Repeat("y", 70<<10)}, time.Time{})})
	require.ErrorIs(t, err, ErrTooLarge)
}

func bigJobRecord(id, config string) []byte {
	b, err := proto.Marshal(&internalpb.JobRecord{Job: &managerpb.JobWithHistory{Job: &managerpb.Job{
		JobId: &commonpb.JobId{JobId: id}, ManagerConfiguration: config}}})
	if err != nil {
		panic(err)
	}
	return b
}
