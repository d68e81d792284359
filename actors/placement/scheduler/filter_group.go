package scheduler

import (
	"fmt"
	"sort"
	"strings"
)

// coLocateFilter keeps only the node the placed jobs of the co_locate_with
// group run on (issue 11 §3: the named jobs of one replica go to one node).
// If the placed members are already on different nodes no node fits, and
// the reason says so.
type coLocateFilter struct {
	node  NodeID
	split string
	// job is a placed member on node, for the reason.
	job JobID
}

// newCoLocateFilter returns the filter, and false if no member of the group
// is placed (then the group goes wherever it fits).
func newCoLocateFilter(v *View, group []JobID) (coLocateFilter, bool) {
	var nodes []NodeID
	f := coLocateFilter{}
	for _, j := range sortedJobs(group) {
		for _, n := range v.jobNodes[j] {
			if !contains(nodes, n) {
				nodes = append(nodes, n)
				if len(nodes) == 1 {
					f.node, f.job = n, j
				}
			}
		}
	}
	if len(nodes) == 0 {
		return f, false
	}
	if len(nodes) > 1 {
		sort.Slice(nodes, func(i, j int) bool { return nodes[i] < nodes[j] })
		parts := make([]string, len(nodes))
		for i, n := range nodes {
			parts[i] = string(n)
		}
		f.split = "group already split across nodes " + strings.Join(parts, ", ")
	}
	return f, true
}

func (coLocateFilter) name() string { return FilterCoLocate }
func (coLocateFilter) kind() Kind   { return KindConstraint }

func (f coLocateFilter) want() string {
	if f.split != "" {
		return ""
	}
	return fmt.Sprintf("node %s", f.node)
}

func (f coLocateFilter) check(c *candidate) (bool, string) {
	if f.split != "" {
		return false, f.split
	}
	if c.node.ID != f.node {
		return false, fmt.Sprintf("%s runs on %s", f.job, f.node)
	}
	return true, ""
}

// separateFilter removes the nodes the separate_from jobs run on (issue 11
// §3: different nodes). The reason names the job found there.
type separateFilter struct {
	// on maps a node to the first separate_from job (in id order) on it.
	on map[NodeID]JobID
}

// newSeparateFilter returns the filter, and false if none of the jobs is
// placed.
func newSeparateFilter(v *View, jobs []JobID) (separateFilter, bool) {
	f := separateFilter{on: map[NodeID]JobID{}}
	for _, j := range sortedJobs(jobs) {
		for _, n := range v.jobNodes[j] {
			if _, seen := f.on[n]; !seen {
				f.on[n] = j
			}
		}
	}
	return f, len(f.on) > 0
}

func (separateFilter) name() string { return FilterSeparate }
func (separateFilter) kind() Kind   { return KindConstraint }
func (separateFilter) want() string { return "" }

func (f separateFilter) check(c *candidate) (bool, string) {
	if j, ok := f.on[c.node.ID]; ok {
		return false, fmt.Sprintf("%s runs there", j)
	}
	return true, ""
}

func sortedJobs(jobs []JobID) []JobID {
	out := append([]JobID(nil), jobs...)
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}
