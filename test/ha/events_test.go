package ha

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"

	"github.com/norsk-oss/norsk-manager/client"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
	"github.com/norsk-oss/norsk-manager/test/testproc"
)

// eventRecord records what an EventSubscription delivers.
type eventRecord struct {
	mu  sync.Mutex
	all []*managerpb.EventStreamEvent
}

func (e *eventRecord) add(ev *managerpb.EventStreamEvent) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.all = append(e.all, ev)
	return nil
}

func (e *eventRecord) snapshot() []*managerpb.EventStreamEvent {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]*managerpb.EventStreamEvent(nil), e.all...)
}

// snapshotDone reports whether the initial snapshot was delivered.
func (e *eventRecord) snapshotDone() bool {
	for _, ev := range e.snapshot() {
		if ev.GetInitialDataComplete() != nil {
			return true
		}
	}
	return false
}

// createdJobs counts the job_updated events of each job id.
func (e *eventRecord) createdJobs() map[string]int {
	out := map[string]int{}
	for _, ev := range e.snapshot() {
		if jwh := ev.GetJobUpdated().GetJobWithHistory(); jwh != nil {
			out[jwh.GetJob().GetJobId().GetJobId()]++
		}
	}
	return out
}

// isLogEntry reports whether ev is an entry of the durable log (not a
// snapshot or per-subscriber classification event).
func isLogEntry(ev *managerpb.EventStreamEvent) bool {
	switch ev.GetEvent().(type) {
	case *managerpb.EventStreamEvent_NodeRunning, *managerpb.EventStreamEvent_JobActive, *managerpb.EventStreamEvent_InitialDataComplete,
		*managerpb.EventStreamEvent_JobPending, *managerpb.EventStreamEvent_JobOutOfWindow, *managerpb.EventStreamEvent_StreamReset:
		return false
	}
	return true
}

// requireExactlyOnce checks that no stream_reset was delivered and that
// the log events after the snapshot have consecutive indexes: none
// missing, none repeated, in order. It returns the last index.
func (e *eventRecord) requireExactlyOnce(t *testing.T) uint64 {
	t.Helper()
	var prev uint64
	seen := false
	for _, ev := range e.snapshot() {
		require.Nil(t, ev.GetStreamReset(), "stream_reset: the resume point was lost")
		if ev.GetInitialDataComplete() != nil && !seen {
			prev, seen = ev.GetLogIndex(), true
			continue
		}
		if !seen || !isLogEntry(ev) {
			continue
		}
		require.Equal(t, prev+1, ev.GetLogIndex(), "log events must arrive exactly once and in order (got %T)", ev.GetEvent())
		prev = ev.GetLogIndex()
	}
	require.True(t, seen, "no snapshot was delivered")
	return prev
}

// reconnectCounter is a slog.Handler that counts the client's "event
// stream broken; reconnecting" warnings and keeps their errors.
type reconnectCounter struct {
	n    atomic.Int64
	mu   sync.Mutex
	errs []string
}

func (h *reconnectCounter) Enabled(context.Context, slog.Level) bool { return true }
func (h *reconnectCounter) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h *reconnectCounter) WithGroup(string) slog.Handler            { return h }
func (h *reconnectCounter) Handle(_ context.Context, r slog.Record) error {
	if !strings.Contains(r.Message, "reconnecting") {
		return nil
	}
	h.n.Add(1)
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "error" {
			h.mu.Lock()
			h.errs = append(h.errs, a.Value.String())
			h.mu.Unlock()
		}
		return true
	})
	return nil
}

// TestEvents_EventStream_ManagerKilled: an event client reading from one
// manager of three (pick_first over an address list that names it first)
// while creates continue through another client; that manager is
// SIGKILLed mid-stream. The client reconnects to another manager with its
// last log index and must deliver every event exactly once and in order,
// including one job_updated for every acknowledged create.
func TestEvents_EventStream_ManagerKilled(t *testing.T) {
	skipShort(t)
	c := testproc.NewCluster(t, 3)
	c.StartAll()
	leader := awaitFormed(t, c.Managers)
	// The stream's manager is the leader: its death also moves the grains
	// and the Raft leadership under the writes.
	victim := leader
	urls := []string{victim.APIAddr}
	for _, m := range others(c.Managers, victim) {
		urls = append(urls, m.APIAddr)
	}
	reconnects := &reconnectCounter{}
	evClient, err := client.Connect(context.Background(), client.Settings{
		URL:    strings.Join(urls, ","),
		Logger: slog.New(reconnects),
		DialOptions: []grpc.DialOption{
			// Stick to the first reachable manager, so that the stream is
			// on the victim until it dies.
			grpc.WithDefaultServiceConfig(`{"loadBalancingConfig":[{"pick_first":{}}]}`),
		},
	})
	require.NoError(t, err)
	defer evClient.Close()

	rec := &eventRecord{}
	sub, err := evClient.Subscribe(client.EventStreamSettings{OnEvent: rec.add, InitialBackoff: 50 * time.Millisecond, MaxBackoff: time.Second})
	require.NoError(t, err)
	evCtx, stopEvents := context.WithCancel(context.Background())
	evDone := make(chan error, 1)
	go func() { evDone <- sub.Run(evCtx) }()
	defer func() {
		stopEvents()
		<-evDone
	}()
	testproc.Await(t, formTimeout, "the event snapshot", func() error {
		if !rec.snapshotDone() {
			return fmt.Errorf("%d events so far", len(rec.snapshot()))
		}
		return nil
	})

	load := newCreateLoad(haConnect(t, c.URLs(), callTimeout), "ev", 4, 0, true)
	loadCtx, stopLoad := context.WithCancel(context.Background())
	wait := load.start(loadCtx)
	defer wait()
	defer stopLoad()

	load.awaitAcked(t, 100, formTimeout)
	testproc.Await(t, formTimeout, "events of the first creates", func() error {
		if n := len(rec.createdJobs()); n < 50 {
			return fmt.Errorf("%d job events", n)
		}
		return nil
	})
	require.Zero(t, reconnects.n.Load(), "the stream broke before the manager was killed")
	atKill, _ := sub.LastIndex()
	victim.Kill()
	killedAcked := load.ackedCount()
	t.Logf("SIGKILLed %s (the stream's manager and the leader) at log index %d, %d creates acknowledged", victim.Name, atKill, killedAcked)

	load.awaitAcked(t, killedAcked+200, 90*time.Second)
	stopLoad()
	wait()
	load.requireNoUnexpected(t)
	acked, unknown := load.result()

	testproc.Await(t, formTimeout, "an event for every acknowledged create", func() error {
		got := rec.createdJobs()
		missing := 0
		for id := range acked {
			if got[id] == 0 {
				missing++
			}
		}
		if missing > 0 {
			last, _ := sub.LastIndex()
			return fmt.Errorf("%d of %d acknowledged creates not seen yet (last index %d)", missing, len(acked), last)
		}
		return nil
	})
	stopEvents()
	require.ErrorIs(t, <-evDone, context.Canceled)
	evDone <- nil // for the deferred receive

	last := rec.requireExactlyOnce(t)
	require.Greater(t, last, atKill, "events after the kill were delivered")
	require.Positive(t, reconnects.n.Load(), "the client must have reconnected after its manager died")
	reconnects.mu.Lock()
	t.Logf("event client reconnected %d time(s): %v; last index %d", reconnects.n.Load(), reconnects.errs, last)
	reconnects.mu.Unlock()
	for id, n := range rec.createdJobs() {
		require.Equal(t, 1, n, "job_updated events of %s", id)
		require.True(t, acked[id] != nil || unknown[id], "an event for %s, which nobody created", id)
	}
}
