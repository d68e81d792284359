package ha

// TestPools_ThroughFollowersAndLeaderKill and its helpers. Helper names
// start with pl so that they never collide with the package's other
// helpers.

import (
	"context"
	"fmt"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/norsk-oss/norsk-manager/client"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
	"github.com/norsk-oss/norsk-manager/test/testproc"
)

// TestPools_ThroughFollowersAndLeaderKill: pool writes have no grain; the
// gateway appends through the journal, which a follower forwards to the
// leader. On a three-manager cluster a pool is created through one
// follower and updated through the other; every manager, read on its own,
// then shows the new version, and a stale update through the first
// follower is refused naming it (the refusal is decided on a fresh read).
// The leader is SIGKILLed: the survivors keep the pool and accept the next
// update; the killed manager, restarted, catches up; a delete through it
// is seen by every manager.
func TestPools_ThroughFollowersAndLeaderKill(t *testing.T) {
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
	pool := &managerpb.Pool{Name: "ha-pool", Tiers: []*managerpb.PoolTier{
		{Name: "onprem", NodeSelector: map[string]string{"site": "osl"}}, {Name: "cloud", NodeSelector: map[string]string{"cloud": "aws"}}}}

	plWriteAcked(t, "CreatePool through "+followers[0].Name, codes.AlreadyExists, func() error { return f1.CreatePool(context.Background(), pool) })
	v1 := plAwaitVersion(t, 1, c.Managers...)
	v1.Tiers[1].MaxNodes = 10
	plWriteAcked(t, "UpdatePool through "+followers[1].Name, codes.FailedPrecondition, func() error { return f2.UpdatePool(context.Background(), v1) })
	plAwaitVersion(t, 2, c.Managers...)
	stale := proto.Clone(v1).(*managerpb.Pool)
	stale.Tiers[0].MaxNodes = 3
	if err := f1.UpdatePool(context.Background(), stale); status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("stale UpdatePool through %s = %v, want FailedPrecondition", followers[0].Name, err)
	}

	leader.Kill()
	v2 := plAwaitVersion(t, 2, followers...)
	if v2.GetTiers()[1].GetMaxNodes() != 10 || v2.GetTiers()[0].GetMaxNodes() != 0 {
		t.Fatalf("after the leader's kill the pool is %v, want the update and not the stale one", v2)
	}
	v2.Description = "after the kill"
	plWriteAcked(t, "UpdatePool after the leader's kill", codes.FailedPrecondition, func() error { return f1.UpdatePool(context.Background(), v2) })
	leader.Start()
	if got := plAwaitVersion(t, 3, c.Managers...); got.GetDescription() != "after the kill" {
		t.Fatalf("version 3 is %v", got)
	}

	back := clientOf(t, callTimeout, leader)
	plWriteAcked(t, "DeletePool through the restarted "+leader.Name, codes.NotFound, func() error { return back.DeletePool(context.Background(), "ha-pool") })
	for _, m := range c.Managers {
		cl := clientOf(t, callTimeout, m)
		testproc.Await(t, formTimeout, "ha-pool gone on "+m.Name, func() error {
			_, err := cl.GetPool(context.Background(), "ha-pool")
			if status.Code(err) == codes.NotFound {
				return nil
			}
			return fmt.Errorf("GetPool = %v", err)
		})
	}
}

// plWriteAcked runs write until it is acknowledged, for up to formTimeout:
// an attempt that failed with Unavailable or DeadlineExceeded may have
// committed, so the code a repeat of a committed write gets (retryOK)
// counts as the acknowledgement on a retry. Any other failure fails the
// test.
func plWriteAcked(t *testing.T, what string, retryOK codes.Code, write func() error) {
	t.Helper()
	retried := false
	testproc.Await(t, formTimeout, what+" acknowledged", func() error {
		err := write()
		switch {
		case err == nil, retried && status.Code(err) == retryOK:
			return nil
		case isUnavailable(err):
			retried = true
			return err
		}
		t.Fatalf("%s: %v", what, err)
		return nil
	})
}

// plAwaitVersion waits until each of ms, read on its own, shows ha-pool
// at version want, and returns the pool as the last one read it.
func plAwaitVersion(t *testing.T, want uint64, ms ...*testproc.Manager) *managerpb.Pool {
	t.Helper()
	var got *managerpb.Pool
	for _, m := range ms {
		cl := clientOf(t, callTimeout, m)
		testproc.Await(t, formTimeout, fmt.Sprintf("ha-pool at version %d on %s", want, m.Name), func() error {
			p, err := plGet(cl)
			if err != nil {
				return err
			}
			if p.GetVersion() != want {
				return fmt.Errorf("version %d", p.GetVersion())
			}
			got = p
			return nil
		})
	}
	return got
}

func plGet(cl *client.NorskManager) (*managerpb.Pool, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return cl.GetPool(ctx, "ha-pool")
}
