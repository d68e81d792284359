package e2e

import (
	"context"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/norsk-oss/norsk-manager/proto/managerpb"
	"github.com/norsk-oss/norsk-manager/test/testproc"
)

// dialFrom connects to addr from the loopback address src (127.0.0.0/8
// is all loopback on Linux: each source is another caller to the manager).
func dialFrom(t *testing.T, src, addr string) managerpb.ManagerClient {
	t.Helper()
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}}
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, a string) (net.Conn, error) { return d.DialContext(ctx, "tcp", a) }))
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close() })
	return managerpb.NewManagerClient(conn)
}

// TestE2E_Limits: a norsk-manager process refuses the event stream over
// --max-event-streams-per-caller from one address (its other connections
// included) while another address still gets one, and refuses
// registrations beyond --register-burst with a retry-after.
func TestE2E_Limits(t *testing.T) {
	m := startManager(t, filepath.Join(t.TempDir(), "data"), testproc.FreePort(t),
		"--max-event-streams-per-caller", "2", "--register-rate", "0.01", "--register-burst", "2")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	open := func(c managerpb.ManagerClient) error {
		st, err := c.EventStream(ctx, &managerpb.EventStreamRequest{})
		if err != nil {
			return err
		}
		_, err = st.Recv()
		return err
	}
	// Two connections from 127.0.0.1 are one caller.
	a1, a2 := dialFrom(t, "127.0.0.1", m.addr), dialFrom(t, "127.0.0.1", m.addr)
	require.NoError(t, open(a1))
	require.NoError(t, open(a2))
	err := open(a1)
	require.Equal(t, codes.ResourceExhausted, status.Code(err), "third stream of 127.0.0.1: %v", err)
	require.Contains(t, status.Convert(err).Message(), "--max-event-streams-per-caller")
	require.NoError(t, open(dialFrom(t, "127.0.0.2", m.addr)), "another address is another caller")

	reg := dialFrom(t, "127.0.0.3", m.addr)
	for range 2 {
		_, err := reg.ClusterMemberRegister(ctx, &managerpb.ClusterMemberRegisterRequest{Token: "guess", Address: "127.0.0.1", Port: 1})
		require.Equal(t, codes.Unauthenticated, status.Code(err), "%v", err)
	}
	_, err = reg.ClusterMemberRegister(ctx, &managerpb.ClusterMemberRegisterRequest{Token: "guess", Address: "127.0.0.1", Port: 1})
	require.Equal(t, codes.ResourceExhausted, status.Code(err), "%v", err)
	require.True(t, strings.Contains(status.Convert(err).Message(), "retry after"), "%v", err)
}
