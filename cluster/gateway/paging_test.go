package gateway

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	"github.com/norsk-oss/norsk-manager/actors"
	"github.com/norsk-oss/norsk-manager/persistence"
	"github.com/norsk-oss/norsk-manager/proto/commonpb"
	"github.com/norsk-oss/norsk-manager/proto/internalpb"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
)

// pagedServer is a gateway over a store holding n cluster slots, each with
// tags of about tagBytes, answering pages of at most budget bytes.
func pagedServer(t *testing.T, n, tagBytes, budget int) *Server {
	t.Helper()
	store, log := persistence.TestStore(t)
	ctx := context.Background()
	for i := range n {
		id := fmt.Sprintf("node-%03d", i)
		rec, err := proto.Marshal(&internalpb.NodeRecord{NodeId: id, Provider: managerpb.NodeProvider_NODE_PROVIDER_CLUSTER,
			SlotName: id, Metadata: &commonpb.NodeMetadata{NodeId: &commonpb.NodeId{NodeId: id}, Tags: map[string]string{"big": strings.Repeat("x", tagBytes)}}})
		require.NoError(t, err)
		_, err = log.Append(ctx, persistence.NodeKey(id), 0, persistence.Change{Record: rec, At: time.Now()})
		require.NoError(t, err)
	}
	return New(Config{Store: store, Journal: log, Liveness: actors.NewLiveness(), MaxListReplyBytes: budget})
}

// TestListNodes_Pages: ListNodes and ListClusterNodes answer at most the
// byte budget (and page_size entries), in id order, and their tokens lead
// through every node exactly once; a listing that fits is one answer
// without a token, as in 1.0.384.
func TestListNodes_Pages(t *testing.T) {
	ctx := context.Background()
	const budget = 40 << 10
	s := pagedServer(t, 30, 4<<10, budget)
	type page struct {
		ids  []string
		next string
		size int
	}
	lists := map[string]func(size uint32, token string) (page, error){
		"ListNodes": func(size uint32, token string) (page, error) {
			r, err := s.ListNodes(ctx, &managerpb.ListNodesRequest{PageSize: size, PageToken: token})
			var p page
			for _, n := range r.GetNodes() {
				p.ids = append(p.ids, n.GetMetadata().GetNodeId().GetNodeId())
			}
			p.next, p.size = r.GetNextPageToken(), proto.Size(r)
			return p, err
		},
		"ListClusterNodes": func(size uint32, token string) (page, error) {
			r, err := s.ListClusterNodes(ctx, &managerpb.ListClusterNodesRequest{PageSize: size, PageToken: token})
			var p page
			for _, n := range r.GetNodes() {
				p.ids = append(p.ids, n.GetNodeId().GetNodeId())
			}
			p.next, p.size = r.GetNextPageToken(), proto.Size(r)
			return p, err
		},
	}
	for name, list := range lists {
		t.Run(name, func(t *testing.T) {
			for _, size := range []uint32{0, 4} {
				var all []string
				token, pages := "", 0
				for {
					p, err := list(size, token)
					require.NoError(t, err)
					require.LessOrEqual(t, p.size, budget+64, "page %d is over the budget", pages)
					if size > 0 {
						require.LessOrEqual(t, len(p.ids), int(size))
					}
					all = append(all, p.ids...)
					pages++
					if p.next == "" {
						break
					}
					token = p.next
				}
				require.Greater(t, pages, 2, "30 nodes of 4 KiB in pages of 40 KiB")
				require.Len(t, all, 30)
				for i := 1; i < len(all); i++ {
					require.Less(t, all[i-1], all[i], "id order, each once")
				}
			}
			_, err := list(0, "not a token")
			requireStatus(t, err, codes.InvalidArgument, "page_token: ")
		})
	}
	_, err := s.ListNodes(ctx, &managerpb.ListNodesRequest{PageToken: mustToken(t, s)})
	requireStatus(t, err, codes.InvalidArgument, "page_token: is not a next_page_token of this listing (nodes)")

	small := pagedServer(t, 3, 100, budget)
	r, err := small.ListClusterNodes(ctx, &managerpb.ListClusterNodesRequest{})
	require.NoError(t, err)
	require.Len(t, r.GetNodes(), 3)
	require.Empty(t, r.GetNextPageToken(), "a small listing is the 1.0.384 answer")
}

// mustToken returns a ListClusterNodes token of s.
func mustToken(t *testing.T, s *Server) string {
	t.Helper()
	r, err := s.ListClusterNodes(context.Background(), &managerpb.ListClusterNodesRequest{PageSize: 1})
	require.NoError(t, err)
	require.NotEmpty(t, r.GetNextPageToken())
	return r.GetNextPageToken()
}

// TestListPools_Pages: pools page as nodes do, each page with its log
// index.
func TestListPools_Pages(t *testing.T) {
	s, _, _ := poolServer(t)
	ctx := context.Background()
	for i := range 5 {
		_, err := s.CreatePool(ctx, testPool(fmt.Sprintf("pool-%d", i), "a"))
		require.NoError(t, err)
	}
	var names []string
	token := ""
	for {
		r, err := s.ListPools(ctx, &managerpb.ListPoolsRequest{PageSize: 2, PageToken: token})
		require.NoError(t, err)
		require.LessOrEqual(t, len(r.GetPools()), 2)
		require.NotZero(t, r.GetLogIndex())
		for _, p := range r.GetPools() {
			names = append(names, p.GetName())
		}
		if token = r.GetNextPageToken(); token == "" {
			break
		}
	}
	require.Equal(t, []string{"pool-0", "pool-1", "pool-2", "pool-3", "pool-4"}, names)
}

// TestListAuditEntries_Budget: a page of audit entries stops at the reply
// budget even below limit; the rest follows from the last seq + 1.
func TestListAuditEntries_Budget(t *testing.T) {
	store, log := persistence.TestStore(t)
	s := New(Config{Store: store, Journal: log, MaxListReplyBytes: 100 << 10})
	ctx := context.Background()
	for range 10 {
		_, err := s.AppendAuditEntry(ctx, &managerpb.AppendAuditEntryRequest{Source: "t", Kind: "k", Payload: strings.Repeat("p", 30<<10)})
		require.NoError(t, err)
	}
	r, err := s.ListAuditEntries(ctx, &managerpb.ListAuditEntriesRequest{Limit: 10})
	require.NoError(t, err)
	require.Len(t, r.GetEntries(), 3, "three of 30 KiB fit 100 KiB")
	require.EqualValues(t, 10, r.GetHeadSeq())
	r, err = s.ListAuditEntries(ctx, &managerpb.ListAuditEntriesRequest{FromSeq: 4, Limit: 10})
	require.NoError(t, err)
	require.EqualValues(t, 4, r.GetEntries()[0].GetSeq())
}
