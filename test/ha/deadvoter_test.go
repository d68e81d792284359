package ha

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/norsk-oss/norsk-manager/test/testproc"
)

// voters returns the names of the Raft voters as m's ClusterMembers shows
// them (the Raft configuration of m).
func voters(m *testproc.Manager) (map[string]bool, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := m.Members(ctx)
	if err != nil {
		return nil, err
	}
	out := map[string]bool{}
	for _, mb := range resp.GetMembers() {
		if mb.GetVoter() {
			out[mb.GetName()] = true
		}
	}
	return out, nil
}

// TestCluster_DeadVoterRemovedAndReadded: with a short
// --dead-server-timeout, the leader removes a SIGKILLed manager from the
// Raft voters (docs/design/ha.md, voter rules) and the two survivors keep
// writing. Restarted on its data dir, the removed manager is added back as
// a voter once its Raft address answers and catches up on what was
// written while it was out. That it is a voter again is proven by killing
// one more manager: with three voters the other two keep the quorum; had
// it stayed out, one of two voters would not.
func TestCluster_DeadVoterRemovedAndReadded(t *testing.T) {
	skipShort(t)
	c := testproc.NewCluster(t, 3, "--dead-server-timeout", "2s")
	c.StartAll()
	leader := awaitFormed(t, c.Managers)
	victim := others(c.Managers, leader)[0]
	rest := others(c.Managers, victim)

	victim.Kill()
	t.Logf("SIGKILLed %s; waiting for the leader to remove it from the voters", victim.Name)
	testproc.Await(t, formTimeout, victim.Name+" removed from the voters", func() error {
		l := c.Leader(formTimeout)
		vs, err := voters(l)
		if err != nil {
			return err
		}
		if vs[victim.Name] || len(vs) != 2 {
			return fmt.Errorf("voters on %s: %v", l.Name, vs)
		}
		return nil
	})
	for _, m := range rest {
		require.True(t, testproc.Serving(m.APIAddr), "%s serving on two voters", m.Name)
	}
	cl := haConnect(t, c.URLs(), callTimeout)
	_, err := cl.CreateJob(context.Background(), haJob("after-removal", "dead-voter"))
	require.NoError(t, err, "writes commit on the two remaining voters")

	victim.Start()
	victim.WaitServing(formTimeout)
	testproc.Await(t, formTimeout, victim.Name+" a voter again", func() error {
		l := c.Leader(formTimeout)
		vs, err := voters(l)
		if err != nil {
			return err
		}
		if !vs[victim.Name] || len(vs) != 3 {
			return fmt.Errorf("voters on %s: %v", l.Name, vs)
		}
		return nil
	})
	awaitFormed(t, c.Managers)
	vc := haConnect(t, victim.APIAddr, callTimeout)
	testproc.Await(t, formTimeout, "the write made while it was out, on "+victim.Name, func() error {
		_, err := vc.JobByID(context.Background(), "after-removal")
		return err
	})
	// Three voters again: one more death keeps the quorum.
	other := others(rest, c.Leader(formTimeout))[0]
	other.Kill()
	testproc.Await(t, formTimeout, "a write with one of three voters dead", func() error {
		_, err := cl.CreateJob(context.Background(), haJob("after-readd", "dead-voter"))
		if status.Code(err) == codes.AlreadyExists {
			return nil
		}
		return err
	})
}
