package main

import (
	"context"
	"fmt"
	"time"

	"google.golang.org/grpc"

	"github.com/norsk-oss/norsk-manager/proto/managerpb"
)

// timedEvent is an event with the time the bench received it.
type timedEvent struct {
	ev *managerpb.EventStreamEvent
	at time.Time
}

// eventWatch follows a manager's event stream on its own connection. A
// goroutine receives continuously (so the manager never sees a slow
// subscriber) into a large buffer that waitFor drains.
type eventWatch struct {
	conn   *grpc.ClientConn
	cancel context.CancelFunc
	ch     chan timedEvent
	errCh  chan error // receives the stream's end
}

func watchEvents(ctx context.Context, addr string) (*eventWatch, error) {
	conn, api, err := dial(addr)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	stream, err := api.EventStream(ctx, &managerpb.EventStreamRequest{})
	if err != nil {
		cancel()
		conn.Close()
		return nil, fmt.Errorf("EventStream: %w", err)
	}
	w := &eventWatch{conn: conn, cancel: cancel, ch: make(chan timedEvent, 1<<16), errCh: make(chan error, 1)}
	go func() {
		for {
			ev, err := stream.Recv()
			if err != nil {
				w.errCh <- err
				return
			}
			w.ch <- timedEvent{ev: ev, at: time.Now()}
		}
	}()
	if _, err := w.waitFor(ctx, 30*time.Second, "initial_data_complete", func(ev *managerpb.EventStreamEvent) bool {
		return ev.GetInitialDataComplete() != nil
	}); err != nil {
		w.close()
		return nil, err
	}
	return w, nil
}

func (w *eventWatch) close() {
	w.cancel()
	w.conn.Close()
}

// waitFor discards events until one satisfies match and returns the time it
// was received.
func (w *eventWatch) waitFor(ctx context.Context, timeout time.Duration, what string, match func(*managerpb.EventStreamEvent) bool) (time.Time, error) {
	t := time.NewTimer(timeout)
	defer t.Stop()
	for {
		select {
		case te := <-w.ch:
			if match(te.ev) {
				return te.at, nil
			}
		case err := <-w.errCh:
			return time.Time{}, fmt.Errorf("event stream ended while waiting for %s: %w", what, err)
		case <-t.C:
			return time.Time{}, fmt.Errorf("no %s event within %s", what, timeout)
		case <-ctx.Done():
			return time.Time{}, ctx.Err()
		}
	}
}

// newestEntry reports whether ev is a job_updated of job whose newest
// history entry satisfies is.
func newestEntry(ev *managerpb.EventStreamEvent, job string, is func(*managerpb.JobHistoryEntry) bool) bool {
	jwh := ev.GetJobUpdated().GetJobWithHistory()
	if jwh.GetJob().GetJobId().GetJobId() != job {
		return false
	}
	h := jwh.GetHistoryEntry()
	return len(h) > 0 && is(h[len(h)-1])
}

// nodeStarted reports whether ev is node_started for node.
func nodeStarted(ev *managerpb.EventStreamEvent, node string) bool {
	return ev.GetNodeStarted().GetNodeMetadata().GetNodeId().GetNodeId() == node
}
