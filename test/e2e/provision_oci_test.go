//go:build linux

package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/norsk-oss/norsk-manager/proto/managerpb"
	"github.com/norsk-oss/norsk-manager/test/ociemu"
	"github.com/norsk-oss/norsk-manager/test/testproc"
)

// ociEnv writes an OCI config file for emu's API key and returns the
// manager flags that point its OCI provider at emu.
func ociEnv(t *testing.T, emu *ociemu.Server) []string {
	t.Helper()
	dir := t.TempDir()
	keyFile := filepath.Join(dir, "oci_api_key.pem")
	require.NoError(t, os.WriteFile(keyFile, []byte(emu.Key().PrivateKeyPEM()), 0o600))
	conf := filepath.Join(dir, "config")
	require.NoError(t, os.WriteFile(conf, []byte(fmt.Sprintf("[DEFAULT]\nuser=%s\nfingerprint=%s\nkey_file=%s\ntenancy=%s\nregion=%s\n",
		emu.Key().User, emu.Key().Fingerprint(), keyFile, emu.Key().Tenancy, emu.Region())), 0o600))
	return []string{"--oci-compartment", ociemu.DefaultCompartment, "--oci-config", conf, "--oci-endpoint", emu.URL()}
}

// TestE2E_Provision_OCIOutOfHostCapacity: the first availability domain
// answers "Out of host capacity". A job with no room → the engine's node
// in AD-1 fails → its next node goes to AD-2 → a worker booted from the
// instance's user data runs the job.
func TestE2E_Provision_OCIOutOfHostCapacity(t *testing.T) {
	emu := ociemu.New(t, ociemu.Options{})
	emu.InjectErrors(ociemu.OpLaunchInstance, ociemu.ErrOutOfCapacity)
	ads := emu.AvailabilityDomains()
	m := startManager(t, filepath.Join(t.TempDir(), "data"), testproc.FreePort(t), ociEnv(t, emu)...)
	mc := connect(t, m.addr)
	ctx := context.Background()
	require.NoError(t, mc.CreatePool(ctx, &managerpb.Pool{Name: "oracle", Tiers: []*managerpb.PoolTier{{
		Name: "oci", MaxNodes: 3, LingerSeconds: 300,
		Provisioner: &managerpb.PoolTier_Oci{Oci: &managerpb.OciTierProvisioner{AvailabilityDomains: ads[:2],
			Shape: &managerpb.TierInstanceType{InstanceType: "VM.Standard2.1", Capacity: 2}, Subnet: ociemu.DefaultSubnet, Architecture: "x86_64"}},
	}}}))
	webPort := testproc.FreePort(t)
	job := webJob("ocijob", filepath.Join(testproc.JobFilesDir(t), "web.pid"), webPort)
	job.Tags["pool"] = "oracle"
	job.AutoPlacement = &managerpb.AutoPlacement{Requirements: &managerpb.JobRequirements{RequiredCapacity: 1}}
	_, err := mc.CreateJob(ctx, job)
	require.NoError(t, err)

	var inst ociemu.Instance
	testproc.Eventually(t, 30*time.Second, "an instance in "+ads[1], func() bool {
		for _, in := range emu.Instances() {
			if in.AvailabilityDomain == ads[1] && in.PrivateIP != "" {
				inst = in
				return true
			}
		}
		return false
	})
	failed, ok := nodeState(t, mc, "oracle-oci-1")
	require.True(t, ok)
	require.Equal(t, managerpb.NodeStopping_CREATE_FAILED, failed.GetStopReason())
	p, err := mc.GetPool(ctx, "oracle")
	require.NoError(t, err)
	require.Len(t, p.GetTierStatus()[0].GetBackedOff(), 1)
	require.Equal(t, "VM.Standard2.1@"+ads[0], p.GetTierStatus()[0].GetBackedOff()[0].GetOffering())
	require.Contains(t, p.GetTierStatus()[0].GetBackedOff()[0].GetReason(), "Out of host capacity")

	w := bootInstance(t, inst.ID, inst.PrivateIP, string(inst.UserData), 2)
	testproc.Eventually(t, 30*time.Second, "the job serves on the OCI node", func() bool {
		if !w.Running() {
			t.Fatalf("instance worker exited:\n%s", w.Output())
		}
		return httpOK(webPort)
	})
	r, err := mc.JobByID(ctx, "ocijob")
	require.NoError(t, err)
	require.Equal(t, "oracle-oci-2", r.GetInstances()[0].GetNodeId().GetNodeId())
}
