//go:build linux

package e2e

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/norsk-oss/norsk-manager/proto/commonpb"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
	"github.com/norsk-oss/norsk-manager/test/ec2emu"
	"github.com/norsk-oss/norsk-manager/test/testproc"
)

// TestE2E_CloudCreateSurvivesManagerKill: a manager SIGKILLed after EC2
// created a node's instance, but before the manager heard so, adopts that
// instance when it comes back (found by its node id tag): one node, one
// instance.
func TestE2E_CloudCreateSurvivesManagerKill(t *testing.T) {
	emu := ec2emu.Start(t, ec2emu.Options{LaunchTemplates: []ec2emu.LaunchTemplate{{ID: "lt-0123456789abcdef0", Name: "norsk-worker", Versions: 1}}})
	// RunInstances takes effect; its answer is held for longer than the
	// manager lives.
	emu.InjectLostResponse(ec2emu.ActionRunInstances, ec2emu.Fault{Drop: true, Delay: time.Minute})
	creds, err := emu.Config().Credentials.Retrieve(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	// The standard AWS chain of the manager process: static keys, no
	// shared files, no instance metadata.
	dir := t.TempDir()
	t.Setenv("AWS_ACCESS_KEY_ID", creds.AccessKeyID)
	t.Setenv("AWS_SECRET_ACCESS_KEY", creds.SecretAccessKey)
	t.Setenv("AWS_REGION", ec2emu.DefaultRegion)
	t.Setenv("AWS_CONFIG_FILE", filepath.Join(dir, "none"))
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", filepath.Join(dir, "none"))
	t.Setenv("AWS_EC2_METADATA_DISABLED", "true")

	port := testproc.FreePort(t)
	args := []string{"--aws", "--aws-endpoint", emu.URL(), "--node-pending-timeout", "1m"}
	m := startManager(t, filepath.Join(dir, "data"), port, args...)
	conn, err := grpc.NewClient(m.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	api := managerpb.NewManagerClient(conn)
	ctx := context.Background()
	if _, err := api.CreateAwsNode(ctx, &managerpb.CreateAwsNodeRequest{NodeId: &commonpb.NodeId{NodeId: "aws-kill"},
		Region: ec2emu.DefaultRegion, Template: &managerpb.AwsLaunchTemplate{Template: &managerpb.AwsLaunchTemplate_Name{Name: "norsk-worker"}}}); err != nil {
		t.Fatal(err)
	}
	testproc.Eventually(t, 20*time.Second, "the instance created", func() bool { return len(emu.Instances()) == 1 })
	m.Kill()

	startManager(t, m.dataDir, port, args...)
	want := emu.Instances()[0].ID
	testproc.Eventually(t, 30*time.Second, "the restarted manager adopts instance "+want, func() bool {
		resp, err := api.ListNodes(ctx, &managerpb.ListNodesRequest{})
		if err != nil {
			return false
		}
		for _, n := range resp.GetNodes() {
			if n.GetMetadata().GetNodeId().GetNodeId() == "aws-kill" {
				return n.GetRunningMetadata().GetProviderMetadata().GetAws().GetInstanceId() == want
			}
		}
		return false
	})
	if n := len(emu.Instances()); n != 1 {
		t.Fatalf("%d instances after the restart, want 1", n)
	}
}
