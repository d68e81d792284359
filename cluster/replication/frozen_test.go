package replication_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"

	"github.com/norsk-oss/norsk-manager/persistence"
	"github.com/norsk-oss/norsk-manager/proto/internalpb"
)

// frozenClient is the internal service of a frozen manager (SIGSTOP):
// its connection is open, and a read index sent to it is never answered
// (it returns only when the caller gives up). It signals entered on each
// call.
type frozenClient struct {
	internalpb.ClusterClient // nil: only ReadIndex is called
	entered                  chan<- struct{}
}

func (f frozenClient) ReadIndex(ctx context.Context, _ *internalpb.ReadIndexRequest, _ ...grpc.CallOption) (*internalpb.ReadIndexReply, error) {
	select {
	case f.entered <- struct{}{}:
	default:
	}
	<-ctx.Done()
	return nil, ctx.Err()
}

// TestReplication_LoadDoesNotWaitForAFrozenLeader: a follower's Load with
// no deadline (a grain loading its record in Started) whose read index
// went to a leader that then froze returns once the survivors elected a
// new leader, from the new leader's read index. It used to wait for as
// long as the freeze lasted: the mock pool grain re-homed off a frozen
// leader never answered (TestHA_ProvisionSurvivesLeaderFreeze).
func TestReplication_LoadDoesNotWaitForAFrozenLeader(t *testing.T) {
	c := newTestCluster(t, 3)
	key := persistence.JobKey("j")
	follower := c.followers()[0]
	_, err := follower.rep.Journal().Append(ctx(t), key, 0, change("v1"))
	require.NoError(t, err)
	old := c.leader()
	entered := make(chan struct{}, 1)
	c.mu.Lock()
	c.frozen = map[string]chan<- struct{}{old.name: entered}
	c.mu.Unlock()

	type result struct {
		b   []byte
		err error
	}
	done := make(chan result, 1)
	go func() {
		b, _, err := follower.rep.Journal().Load(context.Background(), key)
		done <- result{b, err}
	}()
	select {
	case <-entered: // the read index is waiting on the frozen leader
	case <-time.After(10 * time.Second):
		t.Fatal("the follower's Load did not ask the leader")
	}
	// The leader stops answering Raft too: the survivors elect another.
	old.gs.Stop()
	require.NoError(t, old.rep.Shutdown())
	var survivors []*node
	for _, nd := range c.nodes {
		if nd != old {
			survivors = append(survivors, nd)
		}
	}
	c.nodes = survivors
	nl := c.leader()
	require.NotEqual(t, old.name, nl.name)
	select {
	case r := <-done:
		require.NoError(t, r.err)
		require.Equal(t, "v1", desc(t, r.b))
	case <-time.After(20 * time.Second):
		t.Fatalf("Load still waits on the frozen leader %s, %s leads", old.name, nl.name)
	}
}
