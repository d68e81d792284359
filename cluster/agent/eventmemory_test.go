package agent

import (
	"context"
	"fmt"
	"runtime"
	rtmetrics "runtime/metrics"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/norsk-oss/norsk-manager/proto/commonpb"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
)

// heapAfterGC is the live heap in bytes: what a garbage collection it
// runs found reachable (not what others allocated since, as
// MemStats.HeapAlloc would add while the manager works). Two collections:
// buffers given back to a sync.Pool (gRPC's) survive the first.
func heapAfterGC() uint64 {
	runtime.GC()
	runtime.GC()
	s := []rtmetrics.Sample{{Name: "/gc/heap/live:bytes"}}
	rtmetrics.Read(s)
	return s[0].Value.Uint64()
}

// TestEventStream_MemoryBudgetWithStalledSubscribers is issue 21 §4: 64
// streams of one caller that stop reading, then 20 jobs of 900 KiB. Before
// the fix each stream held a read page of up to 256 events that was not
// counted, on top of its 16 MiB queue, and nothing bounded the streams
// together: the heap grew by gigabytes. Now the bytes every stream holds
// (page, queue, the message gRPC sends) stay within --event-stream-memory,
// the slowest subscribers are ended with ResourceExhausted and
// the index to resume from, and the heap stays within the budget plus what
// the test allows for the store and for gRPC (the one message a stream that
// was cut leaves with gRPC until its client reads it).
func TestEventStream_MemoryBudgetWithStalledSubscribers(t *testing.T) {
	const (
		streams  = 64
		conns    = 4
		jobs     = 20
		jobBytes = 900 << 10
		budget   = 64 << 20
		// residue: the last message of every stream cut, which gRPC
		// keeps (in a 1 MiB buffer) until its client reads it.
		residue = streams << 20
		// writes: the write path's own growth (the jobs' records in their
		// grains, the journal, CreateJob's copies; 84 MiB with no stream
		// at all) and the test's clients (64 KiB windows).
		writes = 128 << 20
	)
	cfg := DevConfig(t.TempDir())
	cfg.Store.SyncWrites, cfg.Store.GCInterval = false, 0
	// A memtable the jobs do not fill: a second one, allocated whole when
	// the first is full, would count as heap growth of the streams.
	cfg.Store.MemTableSize, cfg.Store.MinFreeDisk = 256<<20, 0
	cfg.Events.MaxTotalBytes = budget
	// Only the budget may end a stream here, not the stall timeout.
	cfg.Events.SendTimeout = 5 * time.Minute
	a, err := New(cfg)
	require.NoError(t, err)
	require.NoError(t, a.Start())
	t.Cleanup(a.Shutdown)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	// Clients with fixed 64 KiB flow-control windows (no BDP growth): what
	// a client that stops reading lets the manager push into it is small.
	clients := make([]managerpb.ManagerClient, conns)
	for i := range clients {
		conn, err := grpc.NewClient(a.APIAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithInitialWindowSize(64<<10), grpc.WithInitialConnWindowSize(64<<10),
			grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(8<<20)))
		require.NoError(t, err)
		t.Cleanup(func() { conn.Close() })
		clients[i] = managerpb.NewManagerClient(conn)
	}
	base := heapAfterGC()
	subs := make([]managerpb.Manager_EventStreamClient, streams)
	for i := range subs {
		s, err := clients[i%conns].EventStream(ctx, &managerpb.EventStreamRequest{})
		require.NoError(t, err)
		ev, err := s.Recv()
		require.NoError(t, err)
		require.NotNil(t, ev.GetInitialDataComplete())
		subs[i] = s // and it stops reading
	}

	// Sample the heap and the streams' accounted bytes while the jobs are
	// created and until the streams have settled.
	var (
		mu                  sync.Mutex
		peakHeap, peakBytes uint64
	)
	sample := func() (heap, held uint64) {
		h := heapAfterGC()
		heap, held = h-min(base, h), uint64(a.gateway.EventStreamBytes())
		mu.Lock()
		peakHeap, peakBytes = max(peakHeap, heap), max(peakBytes, held)
		mu.Unlock()
		return heap, held
	}
	stop := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for {
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
				sample()
			}
		}
	}()
	payload := strings.Repeat("x", jobBytes)
	_, head0 := a.Store().EventBounds()
	for i := range jobs {
		_, err := clients[0].CreateJob(ctx, &managerpb.Job{JobId: &commonpb.JobId{JobId: fmt.Sprintf("big-%02d", i)}, ManagerConfiguration: payload})
		require.NoError(t, err)
	}
	_, head := a.Store().EventBounds()
	// Settled: the accounted bytes and the number of streams stay the same
	// over ten samples (the streams still open are blocked on their
	// clients, the others were cut).
	var last [2]int64
	same := 0
	deadline := time.Now().Add(time.Minute)
	for same < 10 {
		require.True(t, time.Now().Before(deadline), "the event streams never settled")
		sample()
		now := [2]int64{a.gateway.EventStreamBytes(), a.gateway.Subscribers()}
		if now == last {
			same++
		} else {
			same, last = 0, now
		}
	}
	close(stop)
	<-sampled
	settled := heapAfterGC() - min(base, heapAfterGC())
	t.Logf("%d stalled streams, %d jobs of %d KiB (log %d..%d): peak heap growth %d MiB, settled %d MiB, peak accounted %d MiB (budget %d MiB), %d streams still open",
		streams, jobs, jobBytes>>10, head0+1, head, peakHeap>>20, settled>>20, peakBytes>>20, budget>>20, a.gateway.Subscribers())
	require.LessOrEqual(t, peakBytes, uint64(budget), "the streams held more than their budget")
	require.LessOrEqual(t, peakHeap, uint64(budget+residue+writes), "the heap grew past the budget and the margins")
	require.LessOrEqual(t, settled, uint64(budget+residue+writes/2), "the heap stayed past the budget and the margins")
	require.Less(t, a.gateway.Subscribers(), int64(streams), "no stream was cut")

	// Every stream now reads: it gets jobs in log order, then either all of
	// them or ResourceExhausted naming the budget, with an ErrorInfo whose
	// resume_from_index is the last index it received.
	cut := 0
	for i, s := range subs {
		var prevIndex, lastIndex uint64
		got := 0
		for got < jobs {
			ev, err := s.Recv()
			if err != nil {
				require.Equal(t, codes.ResourceExhausted, status.Code(err), "stream %d: %v", i, err)
				require.Contains(t, status.Convert(err).Message(), "--event-stream-memory", "stream %d", i)
				var info *errdetails.ErrorInfo
				for _, d := range status.Convert(err).Details() {
					if e, ok := d.(*errdetails.ErrorInfo); ok {
						info = e
					}
				}
				require.NotNil(t, info, "stream %d: no ErrorInfo detail: %v", i, err)
				require.Equal(t, "EVENT_STREAM_MEMORY", info.GetReason())
				// The index the manager knows was sent: the last one
				// received, or the one before when the last was still in
				// gRPC's hands at the cut (it reached the client anyway; a
				// resume from the earlier index repeats it, never skips).
				resume, perr := strconv.ParseUint(info.GetMetadata()["resume_from_index"], 10, 64)
				require.NoError(t, perr)
				require.True(t, resume == max(lastIndex, uint64(head0)) || resume == max(prevIndex, uint64(head0)),
					"stream %d: resume index %d after receiving up to %d (before it %d): %v", i, resume, lastIndex, prevIndex, err)
				require.Contains(t, status.Convert(err).Message(), "resume_from_index="+info.GetMetadata()["resume_from_index"])
				cut++
				break
			}
			if ev.GetJobUpdated() == nil {
				continue // a job_pending derived from it
			}
			require.Greater(t, ev.GetLogIndex(), max(lastIndex, uint64(head0)), "stream %d", i)
			prevIndex, lastIndex = lastIndex, ev.GetLogIndex()
			got++
		}
		if i == 0 && got < jobs {
			// Resuming from the index given delivers the rest.
			rs, err := clients[1].EventStream(ctx, &managerpb.EventStreamRequest{ResumeFromIndex: proto.Uint64(max(lastIndex, uint64(head0)))})
			require.NoError(t, err)
			for got < jobs {
				ev, err := rs.Recv()
				require.NoError(t, err)
				if ev.GetJobUpdated() != nil {
					got++
				}
			}
		}
	}
	t.Logf("%d of %d streams were cut by the budget", cut, streams)
	require.Positive(t, cut)
}
