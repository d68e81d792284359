package scheduler

import "math"

// schedulableFilter removes nodes that take no new placements: offline,
// cordoned, draining, stopping (issue 11 §3), and nodes whose record has
// impossible values (negative or non-finite capacity, core ids out of
// range; NewView has sorted the ids), which the view keeps so the explanation can show them.
type schedulableFilter struct{}

func (schedulableFilter) name() string { return FilterSchedulable }
func (schedulableFilter) kind() Kind   { return KindConstraint }
func (schedulableFilter) want() string { return "" }

func (schedulableFilter) check(c *candidate) (bool, string) {
	n := c.node
	switch {
	case !validAmount(n.Capacity) || !validAmount(n.GPUCapacity) || !validCores(n.Cores):
		return false, "invalid record"
	case n.Stopping:
		return false, "stopping"
	case !n.Online:
		return false, "offline"
	case n.Draining:
		return false, "draining"
	case n.Cordoned:
		return false, "cordoned"
	}
	return true, ""
}

// validAmount reports whether x is a finite amount ≥ 0.
func validAmount(x float64) bool {
	return !math.IsNaN(x) && !math.IsInf(x, 0) && x >= 0
}
