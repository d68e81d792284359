package replication_test

import (
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/norsk-oss/norsk-manager/proto/internalpb"
)

// TestService_AppendRefusesMalformedCommands: an empty Cluster/Append, or
// one whose entity key is not "<kind>/<id>", is InvalidArgument naming the
// field and never reaches the log (issue 21 §11: it answered Unavailable
// "data corrupt" after Raft had committed it).
func TestService_AppendRefusesMalformedCommands(t *testing.T) {
	c := newTestCluster(t, 1)
	l := c.leader()
	cl, err := c.forward(ctx(t), l.name)
	require.NoError(t, err)
	before := l.store.FSM().AppliedIndex()
	for _, tc := range []struct {
		cmd  *internalpb.AppendCommand
		want string
	}{
		{&internalpb.AppendCommand{}, "entity_key: is empty and the command carries no audit entry"},
		{&internalpb.AppendCommand{EntityKey: "job"}, `entity_key: "job" is not <kind>/<id>`},
		{&internalpb.AppendCommand{EntityKey: "job/"}, `entity_key: "job/" is not <kind>/<id>`},
		{&internalpb.AppendCommand{Audit: &internalpb.AuditIntent{Source: "s", Kind: "k"}, Record: []byte{1}}, "carries an entity change"},
	} {
		_, err := cl.Append(ctx(t), tc.cmd)
		require.Equal(t, codes.InvalidArgument, status.Code(err), "%v: %v", tc.cmd, err)
		require.Contains(t, status.Convert(err).Message(), tc.want)
	}
	require.Equal(t, before, l.store.FSM().AppliedIndex(), "nothing reached the log")
}
