package e2e

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/norsk-oss/norsk-manager/client"
	"github.com/norsk-oss/norsk-manager/proto/commonpb"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
	"github.com/norsk-oss/norsk-manager/test/testproc"
)

// TestE2E_NoLeader_FailsFast: a manager left without a quorum (two of three
// killed) answers a write at once with Unavailable saying it knows no
// leader and nothing was done (not after a grain timeout), and a client
// of the cluster's managers fails at once with a local Unavailable instead
// of waiting on the manager that cannot serve.
func TestE2E_NoLeader_FailsFast(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a three-manager cluster")
	}
	c := testproc.NewCluster(t, 3)
	c.StartAll()
	survivor := c.Managers[0]
	for _, m := range c.Managers[1:] {
		m.Kill()
	}
	testproc.Await(t, 60*time.Second, survivor.Name+" NOT_SERVING", func() error {
		st, err := testproc.Health(survivor.APIAddr)
		if err != nil {
			return err
		}
		if st != healthpb.HealthCheckResponse_NOT_SERVING {
			return fmt.Errorf("health %s", st)
		}
		return nil
	})

	// A plain gRPC client (no health checking) reaches the gateway.
	conn, err := grpc.NewClient(survivor.APIAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	defer conn.Close()
	api := managerpb.NewManagerClient(conn)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	start := time.Now()
	_, err = api.DeleteJob(ctx, &commonpb.JobId{JobId: "nope"})
	took := time.Since(start)
	require.Equal(t, codes.Unavailable, status.Code(err), "a write without a leader: %v", err)
	require.Contains(t, status.Convert(err).Message(), "knows no Raft leader")
	require.Contains(t, status.Convert(err).Message(), "nothing was done")
	require.Less(t, took, 5*time.Second, "the write must be refused at once, not after a grain timeout")

	// Its view of the cluster names no leader (never one of the dead).
	members, err := api.ClusterMembers(ctx, &managerpb.ClusterMembersRequest{})
	require.NoError(t, err)
	require.Empty(t, members.GetLeader(), "ClusterMembers without a quorum names a leader: %v", members)

	// The Go client skips the NOT_SERVING manager; with no manager serving
	// it fails at once.
	cl, err := client.Connect(context.Background(), client.Settings{URL: c.URLs(), Timeout: 30 * time.Second})
	require.NoError(t, err)
	defer cl.Close()
	start = time.Now()
	_, err = cl.CreateJob(context.Background(), webJob("nq", "", 1))
	took = time.Since(start)
	require.Equal(t, codes.Unavailable, status.Code(err), "%v", err)
	require.Less(t, took, 5*time.Second, "the client must not wait on a manager that cannot serve")
	ce, ok := errors.AsType[*client.CallError](err)
	require.True(t, ok && ce.Local, "%v", err)
	require.True(t, strings.Contains(err.Error(), survivor.APIAddr), "%v", err)
	// The cause per manager, not the last dial error gRPC kept.
	require.Contains(t, err.Error(), survivor.APIAddr+" NOT_SERVING (no Raft leader)")
	for _, m := range c.Managers[1:] {
		require.Contains(t, err.Error(), m.APIAddr+" unreachable: ")
	}
}
