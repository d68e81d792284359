package ha

// TestCordon_ThroughFollowersAndLeaderKill and its helpers. Helper names
// start with cd so that they never collide with the package's other
// helpers.

import (
	"context"
	"fmt"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/norsk-oss/norsk-manager/client"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
	"github.com/norsk-oss/norsk-manager/test/testproc"
)

// TestCordon_ThroughFollowersAndLeaderKill: the scheduling state is
// written by the node grain wherever it runs. On a three-manager cluster a
// slot is drained through one follower and every manager, read on its
// own, shows it with the reason; the leader is SIGKILLed and the node is
// cordoned through the other follower (retried until acknowledged: a
// repeat is a no-op): the survivors show CORDONED, the killed manager,
// restarted, catches up, and an uncordon through it is seen by every
// manager.
func TestCordon_ThroughFollowersAndLeaderKill(t *testing.T) {
	skipShort(t)
	c := testproc.NewCluster(t, 3)
	c.StartAll()
	leader := awaitFormed(t, c.Managers)
	var followers []*testproc.Manager
	for _, m := range c.Managers {
		if m != leader {
			followers = append(followers, m)
		}
	}
	f1, f2 := clientOf(t, callTimeout, followers[0]), clientOf(t, callTimeout, followers[1])
	ctx := context.Background()
	id, _, err := f1.RegisterClusterNode(ctx, "cordon-slot", nil)
	if err != nil {
		t.Fatalf("RegisterClusterNode: %v", err)
	}

	plWriteAcked(t, "DrainNode through "+followers[0].Name, codes.OK, func() error { return f1.DrainNode(ctx, id, "kernel update") })
	cdAwait(t, id, managerpb.NodeScheduling_NODE_SCHEDULING_DRAINING, "kernel update", c.Managers...)

	leader.Kill()
	plWriteAcked(t, "CordonNode after the leader's kill", codes.OK, func() error { return f2.CordonNode(ctx, id, "") })
	cdAwait(t, id, managerpb.NodeScheduling_NODE_SCHEDULING_CORDONED, "", followers...)
	leader.Start()
	cdAwait(t, id, managerpb.NodeScheduling_NODE_SCHEDULING_CORDONED, "", c.Managers...)

	back := clientOf(t, callTimeout, leader)
	plWriteAcked(t, "UncordonNode through the restarted "+leader.Name, codes.OK, func() error { return back.UncordonNode(ctx, id) })
	cdAwait(t, id, managerpb.NodeScheduling_NODE_SCHEDULING_ELIGIBLE, "", c.Managers...)
}

// cdAwait waits until each of ms, read on its own, lists node id in
// scheduling state want with reason.
func cdAwait(t *testing.T, id client.NodeID, want managerpb.NodeScheduling, reason string, ms ...*testproc.Manager) {
	t.Helper()
	for _, m := range ms {
		cl := clientOf(t, callTimeout, m)
		testproc.Await(t, formTimeout, fmt.Sprintf("node %s %s on %s", id, want, m.Name), func() error {
			rctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			nodes, err := cl.ListNodes(rctx)
			if err != nil {
				return err
			}
			for _, n := range nodes {
				if n.GetMetadata().GetNodeId().GetNodeId() != string(id) {
					continue
				}
				if s := n.GetScheduling(); s.GetState() != want || s.GetReason() != reason {
					return fmt.Errorf("scheduling %v", s)
				}
				return nil
			}
			return fmt.Errorf("node %s not listed", id)
		})
	}
}
