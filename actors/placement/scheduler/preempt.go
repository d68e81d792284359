package scheduler

import (
	"errors"
	"math/bits"
	"slices"
	"sort"
	"strings"
)

// Preemption is where an Ask goes once some placed instances are stopped
// (issue 13 §3: a HIGH priority job that fits no node stops LOW priority
// ones to make room).
type Preemption struct {
	// Decision is the placement on the node the victims leave, decided as
	// if they were gone (its cores may be theirs). Pass its Placed to
	// View.Add only once the victims are removed from the view.
	Decision Decision
	// Victims are the instances to stop first, all on Decision.Node,
	// sorted by job and role; empty when the Ask fits as the view stands.
	Victims []Placed
}

// maxExactVictims is the most candidate victims on one node for which
// SelectPreempting tries every subset (2^10 single-node checks); above it,
// it takes the biggest first and then gives back what is not needed.
const maxExactVictims = 10

// SelectPreempting decides where a goes if instances of victims (the ones
// the caller may stop: the engine passes the LOW priority instances; an
// entry the view does not hold on that node is ignored) are stopped
// first. On each node holding victims it finds the fewest of them, then
// the fewest units (capacity + GPU units + pinned cores), whose removal
// makes a pass every filter of the chain on that node — every constraint of
// the Ask is honoured, only room is made — and it chooses among the nodes
// the fewest victims, then the fewest units, then the usual ranking. The
// view is left as it was.
//
// If a fits as the view stands the result has no victims. Errors: as
// Select (ErrInvalidAsk, ErrAlreadyPlaced); a *Failure when no set of
// victims makes room, whose metrics are those of the view with every
// victim removed (what even stopping all of them would leave).
func (v *View) SelectPreempting(a Ask, victims []Placed) (Preemption, error) {
	d, err := v.Select(a)
	if err == nil {
		return Preemption{Decision: d}, nil
	}
	var f *Failure
	if !errors.As(err, &f) {
		return Preemption{}, err
	}
	byNode := v.victimsByNode(&a, victims)
	var best *preemptOption
	for _, i := range sortedKeys(byNode) {
		if o, ok := v.preemptOn(&a, i, byNode[i]); ok && (best == nil || o.less(best)) {
			best = &o
		}
	}
	if best == nil {
		if ferr := v.failureWithout(a, victims); ferr != nil {
			return Preemption{}, ferr
		}
		return Preemption{}, f
	}
	v.removeAll(best.victims)
	defer v.Add(best.victims...)
	d, err = v.Select(a)
	if err != nil {
		return Preemption{}, err // cannot happen: the node was just checked
	}
	return Preemption{Decision: d, Victims: best.victims}, nil
}

// preemptOption is one node's cheapest set of victims.
type preemptOption struct {
	victims []Placed
	cost    float64
	rank    rank
}

func (o *preemptOption) less(b *preemptOption) bool {
	switch {
	case len(o.victims) != len(b.victims):
		return len(o.victims) < len(b.victims)
	case o.cost != b.cost:
		return o.cost < b.cost
	}
	return o.rank.less(b.rank)
}

// victimCost is what stopping p takes off air, in units.
func victimCost(p Placed) float64 {
	return finiteOrZero(p.Capacity) + finiteOrZero(p.GPUCapacity) + float64(len(p.Cores))
}

// victimsByNode keeps the victims the view holds where they say, not the
// asked job or its co-located members, grouped by node index and sorted
// by job and role.
func (v *View) victimsByNode(a *Ask, victims []Placed) map[int][]Placed {
	asked := map[instanceKey]bool{{a.Job, a.Role}: true}
	for _, m := range a.CoLocated {
		asked[instanceKey{m.Job, m.Role}] = true
	}
	out := map[int][]Placed{}
	for _, p := range victims {
		k := instanceKey{p.Job, p.Role}
		held, ok := v.placed[k]
		i, known := v.index[p.Node]
		if !ok || !known || held.Node != p.Node || asked[k] {
			continue
		}
		out[i] = append(out[i], held)
	}
	for i := range out {
		sort.Slice(out[i], func(x, y int) bool { return placedLess(out[i][x], out[i][y]) })
		out[i] = slices.CompactFunc(out[i], func(x, y Placed) bool { return x.Job == y.Job && x.Role == y.Role })
	}
	return out
}

func placedLess(x, y Placed) bool {
	if c := strings.Compare(string(x.Job), string(y.Job)); c != 0 {
		return c < 0
	}
	return x.Role < y.Role
}

func sortedKeys(m map[int][]Placed) []int {
	keys := make([]int, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Ints(keys)
	return keys
}

// preemptOn returns the cheapest set of vs (victims on node i) whose
// removal lets a fit node i, and false if even all of them do not.
func (v *View) preemptOn(a *Ask, i int, vs []Placed) (preemptOption, bool) {
	if _, ok := v.fitsWithout(a, i, vs); !ok {
		return preemptOption{}, false
	}
	var set []Placed
	if len(vs) <= maxExactVictims {
		set = v.exactVictims(a, i, vs)
	} else {
		set = v.greedyVictims(a, i, vs)
	}
	r, _ := v.fitsWithout(a, i, set)
	o := preemptOption{victims: set, rank: r}
	for _, p := range set {
		o.cost += victimCost(p)
	}
	return o, true
}

// exactVictims tries every subset of vs by size, then cost, then order,
// and returns the first with which a fits node i (vs itself fits).
func (v *View) exactVictims(a *Ask, i int, vs []Placed) []Placed {
	masks := make([]uint, 0, 1<<len(vs)-1)
	cost := make([]float64, 1<<len(vs))
	for m := uint(1); m < 1<<len(vs); m++ {
		masks = append(masks, m)
		for j := range vs {
			if m&(1<<j) != 0 {
				cost[m] += victimCost(vs[j])
			}
		}
	}
	sort.SliceStable(masks, func(x, y int) bool {
		mx, my := masks[x], masks[y]
		if cx, cy := bits.OnesCount(mx), bits.OnesCount(my); cx != cy {
			return cx < cy
		}
		return cost[mx] < cost[my]
	})
	for _, m := range masks {
		var set []Placed
		for j := range vs {
			if m&(1<<j) != 0 {
				set = append(set, vs[j])
			}
		}
		if _, ok := v.fitsWithout(a, i, set); ok {
			return set
		}
	}
	return vs
}

// greedyVictims takes the costliest of vs first until a fits node i, then
// gives back, cheapest first, each one a does not need.
func (v *View) greedyVictims(a *Ask, i int, vs []Placed) []Placed {
	order := slices.Clone(vs)
	sort.SliceStable(order, func(x, y int) bool { return victimCost(order[x]) > victimCost(order[y]) })
	var set []Placed
	for _, p := range order {
		set = append(set, p)
		if _, ok := v.fitsWithout(a, i, set); ok {
			break
		}
	}
	for j := len(set) - 1; j >= 0; j-- {
		without := slices.Delete(slices.Clone(set), j, j+1)
		if _, ok := v.fitsWithout(a, i, without); ok {
			set = without
		}
	}
	sort.Slice(set, func(x, y int) bool { return placedLess(set[x], set[y]) })
	return set
}

// fitsWithout reports whether a passes every filter on node i with set
// removed from the view, and its rank there; the view is restored.
func (v *View) fitsWithout(a *Ask, i int, set []Placed) (rank, bool) {
	v.removeAll(set)
	defer v.Add(set...)
	n := needOf(a)
	fs := chain(v, a, n) // after the removal: separate_from and co_locate_with see it
	c := &candidate{node: &v.nodes[i], usage: &v.usage[i]}
	if !runChain(fs, make([]tally, len(fs)), c) {
		return rank{}, false
	}
	return rankOf(c, a, n), true
}

func (v *View) removeAll(set []Placed) {
	for _, p := range set {
		v.Remove(p.Job, p.Role)
	}
}

// failureWithout is the *Failure of a on the view with every victim it
// holds removed.
func (v *View) failureWithout(a Ask, victims []Placed) error {
	var all []Placed
	for _, vs := range v.victimsByNode(&a, victims) {
		all = append(all, vs...)
	}
	v.removeAll(all)
	defer v.Add(all...)
	_, err := v.Select(a)
	return err
}
