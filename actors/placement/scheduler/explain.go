package scheduler

import (
	"fmt"
	"sort"
	"strings"
)

// Metrics is what one decision saw: the structured form of the explanation
// (for GetPlacement and placement_failed) and, through String, its text.
type Metrics struct {
	// NodesEvaluated is the number of nodes in the view.
	NodesEvaluated int
	// NodesFeasible is the number that passed every filter.
	NodesFeasible int
	// Filtered has one entry per filter that removed a node, in chain order.
	// Each node is counted once, by the first filter that removed it.
	Filtered []FilterCount
}

// FilterCount is how many nodes one filter removed, and why.
type FilterCount struct {
	// Filter is one of the Filter* constants.
	Filter string
	Kind   Kind
	// Nodes is the number of nodes it removed.
	Nodes int
	// Want says what the job wants ("CLOUD_AWS", "2 units"); may be empty.
	Want string
	// Reasons split Nodes by reason where the filter gives one ("cordoned",
	// "missing nvenc=yes"), most nodes first, then by reason.
	Reasons []ReasonCount
}

// ReasonCount is the number of nodes removed for one reason.
type ReasonCount struct {
	Reason string
	Nodes  int
}

// String renders the counts as an operator reads them, in Nomad's style:
// "constraint cloud filtered 3 nodes (wants CLOUD_AWS), capacity exhausted
// on 2 nodes (needs 3 units)".
func (m Metrics) String() string {
	if m.NodesEvaluated == 0 {
		return "no nodes known"
	}
	parts := make([]string, 0, len(m.Filtered))
	for _, f := range m.Filtered {
		parts = append(parts, f.String())
	}
	if len(parts) == 0 {
		return fmt.Sprintf("%d of %s fit", m.NodesFeasible, nodes(m.NodesEvaluated))
	}
	return fmt.Sprintf("%s evaluated: %s", nodes(m.NodesEvaluated), strings.Join(parts, ", "))
}

// String renders one count: "constraint schedulable filtered 3 nodes
// (cordoned 2, offline 1)" or "cores exhausted on 1 node (needs 4 cores)".
func (f FilterCount) String() string {
	var b strings.Builder
	if f.Kind == KindExhausted {
		fmt.Fprintf(&b, "%s exhausted on %s", f.Filter, nodes(f.Nodes))
	} else {
		fmt.Fprintf(&b, "constraint %s filtered %s", f.Filter, nodes(f.Nodes))
	}
	var detail []string
	if f.Want != "" {
		verb := "wants "
		if f.Kind == KindExhausted {
			verb = "needs "
		}
		detail = append(detail, verb+f.Want)
	}
	if len(f.Reasons) > 0 {
		rs := make([]string, len(f.Reasons))
		for i, r := range f.Reasons {
			rs[i] = fmt.Sprintf("%s %d", r.Reason, r.Nodes)
		}
		detail = append(detail, strings.Join(rs, ", "))
	}
	if len(detail) > 0 {
		fmt.Fprintf(&b, " (%s)", strings.Join(detail, "; "))
	}
	return b.String()
}

func nodes(n int) string {
	if n == 1 {
		return "1 node"
	}
	return fmt.Sprintf("%d nodes", n)
}

// Failure is the answer when no node fits: the counts of every filter. It is
// the error View.Select returns (find it with errors.As).
type Failure struct {
	Job     JobID
	Role    Role
	Metrics Metrics
}

// Error is "job J role R fits no node: 12 nodes evaluated: constraint cloud
// filtered 3 nodes (wants CLOUD_AWS), capacity exhausted on 9 nodes (needs 2
// units)".
func (f *Failure) Error() string {
	return fmt.Sprintf("job %s role %s fits no node: %s", f.Job, f.Role, f.Metrics)
}

// tally counts what each filter of a chain removed.
type tally struct {
	nodes   int
	reasons map[string]int
}

func metricsOf(fs []filter, tallies []tally, evaluated, feasible int) Metrics {
	m := Metrics{NodesEvaluated: evaluated, NodesFeasible: feasible}
	for i, t := range tallies {
		if t.nodes == 0 {
			continue
		}
		fc := FilterCount{Filter: fs[i].name(), Kind: fs[i].kind(), Nodes: t.nodes, Want: fs[i].want()}
		for r, n := range t.reasons {
			fc.Reasons = append(fc.Reasons, ReasonCount{Reason: r, Nodes: n})
		}
		sort.Slice(fc.Reasons, func(a, b int) bool {
			ra, rb := fc.Reasons[a], fc.Reasons[b]
			if ra.Nodes != rb.Nodes {
				return ra.Nodes > rb.Nodes
			}
			return ra.Reason < rb.Reason
		})
		m.Filtered = append(m.Filtered, fc)
	}
	return m
}
