package placement

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/norsk-oss/norsk-manager/actors/provisioner"
	"github.com/norsk-oss/norsk-manager/persistence"
	"github.com/norsk-oss/norsk-manager/proto/internalpb"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
	"github.com/norsk-oss/norsk-manager/providers"
	"github.com/norsk-oss/norsk-manager/test/ec2emu"
)

// TestEngine_Provision_MissingSecurityGroup (issue 21 §9): a job whose
// extra security group does not exist in the AWS tier's region gets no
// node, and its placement failure (GetPlacement, placement_failed) names
// the group and the region; the tier serves another job at once (the
// same pass's clock: nothing backed off); once the group is created the
// job gets its node. The groups are looked up in the EC2 emulator through
// the real provider.
func TestEngine_Provision_MissingSecurityGroup(t *testing.T) {
	f := newFixture(t)
	n := &fakeNodes{f: f}
	f.router.other = n.request
	emu := ec2emu.Start(t, ec2emu.Options{SecurityGroups: []ec2emu.SecurityGroup{{Name: "base"}}})
	f.eng.cfg.SecurityGroups = providers.NewAWS(providers.AWSConfig{Base: emu.Config(), Endpoint: emu.URL(),
		Clock: func() time.Time { return f.now }})
	region := emu.Region()
	f.putPool("cloud", 5, 600, &managerpb.PoolTier{Name: "aws",
		Provisioner: &managerpb.PoolTier_Aws{Aws: &managerpb.AwsTierProvisioner{Region: region, AvailabilityZones: []string{region + "a"},
			InstanceTypes: []*managerpb.TierInstanceType{{InstanceType: "c6i.large", Capacity: 4}}, ExtraSecurityGroups: []string{"base"}}}})
	bad := autoJob("bad", 1, map[string]string{persistence.PoolTag: "cloud"})
	bad.Job.Job.ExtraSecurityGroups = []string{"typo"}
	f.putJob(bad)
	f.putJob(autoJob("good", 1, map[string]string{persistence.PoolTag: "cloud"}))
	h := f.head()

	f.pass() // plans one node for both; the look-up finds typo missing: nothing created
	require.Empty(t, n.cloud, "a node was created with a missing security group")
	f.pass() // the tier serves the other job at once
	require.Len(t, n.cloud, 1)
	require.Equal(t, []string{"good/primary"}, n.cloud[0].GetProvisioned().GetForJobs())
	require.Equal(t, []string{"base"}, n.cloud[0].GetAws().GetExtraSecurityGroups())
	f.pass()
	want := `security group "typo" (the job's extra_security_groups) does not exist in region ` + region
	u, ok := f.eng.LastFailure("bad", "primary")
	require.True(t, ok)
	require.Contains(t, u.Reason, want)
	for range 3 { // retries find it missing again; the reason holds
		f.now = f.now.Add(provisioner.GroupRetry)
		f.pass()
		f.pass()
		require.Len(t, n.cloud, 1)
		u, _ = f.eng.LastFailure("bad", "primary")
		require.Contains(t, u.Reason, want)
	}
	for range 2 {
		f.now = f.now.Add(FailureWriteGap)
		f.pass()
	}
	var said int
	for _, ev := range events[*managerpb.EventStreamEvent_PlacementFailed](f, h) {
		if ev.PlacementFailed.GetJobId().GetJobId() == "bad" && strings.Contains(ev.PlacementFailed.GetAttempt().GetReason(), want) {
			said++
		}
	}
	require.Equal(t, 1, said, "placement_failed naming the group: once, not at every look-up")
	require.Contains(t, recordedFailure(f.job("bad"), "primary").GetAttempt().GetReason(), want, "the job record (GetPlacement)")

	// The operator creates the group: the next look-up finds it.
	emu.AddSecurityGroup(ec2emu.SecurityGroup{Name: "typo"})
	f.now = f.now.Add(provisioner.GroupRetry)
	f.pass()
	f.pass()
	require.Len(t, n.cloud, 2)
	require.Equal(t, []string{"bad/primary"}, n.cloud[1].GetProvisioned().GetForJobs())
	require.Equal(t, []string{"base", "typo"}, n.cloud[1].GetAws().GetExtraSecurityGroups())
	var stopped []*internalpb.NodeRecord
	require.NoError(t, f.store.View(func(r *persistence.Reader) error {
		for _, id := range []string{"cloud-aws-1", "cloud-aws-2"} {
			rec, _, err := r.Node(id)
			if err != nil {
				return err
			}
			if rec.GetState() == managerpb.NodeLifecycle_NODE_LIFECYCLE_STOPPED {
				stopped = append(stopped, rec)
			}
		}
		return nil
	}))
	require.Empty(t, stopped, "no node failed")
}
