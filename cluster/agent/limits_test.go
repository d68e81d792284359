package agent

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/norsk-oss/norsk-manager/proto/managerpb"
)

// TestAgent_MaxConcurrentStreams: a connection holding the limit of open
// calls gets no further one until a call ends (the client queues it), and
// other connections are not affected.
func TestAgent_MaxConcurrentStreams(t *testing.T) {
	cfg := DevConfig(t.TempDir())
	cfg.Store.SyncWrites = false
	cfg.MaxConcurrentStreams = 2
	a, c := startAgentWith(t, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	streamCtx, endStream := context.WithCancel(ctx)
	for range 2 {
		st, err := c.CreateStatusChannel(streamCtx, &emptypb.Empty{})
		require.NoError(t, err)
		_, err = st.Recv() // the server has the stream open
		require.NoError(t, err)
	}
	short, cancelShort := context.WithTimeout(ctx, 300*time.Millisecond)
	_, err := c.Version(short, &emptypb.Empty{})
	cancelShort()
	requireCode(t, err, codes.DeadlineExceeded)

	other := dial(t, a.APIAddr())
	_, err = other.Version(ctx, &emptypb.Empty{})
	require.NoError(t, err, "another connection has its own streams")

	endStream()
	_, err = c.Version(ctx, &emptypb.Empty{})
	require.NoError(t, err, "a call once the streams ended")
}

// TestAgent_MaxRecvMsgSize: a request over the limit is refused with
// ResourceExhausted before the gateway sees it.
func TestAgent_MaxRecvMsgSize(t *testing.T) {
	cfg := DevConfig(t.TempDir())
	cfg.Store.SyncWrites = false
	cfg.MaxRecvMsgSize = 64 << 10
	_, c := startAgentWith(t, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := c.CreateJob(ctx, &managerpb.Job{Description: strings.Repeat("x", 65<<10)})
	requireCode(t, err, codes.ResourceExhausted, "larger than max")
}
