//go:build linux

package e2e

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/norsk-oss/norsk-manager/proto/managerpb"
	"github.com/norsk-oss/norsk-manager/test/ec2emu"
	"github.com/norsk-oss/norsk-manager/test/testproc"
)

// TestE2E_Provision_MissingSecurityGroup (issue 21 §9), a manager process
// with --aws against the EC2 emulator: CreateJob of a job naming a
// security group that does not exist in the AWS tier's region succeeds
// with a warning naming it; the job gets no node, and its GetPlacement
// names the group and the region, while another job of the same tier gets
// its instance at once — no node fails, nothing is backed off. Once the
// operator creates the group, the job gets its own instance, in that
// group.
func TestE2E_Provision_MissingSecurityGroup(t *testing.T) {
	emu := ec2emu.Start(t, ec2emu.Options{LaunchTemplates: []ec2emu.LaunchTemplate{{ID: "lt-0123456789abcdef0", Name: "norsk-worker", Versions: 1}},
		SecurityGroups: []ec2emu.SecurityGroup{{ID: "sg-0aaaaaaaaaaaaaaa1", Name: "srt-ingest"}}})
	m := startManager(t, filepath.Join(t.TempDir(), "data"), testproc.FreePort(t), awsEnv(t, emu)...)
	mc := connect(t, m.addr)
	ctx := context.Background()
	require.NoError(t, mc.CreatePool(ctx, awsPool(60)))
	job := func(id string, groups ...string) *managerpb.Job {
		j := webJob(id, filepath.Join(t.TempDir(), id+".pid"), testproc.FreePort(t))
		j.Tags["pool"] = "cloud"
		j.AutoPlacement = &managerpb.AutoPlacement{Requirements: &managerpb.JobRequirements{RequiredCapacity: 2}}
		j.ExtraSecurityGroups = groups
		return j
	}
	t0 := time.Now()
	_, warnings, err := mc.CreateJobWarnings(ctx, job("typo", "srt-typo"))
	require.NoError(t, err)
	require.Len(t, warnings, 1)
	require.Contains(t, warnings[0], `security group "srt-typo" does not exist in region `+ec2emu.DefaultRegion+" (pool cloud, tier aws)")
	_, warnings, err = mc.CreateJobWarnings(ctx, job("fine", "srt-ingest"))
	require.NoError(t, err)
	require.Empty(t, warnings)

	testproc.Eventually(t, 30*time.Second, "the other job's instance", func() bool { return len(instancesIn(emu, "")) == 1 })
	require.Equal(t, []string{"sg-0aaaaaaaaaaaaaaa1"}, instancesIn(emu, "")[0].SecurityGroupIDs)
	t.Logf("the other job's instance %s after its CreateJob", time.Since(t0).Round(time.Millisecond))
	want := `security group "srt-typo" (the job's extra_security_groups) does not exist in region ` + ec2emu.DefaultRegion
	testproc.Eventually(t, 30*time.Second, "GetPlacement names the missing group", func() bool {
		p, err := mc.GetPlacement(ctx, "typo")
		require.NoError(t, err)
		for _, r := range p.GetRoles() {
			if strings.Contains(r.GetLastAttempt().GetReason(), want) {
				return true
			}
		}
		return false
	})
	t.Logf("GetPlacement names the group %s after the CreateJob", time.Since(t0).Round(time.Millisecond))
	nodes, err := mc.ListNodes(ctx)
	require.NoError(t, err)
	for _, n := range nodes {
		require.NotEqual(t, managerpb.NodeLifecycle_NODE_LIFECYCLE_STOPPED, n.GetState(), "node %s stopped: %v", n.GetMetadata().GetNodeId().GetNodeId(), n.GetStopReason())
	}
	p, err := mc.GetPool(ctx, "cloud")
	require.NoError(t, err)
	require.Empty(t, p.GetTierStatus()[0].GetBackedOff(), "nothing backed off")

	g := emu.AddSecurityGroup(ec2emu.SecurityGroup{Name: "srt-typo"})
	t1 := time.Now()
	testproc.Eventually(t, 45*time.Second, "the job's own instance once the group exists", func() bool {
		for _, in := range instancesIn(emu, "") {
			if len(in.SecurityGroupIDs) == 1 && in.SecurityGroupIDs[0] == g.ID {
				return true
			}
		}
		return false
	})
	t.Logf("the job's instance %s after its group was created", time.Since(t1).Round(time.Millisecond))
}
