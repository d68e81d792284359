package scheduler

import "github.com/norsk-oss/norsk-manager/proto/managerpb"

// attributeFilter removes nodes whose attribute differs from the job's
// constraint of the same name (architecture, shape, availabilityDomain,
// subnet: issue 11 §3; the cloud has cloudFilter). It is in the chain only when the
// job sets the constraint; an unknown (empty) node attribute never matches.
type attributeFilter struct {
	filterName string
	value      string
	get        func(*Node) string
}

func (f attributeFilter) name() string { return f.filterName }
func (attributeFilter) kind() Kind     { return KindConstraint }
func (f attributeFilter) want() string { return f.value }

func (f attributeFilter) check(c *candidate) (bool, string) {
	return f.get(c.node) == f.value, ""
}

// constraintFilters returns one attributeFilter per constraint the job sets,
// in the order of the Filter* constants.
func constraintFilters(k Constraints) []filter {
	var fs []filter
	if k.Cloud != managerpb.Cloud_CLOUD_UNSPECIFIED {
		fs = append(fs, cloudFilter{cloud: k.Cloud})
	}
	add := func(name, value string, get func(*Node) string) {
		if value != "" {
			fs = append(fs, attributeFilter{name, value, get})
		}
	}
	add(FilterArchitecture, k.Architecture, func(n *Node) string { return n.Architecture })
	add(FilterShape, k.Shape, func(n *Node) string { return n.Shape })
	add(FilterAvailabilityDomain, k.AvailabilityDomain, func(n *Node) string { return n.AvailabilityDomain })
	add(FilterSubnet, k.Subnet, func(n *Node) string { return n.Subnet })
	return fs
}

// cloudFilter removes nodes on another cloud than the job's (or an unknown
// one). It compares the enum, not its name, as it runs once per node.
type cloudFilter struct {
	cloud managerpb.Cloud
}

func (cloudFilter) name() string   { return FilterCloud }
func (cloudFilter) kind() Kind     { return KindConstraint }
func (f cloudFilter) want() string { return f.cloud.String() }

func (f cloudFilter) check(c *candidate) (bool, string) {
	return c.node.Cloud == f.cloud, ""
}
