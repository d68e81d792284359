package placement

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/norsk-oss/norsk-manager/persistence"
	"github.com/norsk-oss/norsk-manager/proto/commonpb"
	"github.com/norsk-oss/norsk-manager/proto/internalpb"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
)

// TestEngine_NodeFactsFilters: a job's architecture, shape,
// availabilityDomain and subnet constraints are matched against what the
// records say the nodes are (node.FactsOf: the cloud's create request, the
// worker's report, the node's tags), through the engine's own view.
func TestEngine_NodeFactsFilters(t *testing.T) {
	f := newFixture(t)
	x86 := commonpb.Architecture_X86_64
	started := managerpb.NodeLifecycle_NODE_LIFECYCLE_STARTED
	meta := func(id string, tags map[string]string) *commonpb.NodeMetadata {
		return &commonpb.NodeMetadata{NodeId: &commonpb.NodeId{NodeId: id}, Tags: tags}
	}
	// An OCI node: everything from its create request; its (old) worker
	// reports no architecture.
	f.put(persistence.NodeKey("oci1"), &internalpb.NodeRecord{NodeId: "oci1", Provider: managerpb.NodeProvider_NODE_PROVIDER_OCI,
		State: started, Metadata: meta("oci1", nil), Resources: &commonpb.NodeResources{Capacity: 10},
		Cloud: &internalpb.CloudNode{Request: &internalpb.CloudNode_Oci{Oci: &managerpb.CreateOciNodeRequest{
			AvailabilityDomain: "Uocm:PHX-AD-1", Architecture: "arm64", Shape: "VM.Standard.A1.Flex", Subnet: "ocid1.subnet.a"}}}})
	// An AWS node: the instance type from its request (the worker's
	// --shape loses), the zone and subnet from its worker's flags.
	f.put(persistence.NodeKey("aws1"), &internalpb.NodeRecord{NodeId: "aws1", Provider: managerpb.NodeProvider_NODE_PROVIDER_AWS,
		State: started, Metadata: meta("aws1", nil),
		Resources: &commonpb.NodeResources{Capacity: 10, Zone: "eu-west-1a", Subnet: "subnet-1", Shape: "claimed", Architecture: &x86},
		Cloud:     &internalpb.CloudNode{Request: &internalpb.CloudNode_Aws{Aws: &managerpb.CreateAwsNodeRequest{Region: "eu-west-1", InstanceType: "c6i.xlarge"}}}})
	// A cluster slot: shape from --shape, zone from --zone, subnet from its tag.
	f.put(persistence.NodeKey("slot1"), &internalpb.NodeRecord{NodeId: "slot1", Provider: managerpb.NodeProvider_NODE_PROVIDER_CLUSTER,
		State: started, Metadata: meta("slot1", map[string]string{"subnet": "lan-2"}),
		Resources: &commonpb.NodeResources{Capacity: 10, Zone: "rack-a", Shape: "bare-metal-32", Architecture: &x86}})
	// A slot that says nothing about itself.
	f.putNode("slot2", 10, "", nil)

	cases := []struct {
		job   string
		set   func(*managerpb.Job)
		want  string // "" = not placed
		fails string // part of the explanation when not placed
	}{
		{"arm", func(j *managerpb.Job) { j.Architecture = "aarch64" }, "oci1", ""},
		{"arm-alias", func(j *managerpb.Job) { j.Architecture = "ARM64" }, "oci1", ""},
		{"instance-type", func(j *managerpb.Job) { j.Shape = "c6i.xlarge" }, "aws1", ""},
		{"claimed-shape", func(j *managerpb.Job) { j.Shape = "claimed" }, "", "shape filtered 4 nodes"},
		{"oci-ad", func(j *managerpb.Job) { j.AvailabilityDomain = "Uocm:PHX-AD-1" }, "oci1", ""},
		{"slot-zone", func(j *managerpb.Job) { j.AvailabilityDomain = "rack-a" }, "slot1", ""},
		{"tag-subnet", func(j *managerpb.Job) { j.Subnet = "lan-2" }, "slot1", ""},
		{"oci-subnet", func(j *managerpb.Job) { j.Subnet = "ocid1.subnet.a" }, "oci1", ""},
		{"x86-in-subnet", func(j *managerpb.Job) { j.Architecture = "amd64"; j.Subnet = "subnet-1" }, "aws1", ""},
		{"slot-shape", func(j *managerpb.Job) { j.Shape = "bare-metal-32"; j.Architecture = "x86_64" }, "slot1", ""},
		{"riscv", func(j *managerpb.Job) { j.Architecture = "riscv64" }, "", "architecture filtered 4 nodes"},
	}
	for _, tc := range cases {
		rec := autoJob(tc.job, 0, nil)
		tc.set(rec.Job.Job)
		f.putJob(rec)
	}
	f.pass()
	for _, tc := range cases {
		got := f.nodeOf(tc.job, "primary")
		require.Equal(t, tc.want, got, "job %s", tc.job)
		if tc.want == "" {
			u, ok := f.eng.LastFailure(tc.job, "primary")
			require.True(t, ok, "job %s: no failure kept", tc.job)
			require.Contains(t, u.Reason, tc.fails, "job %s", tc.job)
		}
	}
}
