package agent

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	"github.com/norsk-oss/norsk-manager/client"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
)

// TestAgent_ListingLargerThanSendLimit: a fleet whose listing is several
// times the manager's send limit is still listed (issue 21 §3: five slots
// with 3,800 tags of 1 KB made ListClusterNodes and ListNodes fail for
// every caller). A 1.0.384-shaped request (no page fields) gets the first
// page, under the limit, with a next_page_token; the Go client follows the
// tokens and sees every slot once, in id order.
func TestAgent_ListingLargerThanSendLimit(t *testing.T) {
	cfg := DevConfig(t.TempDir())
	cfg.Store.SyncWrites = false
	cfg.Store.GCInterval = 0
	cfg.MaxSendMsgSize = 256 << 10
	a, c := startAgentWith(t, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	// 24 slots of 120 tags of 512 bytes (60 KiB each, under the tags
	// limit): about 1.5 MiB of listing, six times the send limit.
	const slots, perSlot = 24, 120
	for i := range slots {
		tags := make(map[string]string, perSlot)
		for j := range perSlot {
			tags[fmt.Sprintf("t%03d", j)] = strings.Repeat(string(rune('a'+i%26)), 508)
		}
		_, err := c.RegisterClusterNode(ctx, &managerpb.RegisterClusterNodeRequest{NodeName: fmt.Sprintf("n%02d", i), Tags: tags})
		require.NoError(t, err)
	}

	first, err := c.ListClusterNodes(ctx, &managerpb.ListClusterNodesRequest{})
	require.NoError(t, err, "a request of the 1.0.384 shape")
	require.NotEmpty(t, first.GetNodes())
	require.Less(t, len(first.GetNodes()), slots)
	require.NotEmpty(t, first.GetNextPageToken())
	require.LessOrEqual(t, proto.Size(first), cfg.MaxSendMsgSize)
	nodes, err := c.ListNodes(ctx, &managerpb.ListNodesRequest{})
	require.NoError(t, err)
	require.NotEmpty(t, nodes.GetNextPageToken())

	cl, err := client.Connect(ctx, client.Settings{URL: a.APIAddr(), Timeout: 30 * time.Second})
	require.NoError(t, err)
	defer cl.Close()
	all, err := cl.ListClusterNodes(ctx)
	require.NoError(t, err)
	require.Len(t, all, slots)
	for i := 1; i < len(all); i++ {
		require.Less(t, all[i-1].GetNodeId().GetNodeId(), all[i].GetNodeId().GetNodeId(), "id order, no repeats")
	}
	allNodes, err := cl.ListNodes(ctx)
	require.NoError(t, err)
	require.Len(t, allNodes, slots)

	_, err = c.ListNodes(ctx, &managerpb.ListNodesRequest{PageToken: first.GetNextPageToken()})
	requireCode(t, err, codes.InvalidArgument, "page_token: ")

	two, err := c.ListClusterNodes(ctx, &managerpb.ListClusterNodesRequest{PageSize: 2})
	require.NoError(t, err)
	require.Len(t, two.GetNodes(), 2, "page_size")
	require.NotEmpty(t, two.GetNextPageToken())
}
