package agent

import (
	"context"
	"fmt"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/norsk-oss/norsk-manager/proto/commonpb"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
)

// TestJobSearch_StalledClients: JobSearch clients over large jobs that
// stop reading. Before the fix each held a store read view open while its
// Send was blocked, with no timeout and no limit: a hostile caller with the
// read role pinned the store's buffers with as many streams as it liked.
// Now each stalled search holds at most one batch and the message gRPC
// sends, the other callers are served, one caller cannot open more than
// its limit, and the send timeout ends the stalled searches.
func TestJobSearch_StalledClients(t *testing.T) {
	const (
		sources   = 8 // stalling source addresses: callers without ACLs
		perCaller = 8
		stalled   = sources * perCaller
		jobs      = 32
		jobBytes  = 512 << 10
		// perStream: what a stalled search may hold — its batch (up to
		// 1 MiB, plus the record that crossed it), the message gRPC is
		// sending and its encoding in a pooled 1 MiB buffer.
		perStream = 5 << 20 // measured 2–3.3 MiB; noisy (see report)
		// timeout must outlast the phases that need the stalled searches
		// open (their start, the heap samples, the per-caller limit):
		// under load (-race, another build running) they took over 8 s.
		timeout = 40 * time.Second
	)
	cfg := DevConfig(t.TempDir())
	cfg.Store.SyncWrites, cfg.Store.GCInterval = false, 0
	cfg.Store.MemTableSize, cfg.Store.MinFreeDisk = 256<<20, 0
	cfg.Events.SendTimeout = timeout
	cfg.Limits.MaxJobSearchesPerCaller, cfg.Limits.MaxJobSearches = perCaller, stalled+8
	a, err := New(cfg)
	require.NoError(t, err)
	require.NoError(t, a.Start())
	t.Cleanup(a.Shutdown)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	// A client from source address 127.0.0.<host>, with fixed 64 KiB
	// flow-control windows: a client that stops reading takes little.
	client := func(host int) managerpb.ManagerClient {
		local := &net.TCPAddr{IP: net.IPv4(127, 0, 0, byte(host))}
		conn, err := grpc.NewClient(a.APIAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
				return (&net.Dialer{LocalAddr: local}).DialContext(ctx, "tcp", addr)
			}),
			grpc.WithInitialWindowSize(64<<10), grpc.WithInitialConnWindowSize(64<<10),
			grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(8<<20)))
		require.NoError(t, err)
		t.Cleanup(func() { conn.Close() })
		return managerpb.NewManagerClient(conn)
	}
	other := client(1)
	payload := strings.Repeat("x", jobBytes)
	for i := range jobs {
		_, err := other.CreateJob(ctx, &managerpb.Job{JobId: &commonpb.JobId{JobId: fmt.Sprintf("big-%02d", i)}, ManagerConfiguration: payload})
		require.NoError(t, err)
	}
	base := heapAfterGC()

	// perCaller stalled searches from each source: opened, never read.
	var streams []managerpb.Manager_JobSearchClient
	var hostile []managerpb.ManagerClient
	for src := range sources {
		c := client(2 + src)
		hostile = append(hostile, c)
		for range perCaller {
			s, err := c.JobSearch(ctx, &managerpb.JobSearchRequest{})
			require.NoError(t, err)
			streams = append(streams, s)
		}
	}
	deadline := time.Now().Add(timeout / 2)
	for a.gateway.JobSearches() < stalled {
		require.True(t, time.Now().Before(deadline), "only %d of %d searches started", a.gateway.JobSearches(), stalled)
		time.Sleep(10 * time.Millisecond) // polling, with a deadline
	}
	// The heap once the searches have read their first batch: two
	// samples alike within 1 MiB.
	var grown uint64
	for prev := uint64(0); ; prev = grown {
		h := heapAfterGC()
		grown = h - min(base, h)
		if max(grown, prev)-min(grown, prev) < 1<<20 {
			break
		}
	}
	open := a.gateway.JobSearches()
	t.Logf("%d stalled searches over %d jobs of %d KiB: live heap grew %d MiB (%d KiB per search; bound %d KiB)",
		stalled, jobs, jobBytes>>10, grown>>20, grown/stalled>>10, perStream>>10)
	require.Equal(t, stalled, open, "a stalled search ended before the heap was measured (the send timeout is too short for this machine?)")
	require.LessOrEqual(t, grown, uint64(stalled*perStream), "the stalled searches hold more than a batch each")

	// One caller cannot open more than its limit.
	s, err := hostile[0].JobSearch(ctx, &managerpb.JobSearchRequest{})
	require.NoError(t, err)
	_, err = s.Recv()
	require.Equal(t, codes.ResourceExhausted, status.Code(err), "%v", err)
	require.Contains(t, status.Convert(err).Message(), "--max-job-searches-per-caller")

	// Another caller is served: every job.
	s, err = other.JobSearch(ctx, &managerpb.JobSearchRequest{})
	require.NoError(t, err)
	got := 0
	for {
		j, err := s.Recv()
		if err != nil {
			require.ErrorIs(t, err, io.EOF)
			break
		}
		require.Equal(t, fmt.Sprintf("big-%02d", got), j.GetJob().GetJobId().GetJobId())
		got++
	}
	require.Equal(t, jobs, got)

	// The send timeout ends the stalled searches; their clients, reading
	// now, get what was in flight, then ResourceExhausted naming it.
	deadline = time.Now().Add(timeout + 15*time.Second)
	for a.gateway.JobSearches() > 0 {
		require.True(t, time.Now().Before(deadline), "%d stalled searches were never ended", a.gateway.JobSearches())
		time.Sleep(10 * time.Millisecond) // polling, with a deadline
	}
	for i, s := range streams {
		n := 0
		for {
			_, err := s.Recv()
			if err != nil {
				require.Equal(t, codes.ResourceExhausted, status.Code(err), "stream %d: %v", i, err)
				require.Contains(t, status.Convert(err).Message(), "send timeout", "stream %d", i)
				break
			}
			n++
			require.Less(t, n, jobs, "stream %d got every job", i)
		}
	}
}
