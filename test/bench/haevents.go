package main

import (
	"cmp"
	"context"
	"slices"
	"sync"
	"time"

	"google.golang.org/grpc"

	"github.com/norsk-oss/norsk-manager/proto/managerpb"
)

// clusterEvents follows the replicated event log of a cluster on every
// manager at once, each follower on its own connection to one manager:
// when its manager dies the follower retries until the manager is back and
// resumes after the last log index it received (resume_from_index). An
// event is recorded once, by log index, with the time the first follower
// received it, so a kill never delays the events the survivors deliver.
// Snapshot events (before initial_data_complete, also after a
// stream_reset) are not log events and are not recorded.
//
// Only the events keep accepts are stored (the others only advance the
// head index), so that a run under write load does not hold every
// job_updated.
type clusterEvents struct {
	cancel context.CancelFunc
	wg     sync.WaitGroup
	keep   func(*managerpb.EventStreamEvent) bool
	n      int // followers

	mu     sync.Mutex
	seen   map[uint64]bool // log indexes received; guarded by mu
	kept   []timedEvent    // in order of receipt; guarded by mu
	head   uint64          // highest log index received; guarded by mu
	resets int             // stream_reset events received; guarded by mu
	ready  int             // followers past their first initial_data_complete; guarded by mu
}

func followCluster(ms []*haManager, keep func(*managerpb.EventStreamEvent) bool) *clusterEvents {
	ctx, cancel := context.WithCancel(context.Background())
	ce := &clusterEvents{cancel: cancel, keep: keep, n: len(ms), seen: map[uint64]bool{}}
	for _, m := range ms {
		ce.wg.Add(1)
		go func() {
			defer ce.wg.Done()
			ce.follow(ctx, m.api)
		}()
	}
	return ce
}

// follow keeps one subscription to addr until ctx ends.
func (ce *clusterEvents) follow(ctx context.Context, addr string) {
	conn, err := dialFast(addr)
	if err != nil {
		return
	}
	defer conn.Close()
	api := managerpb.NewManagerClient(conn)
	var last uint64
	ready := false
	for ctx.Err() == nil {
		last = ce.stream(ctx, api, last, &ready)
		select {
		case <-ctx.Done():
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// stream runs one subscription resuming after last (0: from a snapshot)
// until it fails, and returns the last log index it received.
func (ce *clusterEvents) stream(ctx context.Context, api managerpb.ManagerClient, last uint64, ready *bool) uint64 {
	req := &managerpb.EventStreamRequest{}
	snapshot := last == 0
	if !snapshot {
		req.ResumeFromIndex = &last
	}
	s, err := api.EventStream(ctx, req, grpc.WaitForReady(false))
	if err != nil {
		return last
	}
	for {
		ev, err := s.Recv()
		if err != nil {
			return last
		}
		at := time.Now()
		switch {
		case ev.GetStreamReset() != nil:
			ce.mu.Lock()
			ce.resets++
			ce.mu.Unlock()
			snapshot = true
		case ev.GetInitialDataComplete() != nil:
			snapshot = false
			last = max(last, ev.GetLogIndex())
			if !*ready {
				*ready = true
				ce.mu.Lock()
				ce.ready++
				ce.mu.Unlock()
			}
		case snapshot:
		case ev.GetLogIndex() > 0:
			last = max(last, ev.GetLogIndex())
			ce.mu.Lock()
			if i := ev.GetLogIndex(); !ce.seen[i] {
				ce.seen[i] = true
				ce.head = max(ce.head, i)
				if ce.keep == nil || ce.keep(ev) {
					ce.kept = append(ce.kept, timedEvent{ev: ev, at: at})
				}
			}
			ce.mu.Unlock()
		}
	}
}

func (ce *clusterEvents) close() {
	ce.cancel()
	ce.wg.Wait()
}

// headIndex is the highest log index received so far.
func (ce *clusterEvents) headIndex() uint64 {
	ce.mu.Lock()
	defer ce.mu.Unlock()
	return ce.head
}

// after returns the kept events with a log index above idx, in log order.
func (ce *clusterEvents) after(idx uint64) []timedEvent {
	ce.mu.Lock()
	var out []timedEvent
	for _, te := range ce.kept {
		if te.ev.GetLogIndex() > idx {
			out = append(out, te)
		}
	}
	ce.mu.Unlock()
	slices.SortFunc(out, func(a, b timedEvent) int { return cmp.Compare(a.ev.GetLogIndex(), b.ev.GetLogIndex()) })
	return out
}

// waitReady waits until every follower has received its first snapshot
// (from then on every new event is recorded).
func (ce *clusterEvents) waitReady(ctx context.Context, timeout time.Duration) error {
	_, err := poll(ctx, timeout, pollEvery, "every event stream past its snapshot", func() (bool, error) {
		ce.mu.Lock()
		defer ce.mu.Unlock()
		return ce.ready == ce.n, nil
	})
	return err
}

// first returns the earliest receipt of an event with a log index above
// idx that satisfies match.
func (ce *clusterEvents) first(idx uint64, match func(*managerpb.EventStreamEvent) bool) (time.Time, bool) {
	var at time.Time
	for _, te := range ce.after(idx) {
		if match(te.ev) && (at.IsZero() || te.at.Before(at)) {
			at = te.at
		}
	}
	return at, !at.IsZero()
}

// waitFirst polls first until an event matches (→ its receipt time) or
// timeout passes.
func (ce *clusterEvents) waitFirst(ctx context.Context, idx uint64, timeout time.Duration, what string, match func(*managerpb.EventStreamEvent) bool) (time.Time, error) {
	var at time.Time
	_, err := poll(ctx, timeout, pollEvery, what, func() (bool, error) {
		var ok bool
		at, ok = ce.first(idx, match)
		return ok, nil
	})
	return at, err
}

// resetCount is the number of stream_reset events the followers received.
func (ce *clusterEvents) resetCount() int {
	ce.mu.Lock()
	defer ce.mu.Unlock()
	return ce.resets
}
