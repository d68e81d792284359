package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"

	"github.com/norsk-oss/norsk-manager/actors/node"
	"github.com/norsk-oss/norsk-manager/proto/commonpb"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
	"github.com/norsk-oss/norsk-manager/providers"
	"github.com/norsk-oss/norsk-manager/test/ec2emu"
	"github.com/norsk-oss/norsk-manager/test/ociemu"
	"github.com/norsk-oss/norsk-manager/worker"
	"github.com/norsk-oss/norsk-manager/worker/process"
)

// startCloudAgent starts a manager whose AWS provider talks to an EC2
// emulator on loopback, with short cloud timeouts.
func startCloudAgent(t *testing.T, emu *ec2emu.Emulator, pending, startup time.Duration) (*Agent, managerpb.ManagerClient) {
	t.Helper()
	cfg := DevConfig(t.TempDir())
	cfg.Store.SyncWrites = false
	cfg.Store.GCInterval = 0
	cfg.Node.Providers = map[managerpb.NodeProvider]providers.Provider{
		managerpb.NodeProvider_NODE_PROVIDER_AWS: providers.NewAWS(providers.AWSConfig{Base: emu.Config(), Endpoint: emu.URL()}),
	}
	cfg.Node.PendingTimeout, cfg.Node.StartupTimeout, cfg.Node.CloudPollInterval = pending, startup, 20*time.Millisecond
	return startAgentWith(t, cfg)
}

func awsNode(id string) *managerpb.CreateAwsNodeRequest {
	return &managerpb.CreateAwsNodeRequest{NodeId: &commonpb.NodeId{NodeId: id}, Region: ec2emu.DefaultRegion, InstanceType: "c5.large",
		Tags:     map[string]string{"team": "video"},
		Template: &managerpb.AwsLaunchTemplate{Template: &managerpb.AwsLaunchTemplate_Name{Name: "norsk-worker"}, Version: "1"}}
}

// nodeOf returns the node id's NodeInfo from ListNodes (nil if absent).
func nodeOf(t *testing.T, c managerpb.ManagerClient, id string) *managerpb.NodeInfo {
	resp, err := c.ListNodes(context.Background(), &managerpb.ListNodesRequest{})
	require.NoError(t, err)
	for _, n := range resp.GetNodes() {
		if n.GetMetadata().GetNodeId().GetNodeId() == id {
			return n
		}
	}
	return nil
}

// startCloudWorker starts a real worker (process runtime) with the
// registration token taken from the instance's user data.
func startCloudWorker(t *testing.T, a *Agent, userData string) *worker.Agent {
	token := node.TokenFromUserData(userData)
	require.NotEmpty(t, token, "no token in user data:\n%s", userData)
	pc := process.DevConfig()
	pc.StateDir = t.TempDir()
	pc.Logger = worker.TestLogger(t)
	rt, err := process.New(pc)
	require.NoError(t, err)
	t.Cleanup(rt.Shutdown)
	stateDir := t.TempDir()
	w, _ := worker.TestAgent(t, rt, func(c *worker.Config) {
		c.Token = token
		c.ManagerURLs = []string{a.APIAddr()}
		c.StateDir = stateDir
	})
	workerDirs.Store(w, stateDir)
	return w
}

// workerDirs maps the workers of startCloudWorker to their state dirs.
var workerDirs sync.Map

// workerCredential reads the node credential a cloud worker keeps in its
// state dir (identity.json).
func workerCredential(t *testing.T, w *worker.Agent) string {
	dir, _ := workerDirs.Load(w)
	data, err := os.ReadFile(filepath.Join(dir.(string), "identity.json"))
	require.NoError(t, err)
	var id struct {
		Credential string `json:"credential"`
	}
	require.NoError(t, json.Unmarshal(data, &id))
	return id.Credential
}

func TestCloud_AWSNodeLifecycle(t *testing.T) {
	emu := ec2emu.Start(t, ec2emu.Options{LaunchTemplates: []ec2emu.LaunchTemplate{{ID: "lt-0123456789abcdef0", Name: "norsk-worker", Versions: 1}}})
	a, c := startCloudAgent(t, emu, 10*time.Second, 10*time.Second)
	ctx := context.Background()
	_, err := c.CreateAwsNode(ctx, awsNode("aws-1"))
	require.NoError(t, err)
	_, err = c.CreateAwsNode(ctx, awsNode("aws-1"))
	requireCode(t, err, codes.AlreadyExists)

	var run ec2emu.RunRequest
	eventually(t, "RunInstances", func() bool { var ok bool; run, ok = emu.LastRunRequest(); return ok })
	require.Equal(t, "aws-1", run.Tags[providers.NodeIDTag])
	require.Equal(t, "video", run.Tags["team"])
	require.Equal(t, "norsk-worker", run.LaunchTemplateName)
	require.Contains(t, run.UserData, "--manager-url="+a.APIAddr())

	w := startCloudWorker(t, a, run.UserData)
	// As for OCI: the running metadata follows the describe that sees the
	// instance running, which may come after the worker registered.
	eventually(t, "node started with its instance described", func() bool {
		n := nodeOf(t, c, "aws-1")
		return n != nil && nodeState(t, c, "aws-1") == managerpb.NodeLifecycle_NODE_LIFECYCLE_STARTED &&
			n.GetRunningMetadata().GetProviderMetadata().GetAws().GetInstanceId() != ""
	})
	insts := emu.Instances()
	require.Len(t, insts, 1)
	n := nodeOf(t, c, "aws-1")
	require.Equal(t, insts[0].ID, n.GetRunningMetadata().GetProviderMetadata().GetAws().GetInstanceId())
	require.Equal(t, insts[0].PrivateIP, n.GetRunningMetadata().GetPrivateIpAddress())

	// The token was used: a second worker cannot register with it.
	wport := uint32(w.Addr().(*net.TCPAddr).Port)
	_, err = c.ClusterMemberRegister(ctx, &managerpb.ClusterMemberRegisterRequest{Token: node.TokenFromUserData(run.UserData), Address: "127.0.0.1", Port: wport})
	requireCode(t, err, codes.PermissionDenied)

	_, err = c.TerminateNode(ctx, &commonpb.NodeId{NodeId: "aws-1"})
	require.NoError(t, err)
	eventually(t, "instance terminated", func() bool {
		i, _ := emu.Instance(insts[0].ID)
		return i.State == ec2emu.StateTerminated || i.State == ec2emu.StateShuttingDown
	})
}

func TestCloud_AWSCapacityFailsCreate(t *testing.T) {
	emu := ec2emu.Start(t, ec2emu.Options{LaunchTemplates: []ec2emu.LaunchTemplate{{ID: "lt-0123456789abcdef0", Name: "norsk-worker", Versions: 1}}})
	emu.InjectFault(ec2emu.ActionRunInstances, ec2emu.FaultOf(ec2emu.CodeInsufficientInstanceCapacity))
	_, c := startCloudAgent(t, emu, 10*time.Second, 10*time.Second)
	_, err := c.CreateAwsNode(context.Background(), awsNode("aws-cap"))
	require.NoError(t, err)
	eventually(t, "node stopped", func() bool {
		return nodeOf(t, c, "aws-cap").GetState() == managerpb.NodeLifecycle_NODE_LIFECYCLE_STOPPED
	})
	require.Equal(t, managerpb.NodeStopping_CREATE_FAILED, nodeOf(t, c, "aws-cap").GetStopReason())
	require.Equal(t, 1, emu.Calls(ec2emu.ActionRunInstances), "a capacity error is not retried")
	require.Empty(t, emu.Instances())
}

func TestCloud_AWSWorkerNeverRegisters(t *testing.T) {
	emu := ec2emu.Start(t, ec2emu.Options{LaunchTemplates: []ec2emu.LaunchTemplate{{ID: "lt-0123456789abcdef0", Name: "norsk-worker", Versions: 1}}})
	_, c := startCloudAgent(t, emu, 10*time.Second, 500*time.Millisecond)
	_, err := c.CreateAwsNode(context.Background(), awsNode("aws-silent"))
	require.NoError(t, err)
	eventually(t, "node stopped", func() bool {
		return nodeOf(t, c, "aws-silent").GetState() == managerpb.NodeLifecycle_NODE_LIFECYCLE_STOPPED
	})
	require.Equal(t, managerpb.NodeStopping_STARTUP_TIME_EXCEEDED, nodeOf(t, c, "aws-silent").GetStopReason())
	// The unused token is dead with its node.
	run, _ := emu.LastRunRequest()
	l, err := net.Listen("tcp", "127.0.0.1:0") // the gateway checks that a worker answers there
	require.NoError(t, err)
	defer l.Close()
	_, err = c.ClusterMemberRegister(context.Background(), &managerpb.ClusterMemberRegisterRequest{
		Token: node.TokenFromUserData(run.UserData), Address: "127.0.0.1", Port: uint32(l.Addr().(*net.TCPAddr).Port)})
	requireCode(t, err, codes.Unauthenticated, "expired or its node was stopped")
	eventually(t, "instance terminated", func() bool {
		insts := emu.Instances()
		return len(insts) == 1 && (insts[0].State == ec2emu.StateTerminated || insts[0].State == ec2emu.StateShuttingDown)
	})
}

func TestCloud_AWSPendingTooLong(t *testing.T) {
	emu := ec2emu.Start(t, ec2emu.Options{NeverRunning: true, LaunchTemplates: []ec2emu.LaunchTemplate{{ID: "lt-0123456789abcdef0", Name: "norsk-worker", Versions: 1}}})
	_, c := startCloudAgent(t, emu, 500*time.Millisecond, 10*time.Second)
	_, err := c.CreateAwsNode(context.Background(), awsNode("aws-pending"))
	require.NoError(t, err)
	eventually(t, "node stopped", func() bool {
		return nodeOf(t, c, "aws-pending").GetState() == managerpb.NodeLifecycle_NODE_LIFECYCLE_STOPPED
	})
	require.Equal(t, managerpb.NodeStopping_PENDING_TIME_EXCEEDED, nodeOf(t, c, "aws-pending").GetStopReason())
	eventually(t, "instance terminated", func() bool {
		insts := emu.Instances()
		return len(insts) == 1 && (insts[0].State == ec2emu.StateTerminated || insts[0].State == ec2emu.StateShuttingDown)
	})
}

func TestCloud_OCINodeLifecycle(t *testing.T) {
	emu := ociemu.New(t, ociemu.Options{})
	oci, err := providers.NewOCI(providers.OCIConfig{Provider: emu.ConfigurationProvider(), CompartmentID: ociemu.DefaultCompartment,
		Endpoint: emu.URL(), ShapeOCPUs: 2, ShapeMemoryGB: 8})
	require.NoError(t, err)
	cfg := DevConfig(t.TempDir())
	cfg.Store.SyncWrites = false
	cfg.Store.GCInterval = 0
	cfg.Node.Providers = map[managerpb.NodeProvider]providers.Provider{managerpb.NodeProvider_NODE_PROVIDER_OCI: oci}
	cfg.Node.CloudPollInterval = 20 * time.Millisecond
	a, c := startAgentWith(t, cfg)
	ctx := context.Background()
	_, err = c.CreateOciNode(ctx, &managerpb.CreateOciNodeRequest{NodeId: &commonpb.NodeId{NodeId: "oci-1"},
		AvailabilityDomain: ociemu.DefaultAvailabilityDomains[0], Shape: ociemu.X86Shapes[0], Subnet: ociemu.DefaultSubnet,
		Architecture: "x86_64", Tags: map[string]string{"team": "video"}})
	require.NoError(t, err)
	var launch ociemu.LaunchRecord
	eventually(t, "LaunchInstance", func() bool { var ok bool; launch, ok = emu.LastLaunch(); return ok })
	require.Equal(t, "oci-1", launch.FreeformTags[providers.NodeIDTag])
	startCloudWorker(t, a, string(launch.UserData))
	// The worker may register before the manager's next describe sees the
	// instance running (the emulated instance starts at once; a loaded box
	// delays the poll): the running metadata follows that describe.
	eventually(t, "node started with its instance described", func() bool {
		n := nodeOf(t, c, "oci-1")
		return n.GetState() == managerpb.NodeLifecycle_NODE_LIFECYCLE_STARTED &&
			n.GetRunningMetadata().GetProviderMetadata().GetOci().GetInstanceId() != ""
	})
	n := nodeOf(t, c, "oci-1")
	require.Equal(t, launch.InstanceID, n.GetRunningMetadata().GetProviderMetadata().GetOci().GetInstanceId())
	require.NotEmpty(t, n.GetRunningMetadata().GetPrivateIpAddress())
	_, err = c.TerminateNode(ctx, &commonpb.NodeId{NodeId: "oci-1"})
	require.NoError(t, err)
	eventually(t, "instance terminated", func() bool {
		i, _ := emu.Instance(launch.InstanceID)
		return i.State == ociemu.Terminating || i.State == ociemu.Terminated
	})
}

// TestCloud_ProviderHealthPublished: repeated capacity failures in a region
// make it FAILED, published as provider_health_change and carried by
// initial_data_complete for a new subscriber.
func TestCloud_ProviderHealthPublished(t *testing.T) {
	emu := ec2emu.Start(t, ec2emu.Options{LaunchTemplates: []ec2emu.LaunchTemplate{{ID: "lt-0123456789abcdef0", Name: "norsk-worker", Versions: 1}}})
	emu.InjectFault(ec2emu.ActionRunInstances, ec2emu.Faults(ec2emu.CodeInsufficientInstanceCapacity, 3)...)
	a, c := startCloudAgent(t, emu, 10*time.Second, 10*time.Second)
	ctx := context.Background()
	for _, id := range []string{"h1", "h2", "h3"} {
		_, err := c.CreateAwsNode(ctx, awsNode(id))
		require.NoError(t, err)
		eventually(t, id+" stopped", func() bool {
			return nodeOf(t, c, id).GetState() == managerpb.NodeLifecycle_NODE_LIFECYCLE_STOPPED
		})
	}
	regionHealth := func(ph []*managerpb.ProviderHealth) managerpb.Health {
		for _, p := range ph {
			for _, r := range p.GetAws().GetRegionHealth() {
				if r.GetRegion() == ec2emu.DefaultRegion {
					return r.GetHealth()
				}
			}
		}
		return -1
	}
	eventually(t, "initial_data_complete with FAILED", func() bool {
		sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		s, err := c.EventStream(sctx, &managerpb.EventStreamRequest{})
		require.NoError(t, err)
		for {
			ev, err := s.Recv()
			if err != nil {
				return false
			}
			if idc := ev.GetInitialDataComplete(); idc != nil {
				return regionHealth(idc.GetHealth()) == managerpb.Health_FAILED
			}
		}
	})
	// Each change is an event: UNSTABLE at the first failure, FAILED at the third.
	first, _ := a.store.EventBounds()
	evs, err := a.store.ReadEvents(first, 10000)
	require.NoError(t, err)
	var changes []managerpb.Health
	for _, e := range evs {
		if ph := e.GetEvent().GetProviderHealthChange(); ph != nil {
			changes = append(changes, regionHealth([]*managerpb.ProviderHealth{ph}))
		}
	}
	require.Equal(t, []managerpb.Health{managerpb.Health_UNSTABLE, managerpb.Health_FAILED}, changes)
}

// TestCloud_ManagerRestartMidCreate: a manager stopped after the cloud
// created the instance but before it recorded the instance's id finds the
// instance by its node id tag when it comes back, instead of launching a
// second one.
func TestCloud_ManagerRestartMidCreate(t *testing.T) {
	emu := ec2emu.Start(t, ec2emu.Options{LaunchTemplates: []ec2emu.LaunchTemplate{{ID: "lt-0123456789abcdef0", Name: "norsk-worker", Versions: 1}}})
	// RunInstances takes effect, then its answer is held and lost.
	emu.InjectLostResponse(ec2emu.ActionRunInstances, ec2emu.Fault{Drop: true, Delay: 2 * time.Second})
	dir := t.TempDir()
	cfg := DevConfig(dir)
	cfg.Store.GCInterval = 0
	cfg.Node.Providers = map[managerpb.NodeProvider]providers.Provider{
		managerpb.NodeProvider_NODE_PROVIDER_AWS: providers.NewAWS(providers.AWSConfig{Base: emu.Config(), Endpoint: emu.URL()}),
	}
	cfg.Node.CloudPollInterval = 20 * time.Millisecond
	a, c := startAgentWith(t, cfg)
	_, err := c.CreateAwsNode(context.Background(), awsNode("aws-restart"))
	require.NoError(t, err)
	eventually(t, "instance created", func() bool { return len(emu.Instances()) == 1 })
	a.Shutdown() // before the answer arrives: the record still says LAUNCHING

	cfg.Node.Providers = map[managerpb.NodeProvider]providers.Provider{
		managerpb.NodeProvider_NODE_PROVIDER_AWS: providers.NewAWS(providers.AWSConfig{Base: emu.Config(), Endpoint: emu.URL()}),
	}
	_, c2 := startAgentWith(t, cfg)
	want := emu.Instances()[0].ID
	eventually(t, "instance adopted", func() bool {
		return nodeOf(t, c2, "aws-restart").GetRunningMetadata().GetProviderMetadata().GetAws().GetInstanceId() == want
	})
	require.Len(t, emu.Instances(), 1, "a second instance was launched")
}

// TestCloud_StoppedDuringLaunchRetries: a node stopped while its launch is
// still being retried (throttling) does not leak the instance the launch
// creates in the end.
func TestCloud_StoppedDuringLaunchRetries(t *testing.T) {
	emu := ec2emu.Start(t, ec2emu.Options{LaunchTemplates: []ec2emu.LaunchTemplate{{ID: "lt-0123456789abcdef0", Name: "norsk-worker", Versions: 1}}})
	emu.InjectFault(ec2emu.ActionRunInstances, ec2emu.Faults(ec2emu.CodeRequestLimitExceeded, 3)...)
	_, c := startCloudAgent(t, emu, 30*time.Second, 30*time.Second)
	ctx := context.Background()
	_, err := c.CreateAwsNode(ctx, awsNode("aws-late"))
	require.NoError(t, err)
	eventually(t, "a launch attempt", func() bool { return emu.Calls(ec2emu.ActionRunInstances) >= 1 })
	_, err = c.TerminateNode(ctx, &commonpb.NodeId{NodeId: "aws-late"})
	require.NoError(t, err)
	eventually(t, "the late instance terminated", func() bool {
		insts := emu.Instances()
		return len(insts) == 1 && (insts[0].State == ec2emu.StateTerminated || insts[0].State == ec2emu.StateShuttingDown)
	})
	require.Equal(t, managerpb.NodeStopping_USER_REQUESTED, nodeOf(t, c, "aws-late").GetStopReason())
}

// TestCloud_TerminatedNodeStaysTerminated: a terminated node's worker
// cannot bring it back with its credential, and a failed node keeps its
// reason when terminated afterwards.
func TestCloud_TerminatedNodeStaysTerminated(t *testing.T) {
	emu := ec2emu.Start(t, ec2emu.Options{LaunchTemplates: []ec2emu.LaunchTemplate{{ID: "lt-0123456789abcdef0", Name: "norsk-worker", Versions: 1}}})
	a, c := startCloudAgent(t, emu, 10*time.Second, 10*time.Second)
	ctx := context.Background()
	_, err := c.CreateAwsNode(ctx, awsNode("aws-t"))
	require.NoError(t, err)
	var run ec2emu.RunRequest
	eventually(t, "RunInstances", func() bool { var ok bool; run, ok = emu.LastRunRequest(); return ok })
	w := startCloudWorker(t, a, run.UserData)
	eventually(t, "node started", func() bool {
		return nodeOf(t, c, "aws-t").GetState() == managerpb.NodeLifecycle_NODE_LIFECYCLE_STARTED
	})
	_, err = c.TerminateNode(ctx, &commonpb.NodeId{NodeId: "aws-t"})
	require.NoError(t, err)
	// The worker lives on (its instance is shutting down) and re-registers
	// with its credential after the session ends: refused.
	cred := workerCredential(t, w)
	_, err = c.ClusterMemberRegister(ctx, &managerpb.ClusterMemberRegisterRequest{NodeCredential: cred, Address: "127.0.0.1",
		Port: uint32(w.Addr().(*net.TCPAddr).Port)})
	requireCode(t, err, codes.Unauthenticated)
	require.Equal(t, managerpb.NodeLifecycle_NODE_LIFECYCLE_STOPPED, nodeOf(t, c, "aws-t").GetState())

	// A node that failed keeps its reason through a later TerminateNode.
	emu.InjectFault(ec2emu.ActionRunInstances, ec2emu.FaultOf(ec2emu.CodeInsufficientInstanceCapacity))
	_, err = c.CreateAwsNode(ctx, awsNode("aws-f"))
	require.NoError(t, err)
	eventually(t, "create failed", func() bool {
		n := nodeOf(t, c, "aws-f")
		return n.GetState() == managerpb.NodeLifecycle_NODE_LIFECYCLE_STOPPED && n.StopReason != nil
	})
	require.Equal(t, managerpb.NodeStopping_CREATE_FAILED, nodeOf(t, c, "aws-f").GetStopReason())
	_, err = c.TerminateNode(ctx, &commonpb.NodeId{NodeId: "aws-f"})
	require.NoError(t, err)
	require.Equal(t, managerpb.NodeStopping_CREATE_FAILED, nodeOf(t, c, "aws-f").GetStopReason())
}

// TestCloud_AWSMissingGroupFailsCreate (issue 21 §9): a node naming a
// security group that does not exist in its region fails CREATE_FAILED
// without calling RunInstances; its error names the group and the region
// (what the placement engine reads to keep the group out instead of
// backing the offering off), and the log says no instance was launched
// rather than "terminating its instance".
func TestCloud_AWSMissingGroupFailsCreate(t *testing.T) {
	emu := ec2emu.Start(t, ec2emu.Options{LaunchTemplates: []ec2emu.LaunchTemplate{{ID: "lt-0123456789abcdef0", Name: "norsk-worker", Versions: 1}},
		SecurityGroups: []ec2emu.SecurityGroup{{Name: "base"}}})
	var logs syncBuffer
	cfg := DevConfig(t.TempDir())
	cfg.Store.SyncWrites, cfg.Store.GCInterval = false, 0
	cfg.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	cfg.Node.Providers = map[managerpb.NodeProvider]providers.Provider{
		managerpb.NodeProvider_NODE_PROVIDER_AWS: providers.NewAWS(providers.AWSConfig{Base: emu.Config(), Endpoint: emu.URL()}),
	}
	cfg.Node.CloudPollInterval = 20 * time.Millisecond
	_, c := startAgentWith(t, cfg)
	req := awsNode("aws-sg")
	req.ExtraSecurityGroups = []string{"base", "typo"}
	_, err := c.CreateAwsNode(context.Background(), req)
	require.NoError(t, err)
	eventually(t, "node stopped", func() bool {
		return nodeOf(t, c, "aws-sg").GetState() == managerpb.NodeLifecycle_NODE_LIFECYCLE_STOPPED
	})
	require.Equal(t, managerpb.NodeStopping_CREATE_FAILED, nodeOf(t, c, "aws-sg").GetStopReason())
	require.Zero(t, emu.Calls(ec2emu.ActionRunInstances))
	out := logs.String()
	require.Contains(t, out, `providers: security group not found: \"typo\" in region `+ec2emu.DefaultRegion)
	require.Contains(t, out, "cloud node failed before an instance was launched")
	require.NotContains(t, out, "terminating its instance")
	eventually(t, "the node's cloud work ends", func() bool {
		return strings.Contains(logs.String(), "no instance was launched for the node; nothing to terminate")
	})
	require.NotContains(t, logs.String(), "instance terminated")
}

// syncBuffer is a bytes.Buffer safe for concurrent log writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
