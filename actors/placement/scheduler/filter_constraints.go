package scheduler

import "github.com/norsk-oss/norsk-manager/proto/managerpb"

// attributeFilter removes nodes whose attribute differs from the job's
// constraint of the same name (cloud, architecture, shape,
// availabilityDomain, subnet: issue 11 §3). It is in the chain only when the
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
		fs = append(fs, attributeFilter{FilterCloud, k.Cloud.String(), func(n *Node) string {
			if n.Cloud == managerpb.Cloud_CLOUD_UNSPECIFIED {
				return ""
			}
			return n.Cloud.String()
		}})
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
