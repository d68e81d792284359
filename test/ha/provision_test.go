package ha

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/norsk-oss/norsk-manager/client"
	"github.com/norsk-oss/norsk-manager/proto/commonpb"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
	"github.com/norsk-oss/norsk-manager/test/testproc"
)

// TestHA_ProvisionSurvivesLeaderKills: three managers sharing a mock pool
// of three pre-started workers, and a pool whose tier creates mock nodes.
// Three waiting jobs are created and the Raft leader (whose engine is
// creating their node) is SIGKILLed at once: the new leader's engine
// creates no second node, and all three run on the one node. After they
// complete, the leader is SIGKILLed again: the node is still released
// after its linger (the idle instant is in its record), and it is the only
// node ever created.
func TestHA_ProvisionSurvivesLeaderKills(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cluster of real managers and workers")
	}
	ctx := context.Background()
	c, cl := mockPoolCluster(t, "mock", 3, 3, 3)

	base := 52_000_000 + time.Now().Nanosecond()%1000*1000
	arg := func(i int) string { return fmt.Sprint(base + i) }
	t.Cleanup(func() {
		for i := range 3 {
			testproc.KillProcessesMentioning("sleep\x00" + arg(i) + "\x00")
		}
	})
	first := c.Leader(30 * time.Second)
	for i := range 3 {
		createJobAcked(t, cl, &managerpb.Job{JobId: &commonpb.JobId{JobId: fmt.Sprintf("prov-%d", i)}, Tags: map[string]string{"pool": "elastic"},
			Services:      []*commonpb.Service{{Name: "idle", Command: "exec sleep " + arg(i), Restart: commonpb.Service_NEVER}},
			AutoPlacement: &managerpb.AutoPlacement{Requirements: &managerpb.JobRequirements{RequiredCapacity: 1}}})
	}
	t.Logf("SIGKILL leader %s while its engine creates the node", first.Name)
	first.Kill()

	const node = "elastic-mock-1"
	testproc.Await(t, 90*time.Second, "the three jobs running on one engine-created node, one process each", func() error {
		for i := range 3 {
			id := fmt.Sprintf("prov-%d", i)
			r, err := cl.JobByID(ctx, client.JobID(id))
			if err != nil {
				return err
			}
			if len(r.GetInstances()) != 1 || r.GetInstances()[0].GetNodeId().GetNodeId() != node {
				return fmt.Errorf("%s: instances %v", id, r.GetInstances())
			}
			if got := processesWithArgs("sleep", arg(i)); got != 1 {
				return fmt.Errorf("job %s runs %d processes, want 1", id, got)
			}
		}
		return nil
	})
	engineNodes := func() ([]string, error) {
		nodes, err := cl.ListNodes(ctx)
		var ids []string
		for _, n := range nodes {
			if strings.HasPrefix(n.GetMetadata().GetNodeId().GetNodeId(), "elastic-") {
				ids = append(ids, n.GetMetadata().GetNodeId().GetNodeId())
			}
		}
		return ids, err
	}
	ids, err := engineNodes()
	if err != nil || len(ids) != 1 {
		t.Fatalf("engine-created nodes %v (%v), want only %s", ids, err, node)
	}

	first.Start()
	first.WaitServing(60 * time.Second)
	for i := range 3 {
		id := client.JobID(fmt.Sprintf("prov-%d", i))
		testproc.Await(t, 60*time.Second, "CompleteJob "+string(id), func() error { return cl.CompleteJob(ctx, id) })
	}
	second := c.Leader(30 * time.Second)
	t.Logf("SIGKILL leader %s while the node lingers", second.Name)
	second.Kill()
	testproc.Await(t, 90*time.Second, "the idle node released by the next leader", func() error {
		nodes, err := cl.ListNodes(ctx)
		if err != nil {
			return err
		}
		for _, n := range nodes {
			if n.GetMetadata().GetNodeId().GetNodeId() == node {
				if n.GetState() != managerpb.NodeLifecycle_NODE_LIFECYCLE_STOPPED {
					return fmt.Errorf("node %s is %s", node, n.GetState())
				}
				return nil
			}
		}
		return fmt.Errorf("node %s not listed", node)
	})
	if ids, err := engineNodes(); err != nil || len(ids) != 1 {
		t.Fatalf("engine-created nodes %v (%v), want only %s", ids, err, node)
	}
}
