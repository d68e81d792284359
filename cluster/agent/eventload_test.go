package agent

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	"github.com/norsk-oss/norsk-manager/proto/commonpb"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
)

// TestEventStream_PromptSubscribersUnderLoad is the load of issue 10 §2:
// one manager, three subscribers reading promptly from the current head,
// 3,000 CreateJob from two goroutines. Before the fix the stream's lag
// check read the head from a counter the FSM updates after the
// transaction that makes the events readable, so a subscriber could be one
// past that head, the unsigned difference wrapped, and streams ended with
// "18446744073709551615 events behind the head". Every subscriber must see
// every event exactly once, in log order, and no stream may end.
func TestEventStream_PromptSubscribersUnderLoad(t *testing.T) {
	const (
		subscribers = 3
		writers     = 2
		jobs        = 3000
	)
	// The production store settings (SyncWrites on): commits take long
	// enough for a reader to wait on one, which is when it raced the
	// head counter.
	cfg := DevConfig(t.TempDir())
	cfg.Store.GCInterval = 0
	a, c := startAgentWith(t, cfg)
	_, head := a.Store().EventBounds()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	type result struct {
		ids []string // job ids of the job_updated events, in arrival order
		err error    // why the stream ended early (nil: it delivered them all)
	}
	results := make([]result, subscribers)
	var wg sync.WaitGroup
	opened := make(chan struct{}, subscribers)
	for i := range subscribers {
		s, err := c.EventStream(ctx, &managerpb.EventStreamRequest{ResumeFromIndex: proto.Uint64(uint64(head))})
		require.NoError(t, err)
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := &results[i]
			want := uint64(head) + 1
			opened <- struct{}{}
			for len(r.ids) < jobs {
				ev, err := s.Recv()
				if err != nil {
					r.err = fmt.Errorf("after %d events: %w", len(r.ids), err)
					return
				}
				if ev.GetLogIndex() != want {
					r.err = fmt.Errorf("event %d has log index %d, want %d (a gap or a duplicate)", len(r.ids), ev.GetLogIndex(), want)
					return
				}
				want++
				u := ev.GetJobUpdated()
				if u == nil {
					r.err = fmt.Errorf("event %d at %d is %s, want job_updated", len(r.ids), ev.GetLogIndex(), eventKind(ev))
					return
				}
				r.ids = append(r.ids, u.GetJobWithHistory().GetJob().GetJobId().GetJobId())
			}
		}()
	}
	for range subscribers {
		<-opened
	}

	errs := make(chan error, writers)
	for w := range writers {
		go func() {
			for i := w; i < jobs; i += writers {
				if _, err := c.CreateJob(ctx, &managerpb.Job{JobId: &commonpb.JobId{JobId: fmt.Sprintf("load-%04d", i)}}); err != nil {
					errs <- fmt.Errorf("CreateJob load-%04d: %w", i, err)
					return
				}
			}
			errs <- nil
		}()
	}
	for range writers {
		require.NoError(t, <-errs)
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(2 * time.Minute):
		cancel() // ends the readers' Recv
		<-done
	}
	for i, r := range results {
		require.NoError(t, r.err, "subscriber %d", i)
		seen := make(map[string]bool, jobs)
		for _, id := range r.ids {
			require.False(t, seen[id], "subscriber %d got %s twice", i, id)
			seen[id] = true
		}
		require.Len(t, seen, jobs, "subscriber %d", i)
	}
}
