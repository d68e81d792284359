package scheduler

import "strings"

// FilterNode is the name of the node filter: the nodes a move may go to
// (Ask.Nodes, Ask.ExcludeNodes).
const FilterNode = "node"

// nodesFilter keeps only the nodes in only (when set) and removes those in
// exclude: a make-before-break move goes to the node an operator named, or
// anywhere but its source (docs/design/placement.md, "Moves").
type nodesFilter struct {
	only, exclude []NodeID
}

func (nodesFilter) name() string { return FilterNode }
func (nodesFilter) kind() Kind   { return KindConstraint }

func (f nodesFilter) want() string {
	if len(f.only) == 0 {
		return ""
	}
	ids := make([]string, len(f.only))
	for i, id := range f.only {
		ids[i] = string(id)
	}
	return strings.Join(ids, ",")
}

func (f nodesFilter) check(c *candidate) (bool, string) {
	switch {
	case contains(f.exclude, c.node.ID):
		return false, "the move's source"
	case len(f.only) > 0 && !contains(f.only, c.node.ID):
		return false, "not the node asked for"
	}
	return true, ""
}
