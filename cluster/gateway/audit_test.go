package gateway

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"

	"github.com/norsk-oss/norsk-manager/cluster/identity"
	"github.com/norsk-oss/norsk-manager/persistence/auditchain"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
)

// TestServer_Audit_PoolWrites: an accepted pool write is audited with the
// caller's name from the context, kind and the pool's name; a refused one
// writes nothing; the chain verifies.
func TestServer_Audit_PoolWrites(t *testing.T) {
	s, _, _ := poolServer(t)
	alice := identity.With(context.Background(), identity.Caller{Name: "alice"})
	_, err := s.CreatePool(alice, testPool("edge", "gpu"))
	require.NoError(t, err)
	_, err = s.CreatePool(alice, testPool("edge", "gpu")) // exists
	require.Error(t, err)
	_, err = s.DeletePool(context.Background(), &managerpb.PoolName{Name: "edge"})
	require.NoError(t, err)

	resp, err := s.ListAuditEntries(context.Background(), &managerpb.ListAuditEntriesRequest{})
	require.NoError(t, err)
	var got []string
	var v auditchain.Verifier
	for _, e := range resp.GetEntries() {
		got = append(got, e.GetSource()+" "+e.GetKind()+" "+e.GetWho()+" "+e.GetPayload())
		require.NoError(t, v.Next(e))
	}
	require.Equal(t, []string{`manager pool.create alice {"pool":"edge"}`, `manager pool.delete anonymous {"pool":"edge"}`}, got)
	require.Equal(t, []int64{1, 2}, []int64{resp.GetFirstSeq(), resp.GetHeadSeq()})
}

// TestServer_AppendAuditEntry: a valid entry is appended, chained and
// returned as stored with the caller's name; bad requests are refused
// naming the field, and write nothing.
func TestServer_AppendAuditEntry(t *testing.T) {
	s, _, _ := poolServer(t)
	ctx := identity.With(context.Background(), identity.Caller{Name: "ops"})
	e, err := s.AppendAuditEntry(ctx, &managerpb.AppendAuditEntryRequest{Source: "norsk-mgr", Kind: "origin.switch", Payload: `{"to":"b"}`})
	require.NoError(t, err)
	require.Equal(t, int64(1), e.GetSeq())
	require.Equal(t, "ops", e.GetWho())
	require.NotZero(t, e.GetTimestampMs())
	require.Equal(t, auditchain.Hash(e), e.GetHash())

	cases := []struct {
		name         string
		req          *managerpb.AppendAuditEntryRequest
		field, match string
	}{
		{"empty source", &managerpb.AppendAuditEntryRequest{Kind: "k"}, "source", "must not be empty"},
		{"reserved source", &managerpb.AppendAuditEntryRequest{Source: "manager", Kind: "audit.anchor"}, "source", "reserved"},
		{"bad kind charset", &managerpb.AppendAuditEntryRequest{Source: "s", Kind: "a b"}, "kind", "only letters"},
		{"long kind", &managerpb.AppendAuditEntryRequest{Source: "s", Kind: strings.Repeat("k", 129)}, "kind", "limit is 128"},
		{"big payload", &managerpb.AppendAuditEntryRequest{Source: "s", Kind: "k", Payload: strings.Repeat("p", 64<<10+1)}, "payload", "limit is 65536"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := s.AppendAuditEntry(ctx, tc.req)
			requireCode(t, err, codes.InvalidArgument, tc.field)
			requireCode(t, err, codes.InvalidArgument, tc.match)
		})
	}
	resp, err := s.ListAuditEntries(ctx, &managerpb.ListAuditEntriesRequest{})
	require.NoError(t, err)
	require.Len(t, resp.GetEntries(), 1, "refused requests wrote nothing")
}

// TestServer_ListAuditEntries_Range: seq ranges and limits, and bad ranges
// refused.
func TestServer_ListAuditEntries_Range(t *testing.T) {
	s, _, _ := poolServer(t)
	ctx := context.Background()
	for range 5 {
		_, err := s.AppendAuditEntry(ctx, &managerpb.AppendAuditEntryRequest{Source: "t", Kind: "k"})
		require.NoError(t, err)
	}
	seqs := func(req *managerpb.ListAuditEntriesRequest) []int64 {
		resp, err := s.ListAuditEntries(ctx, req)
		require.NoError(t, err)
		var out []int64
		for _, e := range resp.GetEntries() {
			out = append(out, e.GetSeq())
		}
		return out
	}
	require.Equal(t, []int64{2, 3, 4}, seqs(&managerpb.ListAuditEntriesRequest{FromSeq: 2, ToSeq: 4}))
	require.Equal(t, []int64{4, 5}, seqs(&managerpb.ListAuditEntriesRequest{FromSeq: 4}))
	require.Equal(t, []int64{1, 2}, seqs(&managerpb.ListAuditEntriesRequest{Limit: 2}))
	_, err := s.ListAuditEntries(ctx, &managerpb.ListAuditEntriesRequest{FromSeq: 4, ToSeq: 2})
	requireCode(t, err, codes.InvalidArgument, "to_seq")
	_, err = s.ListAuditEntries(ctx, &managerpb.ListAuditEntriesRequest{FromSeq: -1})
	requireCode(t, err, codes.InvalidArgument, "from_seq")
}
