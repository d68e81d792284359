package persistence

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

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
