package scheduler

import "strings"

// FilterSecurityGroups is the name of the security-groups filter (issue
// 13 §1: a job with extraSecurityGroups runs only on a node whose instance
// has them).
const FilterSecurityGroups = "security_groups"

// securityGroupsFilter removes nodes whose instance lacks one of the job's
// extra security groups (Job.extra_security_groups, compared by name as
// the job and the node's create request name them). A node that is not a
// cloud instance has none, so such a job never goes there: the groups are
// the network access the job was promised (placement.md, "Provisioning
// and release"). The reason names the first group missing.
type securityGroupsFilter struct {
	groups []string
}

func (securityGroupsFilter) name() string   { return FilterSecurityGroups }
func (securityGroupsFilter) kind() Kind     { return KindConstraint }
func (f securityGroupsFilter) want() string { return strings.Join(f.groups, ", ") }

func (f securityGroupsFilter) check(c *candidate) (bool, string) {
	for _, g := range f.groups {
		if !contains(c.node.SecurityGroups, g) {
			return false, "missing " + g
		}
	}
	return true, ""
}
