package placement

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/norsk-oss/norsk-manager/actors"
	"github.com/norsk-oss/norsk-manager/persistence"
	"github.com/norsk-oss/norsk-manager/proto/commonpb"
	"github.com/norsk-oss/norsk-manager/proto/errorpb"
	"github.com/norsk-oss/norsk-manager/proto/internalpb"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
)

// fakeNodes plays the node grains and the mock pool for the provisioning
// tests: a create records the node STARTING with the engine's mark (once
// per node id), SetIdle and a release write the record as the node grain
// does.
type fakeNodes struct {
	f       *fixture
	mu      sync.Mutex
	creates map[string]int
	pops    int
	// released holds the nodes released, in order.
	released []string
	// cloud holds the cloud creates, in order.
	cloud []*internalpb.CreateCloudNode
}

func (n *fakeNodes) request(_ context.Context, kind, id string, cmd proto.Message) (*internalpb.Reply, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if kind == actors.KindPool {
		n.pops++
		return &internalpb.Reply{Payload: &internalpb.Reply_MockUrl{MockUrl: fmt.Sprintf("127.0.0.1:%d", 7000+n.pops)}}, nil
	}
	if kind != actors.KindNode {
		return nil, errors.New("fake nodes: unexpected kind " + kind)
	}
	c := cmd.(*internalpb.NodeCommand)
	rec := n.node(id)
	switch x := c.GetCmd().(type) {
	case *internalpb.NodeCommand_CreateMock:
		if rec != nil {
			return actors.Fail(errorpb.Code_ALREADY_EXISTS, "node %q already exists", id), nil
		}
		if n.creates == nil {
			n.creates = map[string]int{}
		}
		n.creates[id]++
		rec = &internalpb.NodeRecord{NodeId: id, Provider: managerpb.NodeProvider_NODE_PROVIDER_MOCK, State: managerpb.NodeLifecycle_NODE_LIFECYCLE_STARTING,
			MockUrl: x.CreateMock.GetUrl(), Provisioned: x.CreateMock.GetProvisioned(),
			Metadata: &commonpb.NodeMetadata{NodeId: &commonpb.NodeId{NodeId: id}, Tags: x.CreateMock.GetTags(), CreatedAt: timestamppb.New(n.f.now)}}
	case *internalpb.NodeCommand_CreateCloud:
		if rec != nil {
			return actors.Fail(errorpb.Code_ALREADY_EXISTS, "node %q already exists", id), nil
		}
		if n.creates == nil {
			n.creates = map[string]int{}
		}
		n.creates[id]++
		n.cloud = append(n.cloud, x.CreateCloud)
		rec = &internalpb.NodeRecord{NodeId: id, Provider: managerpb.NodeProvider_NODE_PROVIDER_AWS, State: managerpb.NodeLifecycle_NODE_LIFECYCLE_STARTING,
			Provisioned: x.CreateCloud.GetProvisioned(), Metadata: &commonpb.NodeMetadata{NodeId: &commonpb.NodeId{NodeId: id}, CreatedAt: timestamppb.New(n.f.now)}}
		if x.CreateCloud.GetOci() != nil {
			rec.Provider = managerpb.NodeProvider_NODE_PROVIDER_OCI
		}
	case *internalpb.NodeCommand_SetIdle:
		rec.IdleSince = x.SetIdle.GetSince()
	case *internalpb.NodeCommand_Terminate:
		if !proto.Equal(rec.GetIdleSince(), x.Terminate.GetReleaseIdleSince()) {
			return actors.Fail(errorpb.Code_FAILED_PRECONDITION, "idle since differs"), nil
		}
		rec.State = managerpb.NodeLifecycle_NODE_LIFECYCLE_STOPPED
		n.released = append(n.released, id)
	default:
		return actors.Fail(errorpb.Code_INVALID_ARGUMENT, "fake nodes: unexpected %T", c.GetCmd()), nil
	}
	n.f.put(persistence.NodeKey(id), rec)
	return actors.OK(), nil
}

func (n *fakeNodes) node(id string) *internalpb.NodeRecord {
	var rec *internalpb.NodeRecord
	if err := n.f.store.View(func(r *persistence.Reader) error {
		var err error
		rec, _, err = r.Node(id)
		return err
	}); err != nil {
		return nil
	}
	return rec
}

// start marks node id STARTED with capacity units, as its worker's
// registration does.
func (n *fakeNodes) start(id string, capacity float64) {
	rec := n.node(id)
	rec.State = managerpb.NodeLifecycle_NODE_LIFECYCLE_STARTED
	rec.Resources = &commonpb.NodeResources{Capacity: capacity}
	n.f.put(persistence.NodeKey(id), rec)
}

func newProvisionFixture(t *testing.T) (*fixture, *fakeNodes) {
	f := newFixture(t)
	n := &fakeNodes{f: f}
	f.router.other = n.request
	f.putPool("elastic", 5, 600, &managerpb.PoolTier{Name: "mock", MaxNodes: 2, LingerSeconds: 60,
		Provisioner: &managerpb.PoolTier_Mock{Mock: &managerpb.MockTierProvisioner{Offering: &managerpb.TierInstanceType{Capacity: 8}}}})
	return f, n
}

// TestEngine_Provision_CreatePlaceRelease: three waiting jobs get one new
// node (not one per pass), are placed on it when it starts, and the node
// is released after its linger once they stopped, counted from the idle
// instant in its record even across a new engine (leader change).
func TestEngine_Provision_CreatePlaceRelease(t *testing.T) {
	f, n := newProvisionFixture(t)
	for _, id := range []string{"a", "b", "c"} {
		f.putJob(autoJob(id, 2, map[string]string{persistence.PoolTag: "elastic"}))
	}
	f.pass()
	f.pass() // the node is being created: room coming, no second create
	require.Equal(t, map[string]int{"elastic-mock-1": 1}, n.creates)
	rec := n.node("elastic-mock-1")
	require.Equal(t, []string{"a/primary", "b/primary", "c/primary"}, rec.GetProvisioned().GetForJobs())
	require.Equal(t, "mock@", rec.GetProvisioned().GetOffering())
	require.Equal(t, "elastic", rec.GetMetadata().GetTags()["norsk-provisioned-pool"])
	u, ok := f.eng.LastFailure("a", "primary")
	require.True(t, ok)
	require.Contains(t, u.Reason, "node elastic-mock-1 is being created for it")

	n.start("elastic-mock-1", 8)
	f.pass()
	for _, id := range []string{"a", "b", "c"} {
		require.Equal(t, "elastic-mock-1", f.nodeOf(id, "primary"), "job %s", id)
	}
	f.pass()
	require.Nil(t, n.node("elastic-mock-1").GetIdleSince(), "a node running jobs is not idle")

	for _, id := range []string{"a", "b", "c"} {
		f.endInstance(f.job(id), "primary", managerpb.JobHistoryJobStopping_JOB_STOPPED_USER_REQUESTED, "")
		j := f.job(id)
		j.Job.Job.State = managerpb.Job_POST
		f.putJob(j)
	}
	f.pass()
	idle := n.node("elastic-mock-1").GetIdleSince()
	require.NotNil(t, idle)
	require.True(t, idle.AsTime().Equal(f.now))

	f.now = f.now.Add(59 * time.Second)
	f.pass()
	require.Empty(t, n.released, "released before its linger")

	// A new leader: the linger counts from the record, not from its start.
	cfg := f.eng.cfg
	e2, err := New(cfg)
	require.NoError(t, err)
	f.eng = e2
	f.now = f.now.Add(time.Second)
	f.pass()
	require.Equal(t, []string{"elastic-mock-1"}, n.released)
	require.Equal(t, 1, n.creates["elastic-mock-1"])
}

// TestEngine_Provision_MaxNodes: jobs that need more than max_nodes nodes
// get max_nodes nodes; the rest wait.
func TestEngine_Provision_MaxNodes(t *testing.T) {
	f, n := newProvisionFixture(t)
	for _, id := range []string{"a", "b", "c"} {
		f.putJob(autoJob(id, 6, map[string]string{persistence.PoolTag: "elastic"}))
	}
	f.pass()
	f.pass()
	require.Equal(t, map[string]int{"elastic-mock-1": 1, "elastic-mock-2": 1}, n.creates)
	u, ok := f.eng.LastFailure("c", "primary")
	require.True(t, ok)
	require.Contains(t, u.Reason, "tier mock: at max_nodes (2)")
}

// TestEngine_Provision_HandMadeNodeNeverReleased: an idle node the engine
// did not create is neither marked idle nor terminated.
func TestEngine_Provision_HandMadeNodeNeverReleased(t *testing.T) {
	f, n := newProvisionFixture(t)
	f.putNode("slot-1", 8, "z1", nil)
	f.pass()
	f.now = f.now.Add(time.Hour)
	f.pass()
	require.Empty(t, n.released)
	require.Nil(t, n.node("slot-1").GetIdleSince())
}

// TestEngine_Provision_CloudRequests: the create of an AWS tier's node
// names the offering's instance type and zone, the template, the tier's
// and the jobs' security groups and the node's tags; an OCI tier's names
// the availability domain, shape, subnet and architecture.
func TestEngine_Provision_CloudRequests(t *testing.T) {
	f := newFixture(t)
	n := &fakeNodes{f: f}
	f.router.other = n.request
	tmpl := &managerpb.AwsLaunchTemplate{Template: &managerpb.AwsLaunchTemplate_Name{Name: "norsk-worker"}}
	f.putPool("cloud", 5, 600, &managerpb.PoolTier{Name: "aws", NodeSelector: map[string]string{"cloud": "aws"},
		Provisioner: &managerpb.PoolTier_Aws{Aws: &managerpb.AwsTierProvisioner{Region: "eu-west-2", AvailabilityZones: []string{"eu-west-2b"},
			Template: tmpl, InstanceTypes: []*managerpb.TierInstanceType{{InstanceType: "c6i.large", Capacity: 4}},
			ExtraSecurityGroups: []string{"base"}, Tags: map[string]string{"team": "live"}}}})
	f.putPool("oracle", 5, 600, &managerpb.PoolTier{Name: "oci",
		Provisioner: &managerpb.PoolTier_Oci{Oci: &managerpb.OciTierProvisioner{AvailabilityDomains: []string{"AD-2"},
			Shape: &managerpb.TierInstanceType{InstanceType: "VM.Standard.E4.Flex", Capacity: 4}, Subnet: "ocid1.subnet.x", Architecture: "aarch64"}}})
	j := autoJob("sg", 1, map[string]string{persistence.PoolTag: "cloud"})
	j.Job.Job.ExtraSecurityGroups = []string{"srt"}
	f.putJob(j)
	f.putJob(autoJob("o", 1, map[string]string{persistence.PoolTag: "oracle"}))
	f.pass()
	require.Len(t, n.cloud, 2)
	var aws *managerpb.CreateAwsNodeRequest
	var oci *managerpb.CreateOciNodeRequest
	for _, c := range n.cloud {
		if c.GetAws() != nil {
			aws = c.GetAws()
		} else {
			oci = c.GetOci()
		}
	}
	require.NotNil(t, aws)
	require.Equal(t, "cloud-aws-1", aws.GetNodeId().GetNodeId())
	require.Equal(t, "c6i.large", aws.GetInstanceType())
	require.Equal(t, "eu-west-2b", aws.GetAvailabilityZone())
	require.Equal(t, "eu-west-2", aws.GetRegion())
	require.True(t, proto.Equal(tmpl, aws.GetTemplate()))
	require.Equal(t, []string{"base", "srt"}, aws.GetExtraSecurityGroups())
	require.Equal(t, map[string]string{"team": "live", "cloud": "aws", "norsk-provisioned-pool": "cloud", "norsk-provisioned-tier": "aws"}, aws.GetTags())
	require.NotNil(t, oci)
	require.Equal(t, "oracle-oci-1", oci.GetNodeId().GetNodeId())
	require.Equal(t, "AD-2", oci.GetAvailabilityDomain())
	require.Equal(t, "VM.Standard.E4.Flex", oci.GetShape())
	require.Equal(t, "ocid1.subnet.x", oci.GetSubnet())
	require.Equal(t, "aarch64", oci.GetArchitecture())
}
