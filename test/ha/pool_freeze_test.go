package ha

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/cluster"

	"github.com/norsk-oss/norsk-manager/actors"
	"github.com/norsk-oss/norsk-manager/client"
	"github.com/norsk-oss/norsk-manager/proto/commonpb"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
	"github.com/norsk-oss/norsk-manager/test/testproc"
)

// TestHA_PoolGrainRehomedOffFrozenManager: three managers sharing a mock
// pool of two workers. A first job's node activates the mock pool grain on
// its owner (protoactor's rendezvous over the managers' actor addresses,
// as disthash places it); the owner is made the Raft leader and frozen
// (SIGSTOP); a second job needs a second node. The next leader must take
// the URL from an activation of the pool grain on a survivor and create
// the node while the freeze lasts. Before the fix, about four runs in ten
// timed out: the survivor's activation (and the second job's grain) loaded
// its record through a read index sent to the frozen leader, which never
// answered (grains.md, "A grain on a frozen manager").
func TestHA_PoolGrainRehomedOffFrozenManager(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cluster of real managers and workers")
	}
	ctx := context.Background()
	c, cl := mockPoolCluster(t, "pmock", 2, 2, 300)
	owner := poolGrainOwner(t, c.Managers)
	base := 54_000_000 + time.Now().Nanosecond()%1000*1000
	arg := func(i int) string { return fmt.Sprint(base + i) }
	t.Cleanup(func() {
		for i := range 2 {
			testproc.KillProcessesMentioning("sleep\x00" + arg(i) + "\x00")
		}
	})
	// Each job fills a node: the second needs a second node, and so a
	// second URL from the pool grain.
	job := func(i int) *managerpb.Job {
		return &managerpb.Job{JobId: &commonpb.JobId{JobId: fmt.Sprintf("pfz-%d", i)}, Tags: map[string]string{"pool": "elastic"},
			Services:      []*commonpb.Service{{Name: "idle", Command: "exec sleep " + arg(i), Restart: commonpb.Service_NEVER}},
			AutoPlacement: &managerpb.AutoPlacement{Requirements: &managerpb.JobRequirements{RequiredCapacity: 4}}}
	}
	runsOnMockNode := func(cl *client.NorskManager, i int) func() error {
		return func() error {
			r, err := cl.JobByID(ctx, client.JobID(fmt.Sprintf("pfz-%d", i)))
			if err != nil {
				return err
			}
			if len(r.GetInstances()) != 1 || !strings.HasPrefix(r.GetInstances()[0].GetNodeId().GetNodeId(), "elastic-mock-") {
				return fmt.Errorf("pfz-%d: instances %v", i, r.GetInstances())
			}
			if got := processesWithArgs("sleep", arg(i)); got != 1 {
				return fmt.Errorf("pfz-%d runs %d processes, want 1", i, got)
			}
			return nil
		}
	}
	// The first node activates the pool grain on its owner.
	createJobAcked(t, cl, job(0))
	testproc.Await(t, 90*time.Second, "pfz-0 on a mock node", runsOnMockNode(cl, 0))
	// The owner leads (the case seen in CI: the leader's engine used the
	// grain on its own manager): a leader elsewhere is stopped gracefully,
	// which hands leadership to another manager, and started again (its
	// actor address, and so the grain's owner, stays). A graceful stop
	// also removes its vote: the cluster is formed again (all three
	// voters) before the freeze, or the two survivors have no quorum.
	leader := awaitFormed(t, c.Managers)
	for tries := 0; leader != owner; tries++ {
		if tries == 6 {
			t.Fatalf("%s, the pool grain's owner, never became the leader", owner.Name)
		}
		leader.Stop()
		leader.Start()
		leader = awaitFormed(t, c.Managers)
	}

	thaw := freeze(t, owner)
	t.Logf("froze %s, the mock pool grain's owner and the leader", owner.Name)
	live := clientOf(t, 10*time.Second, others(c.Managers, owner)...)
	createJobAcked(t, live, job(1))
	testproc.Await(t, 90*time.Second, "pfz-1 on a second mock node created while the pool grain's owner is frozen", runsOnMockNode(live, 1))
	thaw()
	owner.WaitServing(60 * time.Second)
}

// poolGrainOwner is the manager disthash places the mock pool grain on
// while all of ms are members: the rendezvous winner over their actor
// addresses.
func poolGrainOwner(t *testing.T, ms []*testproc.Manager) *testproc.Manager {
	t.Helper()
	rdv := cluster.NewRendezvous()
	members := make(cluster.Members, 0, len(ms))
	for _, m := range ms {
		host, port, err := net.SplitHostPort(m.ActorAddr)
		if err != nil {
			t.Fatal(err)
		}
		p, err := strconv.Atoi(port)
		if err != nil {
			t.Fatal(err)
		}
		members = append(members, &cluster.Member{Id: m.Name, Host: host, Port: int32(p), Kinds: []string{actors.KindPool}})
	}
	rdv.UpdateMembers(members)
	addr := rdv.GetByClusterIdentity(cluster.NewClusterIdentity("mock", actors.KindPool))
	for _, m := range ms {
		if m.ActorAddr == addr {
			return m
		}
	}
	t.Fatalf("no manager at the pool grain's address %q", addr)
	return nil
}
