package scheduler

import (
	"fmt"
	"strings"
)

// Decision is where an Ask goes.
type Decision struct {
	Job  JobID
	Role Role
	// Node is the chosen node.
	Node NodeID
	// Cores are the core ids pinned to the asked job (its norsk_cpu_list),
	// ascending; empty when it shares cores.
	Cores []int
	// Tier is the name of the tier the node was chosen in, and TierIndex
	// its position in Ask.Tiers (0 with no tiers).
	Tier      string
	TierIndex int
	// Degraded names the forbidden failure domains the job shares with its
	// peer because no node outside them fitted (best effort, issue 11 §3),
	// narrowest first; empty when the policy is kept.
	Degraded []Domain
	// Placed are the instances the decision places, the asked job first,
	// then the co-located members in Ask order: pass them to View.Add.
	Placed []Placed
	// Metrics is what the chain saw.
	Metrics Metrics
}

// String is "job J role R on node N (tier T; 7 of 12 nodes fit; cores 0,1;
// degraded: zone)", for logs and events.
func (d Decision) String() string {
	parts := []string{}
	if d.Tier != "" {
		parts = append(parts, "tier "+d.Tier)
	}
	parts = append(parts, fmt.Sprintf("%d of %s fit", d.Metrics.NodesFeasible, nodes(d.Metrics.NodesEvaluated)))
	if len(d.Cores) > 0 {
		cs := make([]string, len(d.Cores))
		for i, c := range d.Cores {
			cs[i] = fmt.Sprint(c)
		}
		parts = append(parts, "cores "+strings.Join(cs, ","))
	}
	if len(d.Degraded) > 0 {
		ds := make([]string, len(d.Degraded))
		for i, x := range d.Degraded {
			ds[i] = string(x)
		}
		parts = append(parts, "degraded: "+strings.Join(ds, ", "))
	}
	return fmt.Sprintf("job %s role %s on node %s (%s)", d.Job, d.Role, d.Node, strings.Join(parts, "; "))
}

// Select decides where the Ask goes: it runs every node of the view through
// the filter chain, counting what each filter removes, ranks the nodes that
// pass (rank.go) and returns the best, with core ids assigned. It does not
// change the view: Add the decision's Placed to plan the next one against
// it.
//
// Errors: a *Failure when no node fits; ErrInvalidAsk (wrapped, naming the
// field) for a malformed Ask; ErrAlreadyPlaced (wrapped) when the asked role
// or a co-located member's is already placed. The result does not depend on
// the order of the nodes or placements the view was built from.
func (v *View) Select(a Ask) (Decision, error) {
	if err := validateAsk(&a); err != nil {
		return Decision{}, err
	}
	if err := v.checkNotPlaced(&a); err != nil {
		return Decision{}, err
	}
	n := needOf(&a)
	fs := chain(v, &a, n)
	tallies := make([]tally, len(fs))
	best, bestIdx, feasible := rank{}, -1, 0
	// One candidate, reused: passed to the filters through an interface it
	// would escape to the heap once per node.
	c := &candidate{}
	for i := range v.nodes {
		*c = candidate{node: &v.nodes[i], usage: &v.usage[i]}
		if !runChain(fs, tallies, c) {
			continue
		}
		feasible++
		if r := rankOf(c, &a, n); bestIdx < 0 || r.less(best) {
			best, bestIdx = r, i
		}
	}
	m := metricsOf(fs, tallies, len(v.nodes), feasible)
	if bestIdx < 0 {
		return Decision{}, &Failure{Job: a.Job, Role: a.Role, Metrics: m}
	}
	return v.decide(&a, bestIdx, best.tier, domainsOf(best.shared), m), nil
}

// runChain reports whether c passes every filter, counting it against the
// first that fails.
func runChain(fs []filter, tallies []tally, c *candidate) bool {
	for j, f := range fs {
		ok, reason := f.check(c)
		if ok {
			continue
		}
		t := &tallies[j]
		t.nodes++
		if reason != "" {
			if t.reasons == nil {
				t.reasons = map[string]int{}
			}
			t.reasons[reason]++
		}
		return false
	}
	return true
}

func (v *View) decide(a *Ask, i, tier int, shared []Domain, m Metrics) Decision {
	node := &v.nodes[i]
	counts := []int{a.Requirements.Cores}
	for _, mem := range a.CoLocated {
		counts = append(counts, mem.Requirements.Cores)
	}
	cores := assignCores(node, &v.usage[i], counts)
	d := Decision{Job: a.Job, Role: a.Role, Node: node.ID, Cores: cores[0], TierIndex: tier, Degraded: shared, Metrics: m}
	if len(a.Tiers) > 0 {
		d.Tier = a.Tiers[tier].Name
	}
	d.Placed = append(d.Placed, placedOf(a.Job, a.Role, node.ID, a.Requirements, cores[0]))
	for k, mem := range a.CoLocated {
		d.Placed = append(d.Placed, placedOf(mem.Job, mem.Role, node.ID, mem.Requirements, cores[k+1]))
	}
	return d
}

func placedOf(job JobID, role Role, node NodeID, r Requirements, cores []int) Placed {
	return Placed{Job: job, Role: role, Node: node, Capacity: r.Capacity, GPUCapacity: r.GPUCapacity, Cores: cores}
}

func (v *View) checkNotPlaced(a *Ask) error {
	keys := []instanceKey{{a.Job, a.Role}}
	for _, m := range a.CoLocated {
		keys = append(keys, instanceKey{m.Job, m.Role})
	}
	for _, k := range keys {
		if p, ok := v.placed[k]; ok {
			return fmt.Errorf("%w: job %s role %s is placed on node %s", ErrAlreadyPlaced, k.job, k.role, p.Node)
		}
	}
	return nil
}
