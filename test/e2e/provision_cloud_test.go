//go:build linux

package e2e

import (
	"context"
	"net"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/norsk-oss/norsk-manager/proto/managerpb"
	"github.com/norsk-oss/norsk-manager/test/ec2emu"
	"github.com/norsk-oss/norsk-manager/test/testproc"
)

// awsEnv points the manager processes' AWS chain at emu (static keys, no
// shared files, no instance metadata) and returns the manager flags.
func awsEnv(t *testing.T, emu *ec2emu.Emulator) []string {
	t.Helper()
	creds, err := emu.Config().Credentials.Retrieve(context.Background())
	require.NoError(t, err)
	dir := t.TempDir()
	t.Setenv("AWS_ACCESS_KEY_ID", creds.AccessKeyID)
	t.Setenv("AWS_SECRET_ACCESS_KEY", creds.SecretAccessKey)
	t.Setenv("AWS_REGION", ec2emu.DefaultRegion)
	t.Setenv("AWS_CONFIG_FILE", filepath.Join(dir, "none"))
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", filepath.Join(dir, "none"))
	t.Setenv("AWS_EC2_METADATA_DISABLED", "true")
	return []string{"--aws", "--aws-endpoint", emu.URL()}
}

// awsPool is a pool whose one tier creates c6i.large nodes of 2 units in
// eu-west-2a, then eu-west-2b.
func awsPool(linger uint32) *managerpb.Pool {
	return &managerpb.Pool{Name: "cloud", Tiers: []*managerpb.PoolTier{{
		Name: "aws", MaxNodes: 3, LingerSeconds: linger,
		Provisioner: &managerpb.PoolTier_Aws{Aws: &managerpb.AwsTierProvisioner{
			Region: ec2emu.DefaultRegion, AvailabilityZones: []string{"eu-west-2a", "eu-west-2b"},
			Template:      &managerpb.AwsLaunchTemplate{Template: &managerpb.AwsLaunchTemplate_Name{Name: "norsk-worker"}},
			InstanceTypes: []*managerpb.TierInstanceType{{InstanceType: "c6i.large", Capacity: 2}}}},
	}}}
}

// bootInstance plays the boot of an emulated instance (id, its private
// address, its user data): it runs the worker line of the user data
// (DefaultUserData) on that address, with capacity units.
func bootInstance(t *testing.T, id, privateIP, userData string, capacity int) *testproc.Proc {
	t.Helper()
	_, rest, ok := strings.Cut(userData, "exec norsk-ctl ")
	require.True(t, ok, "no exec norsk-ctl in:\n%s", userData)
	line, _, _ := strings.Cut(strings.ReplaceAll(rest, "\\\n", " "), "\n")
	stateDir := filepath.Join(t.TempDir(), "inst-"+id)
	t.Cleanup(func() { testproc.KillProcessesMentioning(stateDir) })
	subst := map[string]string{
		"--listen":    net.JoinHostPort(privateIP, strconv.Itoa(testproc.FreePort(t))),
		"--advertise": privateIP,
		"--state-dir": stateDir,
	}
	args := []string{"norsk-ctl"}
	for _, f := range strings.Fields(line) {
		name, _, _ := strings.Cut(f, "=")
		if v, ok := subst[name]; ok {
			f = name + "=" + v
		}
		args = append(args, f)
	}
	args = append(args, "--capacity", strconv.Itoa(capacity), "--log-level", "debug", "--stop-grace", "3s")
	return start(t, "instance-"+id, args...)
}

// instancesIn returns emu's instances in zone that are not terminated.
func instancesIn(emu *ec2emu.Emulator, zone string) []ec2emu.Instance {
	var out []ec2emu.Instance
	for _, in := range emu.Instances() {
		if (zone == "" || in.AvailabilityZone == zone) && in.State != ec2emu.StateTerminated && in.State != ec2emu.StateShuttingDown {
			out = append(out, in)
		}
	}
	return out
}

// TestE2E_Provision_AWSZoneFallback: eu-west-2a has no capacity. A job
// with an extra security group and no room → the engine's node in
// eu-west-2a fails with
// InsufficientInstanceCapacity → the next node goes to eu-west-2b, and pool
// get shows eu-west-2a backed off → a real worker boots from the
// instance's user data → the job runs on it, whose instance was created
// with the job's security group → the job completes → the node
// is released after its linger and its instance terminated.
func TestE2E_Provision_AWSZoneFallback(t *testing.T) {
	emu := ec2emu.Start(t, ec2emu.Options{LaunchTemplates: []ec2emu.LaunchTemplate{{ID: "lt-0123456789abcdef0", Name: "norsk-worker", Versions: 1}},
		SecurityGroups: []ec2emu.SecurityGroup{{ID: "sg-0aaaaaaaaaaaaaaa1", Name: "srt-ingest"}}})
	emu.SetNoCapacity("eu-west-2a", true)
	m := startManager(t, filepath.Join(t.TempDir(), "data"), testproc.FreePort(t), awsEnv(t, emu)...)
	mc := connect(t, m.addr)
	ctx := context.Background()
	require.NoError(t, mc.CreatePool(ctx, awsPool(3)))
	webPort := testproc.FreePort(t)
	job := webJob("cloudjob", filepath.Join(testproc.JobFilesDir(t), "web.pid"), webPort)
	job.Tags["pool"] = "cloud"
	job.AutoPlacement = &managerpb.AutoPlacement{Requirements: &managerpb.JobRequirements{RequiredCapacity: 1}}
	job.ExtraSecurityGroups = []string{"srt-ingest"}
	_, err := mc.CreateJob(ctx, job)
	require.NoError(t, err)

	testproc.Eventually(t, 30*time.Second, "an instance in eu-west-2b", func() bool { return len(instancesIn(emu, "eu-west-2b")) == 1 })
	require.Empty(t, instancesIn(emu, "eu-west-2a"))
	failed, ok := nodeState(t, mc, "cloud-aws-1")
	require.True(t, ok)
	require.Equal(t, managerpb.NodeLifecycle_NODE_LIFECYCLE_STOPPED, failed.GetState())
	require.Equal(t, managerpb.NodeStopping_CREATE_FAILED, failed.GetStopReason())
	p, err := mc.GetPool(ctx, "cloud")
	require.NoError(t, err)
	require.Len(t, p.GetTierStatus(), 1)
	st := p.GetTierStatus()[0]
	require.Len(t, st.GetBackedOff(), 1, "%v", st)
	require.Equal(t, "c6i.large@eu-west-2a", st.GetBackedOff()[0].GetOffering())
	require.Contains(t, st.GetBackedOff()[0].GetReason(), "InsufficientInstanceCapacity")
	require.True(t, st.GetBackedOff()[0].GetUntil().AsTime().After(time.Now()))

	inst := instancesIn(emu, "eu-west-2b")[0]
	require.Equal(t, []string{"sg-0aaaaaaaaaaaaaaa1"}, inst.SecurityGroupIDs, "the job's security group on its instance")
	w := bootInstance(t, inst.ID, inst.PrivateIP, inst.UserData, 2)
	testproc.Eventually(t, 30*time.Second, "the job serves on the new node", func() bool {
		if !w.Running() {
			t.Fatalf("instance worker exited:\n%s", w.Output())
		}
		return httpOK(webPort)
	})
	r, err := mc.JobByID(ctx, "cloudjob")
	require.NoError(t, err)
	require.Equal(t, "cloud-aws-2", r.GetInstances()[0].GetNodeId().GetNodeId())

	require.NoError(t, mc.CompleteJob(ctx, "cloudjob"))
	testproc.Eventually(t, 30*time.Second, "the idle node released and its instance terminated", func() bool {
		n, ok := nodeState(t, mc, "cloud-aws-2")
		return ok && n.GetState() == managerpb.NodeLifecycle_NODE_LIFECYCLE_STOPPED && len(instancesIn(emu, "")) == 0
	})
	_, third := nodeState(t, mc, "cloud-aws-3")
	require.False(t, third, "a third node was created")
}

// TestE2E_Provision_ManagerKilledMidCreate: the manager is SIGKILLed after
// EC2 created the instance of the node the engine created for a waiting
// job, before the manager heard so. The restarted manager adopts that
// instance (the node id tag) and creates no second node: one node, one
// instance.
func TestE2E_Provision_ManagerKilledMidCreate(t *testing.T) {
	emu := ec2emu.Start(t, ec2emu.Options{LaunchTemplates: []ec2emu.LaunchTemplate{{ID: "lt-0123456789abcdef0", Name: "norsk-worker", Versions: 1}}})
	emu.InjectLostResponse(ec2emu.ActionRunInstances, ec2emu.Fault{Drop: true, Delay: time.Minute})
	args := append(awsEnv(t, emu), "--node-pending-timeout", "1m")
	port := testproc.FreePort(t)
	m := startManager(t, filepath.Join(t.TempDir(), "data"), port, args...)
	mc := connect(t, m.addr)
	ctx := context.Background()
	require.NoError(t, mc.CreatePool(ctx, awsPool(300)))
	job := webJob("waiting", filepath.Join(testproc.JobFilesDir(t), "web.pid"), testproc.FreePort(t))
	job.Tags["pool"] = "cloud"
	job.AutoPlacement = &managerpb.AutoPlacement{Requirements: &managerpb.JobRequirements{RequiredCapacity: 1}}
	_, err := mc.CreateJob(ctx, job)
	require.NoError(t, err)
	testproc.Eventually(t, 30*time.Second, "the instance created", func() bool { return len(emu.Instances()) == 1 })
	m.Kill()

	m2 := startManager(t, m.dataDir, port, args...)
	mc2 := connect(t, m.addr)
	want := emu.Instances()[0].ID
	testproc.Eventually(t, 30*time.Second, "the restarted manager adopts instance "+want, func() bool {
		n, ok := nodeState(t, mc2, "cloud-aws-1")
		return ok && n.GetRunningMetadata().GetProviderMetadata().GetAws().GetInstanceId() == want
	})
	// The new engine's first pass found the job waiting (logged once per
	// engine) and, in the same pass, planned for it: the node being
	// created is room coming, so nothing more is created.
	testproc.Eventually(t, 10*time.Second, "the restarted engine's pass over the waiting job", func() bool {
		return strings.Contains(m2.Output(), `msg="job not placed" loop=placement job_id=waiting`)
	})
	n, _ := nodeState(t, mc2, "cloud-aws-1")
	require.Equal(t, managerpb.NodeLifecycle_NODE_LIFECYCLE_STARTING, n.GetState())
	require.Len(t, emu.Instances(), 1)
	_, second := nodeState(t, mc2, "cloud-aws-2")
	require.False(t, second, "a second node was created")
}
