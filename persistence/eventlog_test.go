package persistence

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	"github.com/norsk-oss/norsk-manager/proto/managerpb"
)

// TestStore_ReadEventPage_BoundsAgreeWithEvents: while appends commit, a
// page's head is never below the index of an event it returns, and its
// first never above (issue 10 §2: the head cached by the FSM is published
// after the commit, so a reader comparing it with the events it read
// could be one past it). The reader polls as fast as it can so that it
// reads while batches commit.
func TestStore_ReadEventPage_BoundsAgreeWithEvents(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	store, log := TestStore(t)
	const appends = 2000
	done := make(chan error, 1)
	go func() {
		for i := range appends {
			key := JobKey(fmt.Sprintf("j%d", i))
			if _, err := log.Append(ctx, key, 0, Change{Record: jobRecord(key.ID(), nil, time.Time{}),
				Events: []*managerpb.EventStreamEvent{jobDeleted(key.ID()), jobDeleted(key.ID())}}); err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	var cursor Index
	for cursor < 2*appends {
		p, err := store.ReadEventPage(cursor+1, 64)
		require.NoError(t, err)
		if len(p.Events) == 0 {
			require.Equal(t, cursor, p.Head, "no event after the cursor: the cursor is the head")
			if _, err := store.WaitForEvents(ctx, cursor); err != nil {
				t.Fatalf("wait for events after %d: %v", cursor, err)
			}
			continue
		}
		for _, ev := range p.Events {
			cursor++
			require.Equal(t, cursor, Index(ev.GetEvent().GetLogIndex()), "events in order without gaps")
		}
		require.GreaterOrEqual(t, p.Head, cursor, "the page's head is at least every index it returned")
		require.Equal(t, Index(1), p.First)
	}
	require.NoError(t, <-done)
}

// TestReader_EventBounds: the bounds of an empty log, a growing one and a
// trimmed one, as a view reads them.
func TestReader_EventBounds(t *testing.T) {
	ctx := context.Background()
	cfg := DefaultConfig(t.TempDir())
	cfg.SyncWrites, cfg.GCInterval, cfg.EventRetention = false, 0, 3
	store, log := TestStoreWithConfig(t, cfg)
	bounds := func() (Index, Index) {
		t.Helper()
		var first, head Index
		require.NoError(t, store.View(func(r *Reader) (err error) {
			first, head, err = r.EventBounds()
			return err
		}))
		return first, head
	}
	first, head := bounds()
	require.Equal(t, [2]Index{1, 0}, [2]Index{first, head}, "empty log: first is head+1")
	for i := range 5 {
		_, err := log.Append(ctx, JobKey("x"), Seq(i), Change{Record: jobRecord("x", nil, time.Time{}), Events: []*managerpb.EventStreamEvent{jobDeleted("x")}})
		require.NoError(t, err)
	}
	first, head = bounds()
	require.Equal(t, [2]Index{3, 5}, [2]Index{first, head}, "retention 3 keeps 3..5")
	cf, ch := store.EventBounds()
	require.Equal(t, [2]Index{first, head}, [2]Index{cf, ch}, "the cache agrees once the appends returned")
	p, err := store.ReadEventPage(2, 10)
	require.ErrorIs(t, err, ErrEventsTrimmed)
	require.Equal(t, [2]Index{3, 5}, [2]Index{p.First, p.Head})
}

// TestStore_ReadEventPageAdmit: a page ends at the first event admit
// refuses, saying its size; the sizes admit was told are the events'
// stored sizes; a nil admit and an admit that takes all read the same
// events (issue 21 §4: the page of an event stream is bounded in bytes).
func TestStore_ReadEventPageAdmit(t *testing.T) {
	ctx := context.Background()
	store, log := TestStore(t)
	for i := range 6 {
		key := JobKey(fmt.Sprintf("j%d", i))
		_, err := log.Append(ctx, key, 0, Change{Record: jobRecord(key.ID(), nil, time.Time{}), Events: []*managerpb.EventStreamEvent{jobDeleted(key.ID())}})
		require.NoError(t, err)
	}
	all, err := store.ReadEventPage(1, 100)
	require.NoError(t, err)
	require.Len(t, all.Events, 6)
	var told []int64
	taken, err := store.ReadEventPageAdmit(1, 100, func(size int64) bool { told = append(told, size); return true })
	require.NoError(t, err)
	require.Len(t, taken.Events, 6)
	require.Equal(t, told, taken.Sizes)
	for i, ev := range taken.Events {
		require.Equal(t, uint64(i+1), ev.GetEvent().GetLogIndex())
		require.Positive(t, taken.Sizes[i])
		require.InDelta(t, proto.Size(all.Events[i]), taken.Sizes[i], 16, "event %d: the stored size", i+1)
	}
	require.Zero(t, taken.Refused)

	var budget int64 = taken.Sizes[1] + taken.Sizes[2] + 1
	p, err := store.ReadEventPageAdmit(2, 100, func(size int64) bool {
		if size > budget {
			return false
		}
		budget -= size
		return true
	})
	require.NoError(t, err)
	require.Len(t, p.Events, 2, "the page ends at the event that does not fit")
	require.Equal(t, uint64(3), p.Events[1].GetEvent().GetLogIndex())
	require.Equal(t, taken.Sizes[3], p.Refused)

	p, err = store.ReadEventPageAdmit(4, 100, func(int64) bool { return false })
	require.NoError(t, err)
	require.Empty(t, p.Events)
	require.Equal(t, taken.Sizes[3], p.Refused)
	p, err = store.ReadEventPageAdmit(7, 100, func(int64) bool { return true })
	require.NoError(t, err)
	require.Empty(t, p.Events, "beyond the head")
	require.Zero(t, p.Refused)
}
