package e2e

// Attacks on a manager started with --acl (issue 12 §2), as a client on
// loopback would make them: raw gRPC with hand-made metadata.

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/norsk-oss/norsk-manager/proto/commonpb"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
	"github.com/norsk-oss/norsk-manager/test/testproc"
)

// aclBreakManager starts a single manager with --acl, bootstraps it and
// returns its API client (no token of its own) and the management secret.
func aclBreakManager(t *testing.T) (managerpb.ManagerClient, string) {
	t.Helper()
	m := startManager(t, filepath.Join(t.TempDir(), "data"), testproc.FreePort(t), "--acl")
	conn, err := grpc.NewClient(m.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close() })
	api := managerpb.NewManagerClient(conn)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	boot, err := api.AclBootstrap(ctx, &managerpb.AclBootstrapRequest{})
	require.NoError(t, err)
	return api, boot.GetSecretId()
}

// withAuth is ctx carrying each of values as an "authorization" metadata
// value, verbatim.
func withAuth(ctx context.Context, values ...string) context.Context {
	md := metadata.MD{}
	for _, v := range values {
		md.Append("authorization", v)
	}
	return metadata.NewOutgoingContext(ctx, md)
}

func aclBreakToken(t *testing.T, api managerpb.ManagerClient, mgmt, name, role string) *managerpb.AclToken {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	tok, err := api.AclTokenCreate(withAuth(ctx, "Bearer "+mgmt), &managerpb.AclTokenCreateRequest{Name: name, Role: role})
	require.NoError(t, err)
	return tok
}

// TestE2E_ACLRevokedStream: an EventStream opened with an events token
// ends with Unauthenticated at the first event after the token is revoked,
// and delivers nothing more. Before, it kept streaming every change of the
// cluster to the revoked token's holder.
func TestE2E_ACLRevokedStream(t *testing.T) {
	api, mgmt := aclBreakManager(t)
	ev := aclBreakToken(t, api, mgmt, "dash", "events")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	admin := withAuth(ctx, "Bearer "+mgmt)

	stream, err := api.EventStream(withAuth(ctx, "Bearer "+ev.GetSecretId()), &managerpb.EventStreamRequest{})
	require.NoError(t, err)
	first, err := stream.Recv()
	require.NoError(t, err)
	require.NotNil(t, first.GetInitialDataComplete(), "the stream opens with its snapshot: %v", first)

	_, err = api.AclTokenRevoke(admin, &managerpb.AclTokenRevokeRequest{AccessorId: ev.GetAccessorId()})
	require.NoError(t, err)
	_, err = api.CreateJob(admin, &managerpb.Job{JobId: &commonpb.JobId{JobId: "after-revoke"}, Services: []*commonpb.Service{{Name: "s", Command: "true"}}})
	require.NoError(t, err)
	for {
		got, err := stream.Recv()
		if err != nil {
			require.Equal(t, codes.Unauthenticated, status.Code(err), "%v", err)
			require.Contains(t, status.Convert(err).Message(), "revoked")
			return
		}
		require.Nil(t, got.GetJobUpdated(), "a revoked token was sent the job created after its revocation: %v", got)
	}
}

// TestE2E_ACLMetadataTricks: the ways a client can shape the authorization
// metadata, and what each gets. Only one well-formed bearer value of a
// known token of a role that allows the call passes.
func TestE2E_ACLMetadataTricks(t *testing.T) {
	api, mgmt := aclBreakManager(t)
	rd := aclBreakToken(t, api, mgmt, "dash", "read").GetSecretId()
	ev := aclBreakToken(t, api, mgmt, "ev", "events").GetSecretId()
	cases := []struct {
		name string
		auth []string
		code codes.Code
	}{
		{"none", nil, codes.Unauthenticated},
		{"lower-case scheme", []string{"bearer " + rd}, codes.OK},
		{"surrounding whitespace", []string{"  Bearer   " + rd + "  "}, codes.OK},
		{"two values, both valid", []string{"Bearer " + rd, "Bearer " + mgmt}, codes.Unauthenticated},
		{"two tokens in one value", []string{"Bearer " + rd + " " + mgmt}, codes.Unauthenticated},
		{"comma-joined", []string{"Bearer " + rd + ",Bearer " + mgmt}, codes.Unauthenticated},
		{"no scheme", []string{rd}, codes.Unauthenticated},
		{"basic scheme", []string{"Basic " + rd}, codes.Unauthenticated},
		{"secret with a trailing character", []string{"Bearer " + rd + "x"}, codes.Unauthenticated},
		{"very long", []string{"Bearer " + strings.Repeat("a", 8<<10)}, codes.Unauthenticated},
		{"events token reading", []string{"Bearer " + ev}, codes.PermissionDenied},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_, err := api.ListClusterNodes(withAuth(ctx, c.auth...), &managerpb.ListClusterNodesRequest{})
			require.Equal(t, c.code, status.Code(err), "%v", err)
		})
	}
	// A header far past gRPC's header-list limit is refused by the
	// transport, and the manager serves the next call.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := api.ListClusterNodes(withAuth(ctx, "Bearer "+strings.Repeat("a", 1<<20)), &managerpb.ListClusterNodesRequest{})
	require.Error(t, err)
	_, err = api.ListClusterNodes(withAuth(ctx, "Bearer "+rd), &managerpb.ListClusterNodesRequest{})
	require.NoError(t, err)
}
