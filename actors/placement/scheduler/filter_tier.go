package scheduler

import "fmt"

// tierFilter removes nodes in no tier of the pool: a node belongs to a tier
// when it carries every tag of the tier's selector (issue 11 §2). It records
// the cheapest tier a node belongs to, which ranks it. With no tiers every
// node is in tier 0.
type tierFilter struct {
	pool  string
	tiers []Tier
	// selectors[i] is tiers[i].Selector as pairs, built once per decision:
	// looking each pair up in the node's tags is cheaper than ranging over
	// a map per node.
	selectors [][]tag
}

type tag struct{ key, value string }

func newTierFilter(pool string, tiers []Tier) *tierFilter {
	f := &tierFilter{pool: pool, tiers: tiers, selectors: make([][]tag, len(tiers))}
	for i, t := range tiers {
		for k, v := range t.Selector {
			f.selectors[i] = append(f.selectors[i], tag{k, v})
		}
	}
	return f
}

func (*tierFilter) name() string { return FilterTier }
func (*tierFilter) kind() Kind   { return KindConstraint }

func (f *tierFilter) want() string {
	if f.pool == "" {
		return ""
	}
	return fmt.Sprintf("a tier of pool %s", f.pool)
}

func (f *tierFilter) check(c *candidate) (bool, string) {
	if len(f.tiers) == 0 {
		c.tier = 0
		return true, ""
	}
	for i, sel := range f.selectors {
		if hasTags(c.node.Tags, sel) {
			c.tier = i
			return true, ""
		}
	}
	return false, ""
}

// hasTags reports whether tags carries every pair of selector.
func hasTags(tags map[string]string, selector []tag) bool {
	for _, t := range selector {
		if got, ok := tags[t.key]; !ok || got != t.value {
			return false
		}
	}
	return true
}
