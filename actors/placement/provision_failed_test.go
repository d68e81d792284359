package placement

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/norsk-oss/norsk-manager/actors/provisioner"
	"github.com/norsk-oss/norsk-manager/persistence"
	"github.com/norsk-oss/norsk-manager/proto/internalpb"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
)

// TestEngine_Provision_FailedCreateBacksOff: a launch that fails at once
// for a reason other than capacity (a launch template that does not
// exist) ends its node CREATE_FAILED; the offering is backed off like a
// capacity failure, so the engine does not create a node at every pass
// (each a new node record and a cloud call) while the job waits. Before
// the fix every pass created the next node.
func TestEngine_Provision_FailedCreateBacksOff(t *testing.T) {
	f := newFixture(t)
	n := &fakeNodes{f: f}
	f.router.other = n.request
	tmpl := &managerpb.AwsLaunchTemplate{Template: &managerpb.AwsLaunchTemplate_Name{Name: "no-such-template"}}
	f.putPool("cloud", 5, 600, &managerpb.PoolTier{Name: "aws", MaxNodes: 3,
		Provisioner: &managerpb.PoolTier_Aws{Aws: &managerpb.AwsTierProvisioner{Region: "eu-west-2", Template: tmpl,
			InstanceTypes: []*managerpb.TierInstanceType{{InstanceType: "c6i.large", Capacity: 4}}}}})
	f.putJob(autoJob("a", 1, map[string]string{persistence.PoolTag: "cloud"}))
	failCreate := func(id string) {
		rec := n.node(id)
		require.NotNil(t, rec, id)
		failed := managerpb.NodeStopping_CREATE_FAILED
		rec.State, rec.StopReason = managerpb.NodeLifecycle_NODE_LIFECYCLE_STOPPED, &failed
		rec.Cloud = &internalpb.CloudNode{LastError: "providers: request rejected: InvalidLaunchTemplateName.NotFoundException"}
		f.put(persistence.NodeKey(id), rec)
	}
	f.pass()
	require.Equal(t, map[string]int{"cloud-aws-1": 1}, n.creates)
	failCreate("cloud-aws-1")
	for range 5 {
		f.now = f.now.Add(time.Second)
		f.pass()
	}
	require.Equal(t, map[string]int{"cloud-aws-1": 1}, n.creates, "no node per pass after a failed create")
	u, ok := f.eng.LastFailure("a", "primary")
	require.True(t, ok)
	require.Contains(t, u.Reason, "backed off")

	// After the backoff one more try, and the next failure doubles it.
	f.now = f.now.Add(provisioner.BackoffBase)
	f.pass()
	require.Equal(t, map[string]int{"cloud-aws-1": 1, "cloud-aws-2": 1}, n.creates)
	failCreate("cloud-aws-2")
	f.now = f.now.Add(provisioner.BackoffBase + time.Second)
	f.pass()
	require.Len(t, n.creates, 2, "the second failure backs off for twice as long")
}
