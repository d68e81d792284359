package node

import (
	"github.com/norsk-oss/norsk-manager/proto/commonpb"
	"github.com/norsk-oss/norsk-manager/proto/internalpb"
	"github.com/norsk-oss/norsk-manager/proto/noderesources"
)

// takeResources puts what a worker's hello says it offers (its --capacity,
// --zone… flags) into next, the record about to be committed with the
// session, replacing what was stored: a worker restarted with new flags
// updates the node at its next session. A hello without resources (a
// worker that predates them) keeps the stored value; one that breaks the
// rules of noderesources.Validate is ignored with a warning (the session
// is not refused for it: the jobs the worker runs matter more).
func (g *grain) takeResources(next *internalpb.NodeRecord, r *commonpb.NodeResources) {
	if r == nil {
		return
	}
	if err := noderesources.Validate(r); err != nil {
		g.log.Warn("ignoring the resources the worker reported; keeping the stored ones", "error", err)
		return
	}
	next.Resources = r
}

// Zone is the failure domain of the node rec describes
// (noderesources.Zone): an OCI node's availability domain, else its
// worker's --zone, else its "zone" tag; "" if unknown.
func Zone(rec *internalpb.NodeRecord) string {
	var ociAD string
	if oci := rec.GetCloud().GetOci(); oci != nil {
		ociAD = oci.GetAvailabilityDomain()
	}
	return noderesources.Zone(rec.GetProvider(), ociAD, rec.GetResources().GetZone(), rec.GetMetadata().GetTags())
}

// Facts is what a node is, as the placement engine's architecture, shape,
// availabilityDomain and subnet filters see it (issue 11 §3) and ListNodes
// shows it. An empty field is unknown: a job constrained on it is never
// placed on the node.
type Facts struct {
	// Architecture is noderesources.ArchX86_64 or ArchAarch64.
	Architecture string
	// Shape is the instance type (AWS) or shape (OCI), or what the
	// operator calls the machine.
	Shape string
	// AvailabilityDomain is the node's zone (Zone): the OCI availability
	// domain, the AWS availability zone, a cluster slot's zone.
	AvailabilityDomain string
	Subnet             string
	// Cores are the core ids the worker offers to pinned jobs, ascending.
	Cores []uint32
}

// FactsOf resolves the facts of the node rec describes, each from the
// first source that sets it (docs/design/nodes-capacity.md §4):
//   - architecture: the worker's report (the binary runs on the machine),
//     else an OCI create request's, else the hardware a cluster worker
//     registered with;
//   - shape: the create request's (AWS instance_type, OCI shape: what the
//     manager asked the cloud for), else the worker's --shape, else the
//     node's "shape" tag;
//   - subnet: an OCI create request's, else the worker's --subnet, else
//     the "subnet" tag (an AWS node's subnet comes from its launch
//     template, which the manager does not read: --subnet or the tag);
//   - availability domain: Zone;
//   - cores: the worker's report.
func FactsOf(rec *internalpb.NodeRecord) Facts {
	res, tags := rec.GetResources(), rec.GetMetadata().GetTags()
	aws, oci := rec.GetCloud().GetAws(), rec.GetCloud().GetOci()
	var arch string
	if res != nil && res.Architecture != nil {
		arch = noderesources.ArchitectureName(res.GetArchitecture())
	}
	var hwArch string
	if hw := rec.GetHardware(); hw != nil {
		hwArch = noderesources.ArchitectureName(hw.GetArchitecture())
	}
	return Facts{
		Architecture:       noderesources.FirstSet(arch, noderesources.NormalizeArchitecture(oci.GetArchitecture()), hwArch),
		Shape:              noderesources.FirstSet(aws.GetInstanceType(), oci.GetShape(), res.GetShape(), tags[noderesources.ShapeTag]),
		AvailabilityDomain: Zone(rec),
		Subnet:             noderesources.FirstSet(oci.GetSubnet(), res.GetSubnet(), tags[noderesources.SubnetTag]),
		Cores:              res.GetCores(),
	}
}
