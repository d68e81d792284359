package scheduler

import (
	"errors"
	"math"
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
// SelectPreempting tries the subsets (by size, at most 2^10 of them); above
// it, it takes the biggest first and then gives back what is not needed.
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
	t := newTrial(v, &a)
	var best *preemptOption
	for _, i := range sortedKeys(byNode) {
		limit, maxCost := len(byNode[i]), math.Inf(1)
		if best != nil {
			// A node needing more victims, or as many but dearer, cannot win.
			limit, maxCost = len(best.victims), best.cost
		}
		if o, ok := v.preemptOn(t, i, byNode[i], limit, maxCost); ok && (best == nil || o.less(best)) {
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

// preemptOn returns the cheapest set of at most limit of vs (victims on
// node i; of exactly limit, costing at most maxCost) whose removal lets a
// fit node i, and false if there is none.
func (v *View) preemptOn(t *trial, i int, vs []Placed, limit int, maxCost float64) (preemptOption, bool) {
	if _, ok := v.fitsWithout(t, i, vs); !ok {
		return preemptOption{}, false
	}
	var set []Placed
	if len(vs) <= maxExactVictims {
		var ok bool
		if set, ok = v.exactVictims(t, i, vs, limit, maxCost); !ok {
			return preemptOption{}, false
		}
	} else {
		set = v.greedyVictims(t, i, vs)
	}
	r, _ := v.fitsWithout(t, i, set)
	o := preemptOption{victims: set, rank: r}
	for _, p := range set {
		o.cost += victimCost(p)
	}
	return o, true
}

// exactVictims tries the subsets of vs by size (from the least that could
// free enough units, up to limit), each size cheapest first, and returns
// the first with which a fits node i; false if none of at most limit
// victims does (at the size limit itself, none costing at most maxCost:
// the best other node's set).
func (v *View) exactVictims(t *trial, i int, vs []Placed, limit int, maxCost float64) ([]Placed, bool) {
	n := t.n
	free, gpuFree, _, _ := v.Free(v.nodes[i].ID)
	caps := make([]float64, len(vs))
	for j, p := range vs {
		caps[j] = finiteOrZero(p.Capacity)
	}
	type subset struct {
		mask uint
		cost float64
	}
	var subsets []subset
	for k := minVictims(caps, n.capacity-free); k <= min(limit, len(vs)); k++ {
		subsets = subsets[:0]
		// Gosper's hack: every mask of len(vs) bits with k bits set, in
		// increasing order.
		for m := uint(1)<<k - 1; m < 1<<len(vs); {
			var units, gpu, cost float64
			for j := range vs {
				if m&(1<<j) != 0 {
					units += caps[j]
					gpu += finiteOrZero(vs[j].GPUCapacity)
					cost += victimCost(vs[j])
				}
			}
			// Only a set freeing enough units can fit (the chain need not
			// run), and at the best size so far only one no dearer can win.
			if free+units+epsilon >= n.capacity && gpuFree+gpu+epsilon >= n.gpu && (k < limit || cost <= maxCost) {
				subsets = append(subsets, subset{m, cost})
			}
			c := m & -m
			r := m + c
			m = (((r ^ m) >> 2) / c) | r
		}
		sort.SliceStable(subsets, func(x, y int) bool { return subsets[x].cost < subsets[y].cost })
		for _, sub := range subsets {
			var set []Placed
			for j := range vs {
				if sub.mask&(1<<j) != 0 {
					set = append(set, vs[j])
				}
			}
			if _, ok := v.fitsWithout(t, i, set); ok {
				return set, true
			}
		}
	}
	return nil, false
}

// minVictims is the least number of the units caps whose sum covers
// deficit (the biggest first); at least 1.
func minVictims(caps []float64, deficit float64) int {
	sorted := slices.Clone(caps)
	slices.Sort(sorted)
	k, sum := 0, 0.0
	for j := len(sorted) - 1; j >= 0 && sum+epsilon < deficit; j-- {
		sum += sorted[j]
		k++
	}
	return max(k, 1)
}

// greedyVictims takes the costliest of vs first until a fits node i, then
// gives back, cheapest first, each one a does not need.
func (v *View) greedyVictims(t *trial, i int, vs []Placed) []Placed {
	order := slices.Clone(vs)
	sort.SliceStable(order, func(x, y int) bool { return victimCost(order[x]) > victimCost(order[y]) })
	var set []Placed
	for _, p := range order {
		set = append(set, p)
		if _, ok := v.fitsWithout(t, i, set); ok {
			break
		}
	}
	for j := len(set) - 1; j >= 0; j-- {
		without := slices.Delete(slices.Clone(set), j, j+1)
		if _, ok := v.fitsWithout(t, i, without); ok {
			set = without
		}
	}
	sort.Slice(set, func(x, y int) bool { return placedLess(set[x], set[y]) })
	return set
}

// trial is what every check of one SelectPreempting shares: the ask, its
// need, and its chain when the chain does not read placements (no
// co_locate_with, no separate_from; otherwise nil, and each check rebuilds
// it without the set it tries).
type trial struct {
	a       *Ask
	n       need
	fs      []filter
	tallies []tally
}

func newTrial(v *View, a *Ask) *trial {
	t := &trial{a: a, n: needOf(a)}
	if len(a.CoLocateWith) == 0 && len(a.SeparateFrom) == 0 {
		t.fs = chain(v, a, t.n)
		t.tallies = make([]tally, len(t.fs))
	}
	return t
}

// fitsWithout reports whether the trial's ask passes every filter on node
// i with set removed, and its rank there; the view is not changed (or is
// restored).
func (v *View) fitsWithout(t *trial, i int, set []Placed) (rank, bool) {
	node := &v.nodes[i]
	if t.fs == nil {
		v.removeAll(set)
		defer v.Add(set...)
		fs := chain(v, t.a, t.n) // after the removal: separate_from and co_locate_with see it
		c := &candidate{node: node, usage: &v.usage[i]}
		if !runChain(fs, make([]tally, len(fs)), c) {
			return rank{}, false
		}
		return rankOf(c, t.a, t.n), true
	}
	u := usageWithout(node, &v.usage[i], set)
	c := &candidate{node: node, usage: &u}
	if !runChain(t.fs, t.tallies, c) {
		return rank{}, false
	}
	return rankOf(c, t.a, t.n), true
}

// usageWithout is a copy of u (node's usage) with set's room given back.
func usageWithout(node *Node, u *usage, set []Placed) usage {
	out := usage{capacity: u.capacity, gpu: u.gpu, coresUsed: u.coresUsed}
	if u.cores != nil {
		out.cores = slices.Clone(u.cores)
	}
	for _, p := range set {
		out.capacity -= fixed(p.Capacity)
		out.gpu -= fixed(p.GPUCapacity)
		for _, c := range p.Cores {
			if k, ok := corePos(node, &out, c); ok && out.cores[k] > 0 {
				if out.cores[k]--; out.cores[k] == 0 {
					out.coresUsed--
				}
			}
		}
	}
	return out
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
