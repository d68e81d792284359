package provisioner

import (
	"maps"

	"github.com/norsk-oss/norsk-manager/proto/managerpb"
)

// Offering is one thing a tier's provisioner can create: an instance type
// (OCI shape, "mock") in a zone (AWS availability zone, OCI availability
// domain; "" lets the region choose), and what a node of it offers.
type Offering struct {
	Provider     managerpb.NodeProvider
	InstanceType string
	Zone         string
	// Location is where the provider's health is kept: the AWS region or
	// the OCI availability domain ("" for the mock provider).
	Location string
	// Capacity and GPU are the reference units a node of it offers.
	Capacity float64
	GPU      float64
}

// Name is "<instance type>@<zone>", as node records and pool get show it.
func (o Offering) Name() string { return o.InstanceType + "@" + o.Zone }

// Offerings returns the offerings of tier t in the order they are tried:
// for AWS every zone of the first instance type, then of the next (the
// operator lists types cheapest first; a zone without capacity moves on to
// the same type elsewhere before a dearer one); for OCI the shape in each
// availability domain; the mock provider's one offering. Nil for a tier
// without a provisioner.
func Offerings(t *managerpb.PoolTier) []Offering {
	switch p := t.GetProvisioner().(type) {
	case *managerpb.PoolTier_Aws:
		zones := p.Aws.GetAvailabilityZones()
		if len(zones) == 0 {
			zones = []string{""}
		}
		var out []Offering
		for _, it := range p.Aws.GetInstanceTypes() {
			for _, z := range zones {
				out = append(out, Offering{Provider: managerpb.NodeProvider_NODE_PROVIDER_AWS, InstanceType: it.GetInstanceType(), Zone: z,
					Location: p.Aws.GetRegion(), Capacity: float64(it.GetCapacity()), GPU: float64(it.GetGpuCapacity())})
			}
		}
		return out
	case *managerpb.PoolTier_Oci:
		s := p.Oci.GetShape()
		var out []Offering
		for _, ad := range p.Oci.GetAvailabilityDomains() {
			out = append(out, Offering{Provider: managerpb.NodeProvider_NODE_PROVIDER_OCI, InstanceType: s.GetInstanceType(), Zone: ad,
				Location: ad, Capacity: float64(s.GetCapacity()), GPU: float64(s.GetGpuCapacity())})
		}
		return out
	case *managerpb.PoolTier_Mock:
		o := p.Mock.GetOffering()
		return []Offering{{Provider: managerpb.NodeProvider_NODE_PROVIDER_MOCK, InstanceType: "mock",
			Capacity: float64(o.GetCapacity()), GPU: float64(o.GetGpuCapacity())}}
	}
	return nil
}

// NodeTags are the tags of a node created for tier t: the provisioner's
// tags, then the tier's node_selector (so the node is in the tier whatever
// the provisioner's tags say), then PoolTag and TierTag.
func NodeTags(pool string, t *managerpb.PoolTier) map[string]string {
	tags := map[string]string{}
	switch p := t.GetProvisioner().(type) {
	case *managerpb.PoolTier_Aws:
		maps.Copy(tags, p.Aws.GetTags())
	case *managerpb.PoolTier_Oci:
		maps.Copy(tags, p.Oci.GetTags())
	case *managerpb.PoolTier_Mock:
		maps.Copy(tags, p.Mock.GetTags())
	}
	maps.Copy(tags, t.GetNodeSelector())
	tags[PoolTag], tags[TierTag] = pool, t.GetName()
	return tags
}

// The tags of an engine-created node naming its pool and tier, for
// operators (the record's Provisioned field is what the engine reads).
const (
	PoolTag = "norsk-provisioned-pool"
	TierTag = "norsk-provisioned-tier"
)
