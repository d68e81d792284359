package scheduler

import (
	"errors"
	"maps"
	"testing"
)

// node returns an online node with 10 units and cores 0-7, changed by opts.
func node(id string, opts ...func(*Node)) Node {
	n := Node{ID: NodeID(id), Online: true, Capacity: 10, Cores: coreRange(0, 8)}
	for _, o := range opts {
		o(&n)
	}
	return n
}

// coreRange is the core ids from, from+1, …, from+n-1.
func coreRange(from, n int) []int {
	ids := make([]int, n)
	for i := range ids {
		ids[i] = from + i
	}
	return ids
}

func withCapacity(c float64) func(*Node) { return func(n *Node) { n.Capacity = c } }
func withZone(z string) func(*Node)      { return func(n *Node) { n.Zone = z } }
func withTags(kv ...string) func(*Node) {
	return func(n *Node) {
		n.Tags = map[string]string{}
		for i := 0; i+1 < len(kv); i += 2 {
			n.Tags[kv[i]] = kv[i+1]
		}
	}
}

func ask(job string, capacity float64) Ask {
	return Ask{Job: JobID(job), Role: RolePrimary, Requirements: Requirements{Capacity: capacity}}
}

// selectCase is one row of the filter and chain tables: a view, an ask, and
// either the node chosen or the per-filter counts of the failure.
type selectCase struct {
	name   string
	nodes  []Node
	placed []Placed
	ask    Ask
	// want is the node chosen; "" expects a *Failure.
	want NodeID
	// filtered are the expected counts per filter (in either outcome);
	// nil skips the check.
	filtered map[string]int
}

func runSelectCases(t *testing.T, cases []selectCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			v, err := NewView(tc.nodes, tc.placed)
			if err != nil {
				t.Fatalf("NewView: %v", err)
			}
			d, err := v.Select(tc.ask)
			var m Metrics
			var f *Failure
			switch {
			case tc.want == "" && errors.As(err, &f):
				m = f.Metrics
			case tc.want == "":
				t.Fatalf("Select = %v, %v; want a *Failure", d, err)
			case err != nil:
				t.Fatalf("Select: %v; want node %s", err, tc.want)
			case d.Node != tc.want:
				t.Fatalf("Select chose %s; want %s (%s)", d.Node, tc.want, d)
			default:
				m = d.Metrics
			}
			if tc.filtered != nil {
				if got := countsOf(m); !maps.Equal(got, tc.filtered) {
					t.Fatalf("filtered = %v; want %v (%s)", got, tc.filtered, m)
				}
			}
		})
	}
}

func countsOf(m Metrics) map[string]int {
	out := map[string]int{}
	for _, f := range m.Filtered {
		out[f.Filter] = f.Nodes
	}
	return out
}
