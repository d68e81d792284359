package gateway

import (
	"container/heap"
	"context"
	"time"
)

// Pending windows: per subscriber, which PRE jobs are within its window,
// and when the others enter it (docs/design/event-stream.md, "Pending
// windows").

// classify records a PRE job's start and returns whether it is within the
// window at now.
func (sub *subscriber) classify(id string, start, now time.Time) bool {
	within := !start.After(now.Add(sub.window))
	sub.pending[id] = within
	if within {
		delete(sub.waiting, id)
	} else {
		sub.waiting[id] = start
		heap.Push(&sub.starts, startEntry{id: id, start: start})
	}
	return within
}

func (sub *subscriber) forget(id string) {
	delete(sub.pending, id)
	delete(sub.waiting, id)
}

// nextEntry returns the start of the earliest waiting job.
func (sub *subscriber) nextEntry() (time.Time, bool) {
	for sub.starts.Len() > 0 {
		top := sub.starts[0]
		if t, ok := sub.waiting[top.id]; ok && t.Equal(top.start) {
			return top.start, true
		}
		heap.Pop(&sub.starts)
	}
	return time.Time{}, false
}

// windowTick sends job_pending for waiting jobs whose start entered the
// window.
func (sub *subscriber) windowTick(ctx context.Context) error {
	now := sub.srv.cfg.Clock()
	var entered []string
	for {
		start, ok := sub.nextEntry()
		if !ok || start.After(now.Add(sub.window)) {
			break
		}
		id := heap.Pop(&sub.starts).(startEntry).id
		delete(sub.waiting, id)
		sub.pending[id] = true
		entered = append(entered, id)
	}
	return sub.sendPending(ctx, entered)
}

type startEntry struct {
	id    string
	start time.Time
}

// startHeap is a min-heap of waiting jobs by start time.
type startHeap []startEntry

func (h startHeap) Len() int           { return len(h) }
func (h startHeap) Less(i, j int) bool { return h[i].start.Before(h[j].start) }
func (h startHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *startHeap) Push(x any)        { *h = append(*h, x.(startEntry)) }
func (h *startHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}
