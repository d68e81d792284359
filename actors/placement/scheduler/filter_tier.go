package scheduler

import "fmt"

// tierFilter removes nodes in no tier of the pool: a node belongs to a tier
// when it carries every tag of the tier's selector (issue 11 §2). It records
// the cheapest tier a node belongs to, which ranks it. With no tiers every
// node is in tier 0.
type tierFilter struct {
	pool  string
	tiers []Tier
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
	for i := range f.tiers {
		if hasTags(c.node.Tags, f.tiers[i].Selector) {
			c.tier = i
			return true, ""
		}
	}
	return false, ""
}

// hasTags reports whether tags carries every key of selector with the same
// value.
func hasTags(tags, selector map[string]string) bool {
	for k, want := range selector {
		if got, ok := tags[k]; !ok || got != want {
			return false
		}
	}
	return true
}
