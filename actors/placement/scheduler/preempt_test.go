package scheduler

import (
	"errors"
	"fmt"
	"testing"
)

// victim is a placed LOW instance of job on node holding capacity units.
func victim(job, node string, capacity float64) Placed {
	return Placed{Job: JobID(job), Role: RolePrimary, Node: NodeID(node), Capacity: capacity}
}

func victimNames(ps []Placed) []string {
	var out []string
	for _, p := range ps {
		out = append(out, string(p.Job)+"@"+string(p.Node))
	}
	return out
}

func TestView_SelectPreempting(t *testing.T) {
	gpuNode := func(n *Node) { n.GPUCapacity, n.GPUModel = 4, "t4" }
	cases := []struct {
		name   string
		nodes  []Node
		placed []Placed
		// preemptible are the indexes in placed the caller may stop.
		preemptible []int
		ask         Ask
		// want is the node and victims; wantNode "" expects a *Failure.
		wantNode    NodeID
		wantVictims []string
	}{
		{name: "fits without preemption", nodes: []Node{node("a")}, placed: []Placed{victim("low", "a", 4)},
			preemptible: []int{0}, ask: ask("high", 6), wantNode: "a"},
		{name: "fewest victims: one big rather than two small",
			nodes:       []Node{node("a"), node("b")},
			placed:      []Placed{victim("l1", "a", 3), victim("l2", "a", 3), victim("l3", "a", 4), victim("l4", "b", 6), victim("s", "b", 4)},
			preemptible: []int{0, 1, 2, 3}, ask: ask("high", 6), wantNode: "b", wantVictims: []string{"l4@b"}},
		{name: "cheapest single victim that frees enough",
			nodes:       []Node{node("a")},
			placed:      []Placed{victim("l1", "a", 5), victim("l2", "a", 3), victim("l3", "a", 2)},
			preemptible: []int{0, 1, 2}, ask: ask("high", 3), wantNode: "a", wantVictims: []string{"l2@a"}},
		{name: "two victims when one is not enough",
			nodes:       []Node{node("a")},
			placed:      []Placed{victim("l1", "a", 4), victim("l2", "a", 3), victim("l3", "a", 3)},
			preemptible: []int{0, 1, 2}, ask: ask("high", 6), wantNode: "a", wantVictims: []string{"l2@a", "l3@a"}},
		{name: "never a job the caller did not name (STANDARD or HIGH)",
			nodes:       []Node{node("a")},
			placed:      []Placed{victim("std", "a", 8), victim("low", "a", 2)},
			preemptible: []int{1}, ask: ask("high", 5)},
		{name: "the ask's constraints are honoured: the GPU node only",
			nodes:       []Node{node("a"), node("g", gpuNode)},
			placed:      []Placed{victim("la", "a", 10), victim("lg", "g", 10)},
			preemptible: []int{0, 1},
			ask:         Ask{Job: "high", Role: RolePrimary, Requirements: Requirements{Capacity: 5, GPUCapacity: 1, GPUModel: "t4"}},
			wantNode:    "g", wantVictims: []string{"lg@g"}},
		{name: "a cordoned node is never made room on",
			nodes:       []Node{node("a", func(n *Node) { n.Cordoned = true })},
			placed:      []Placed{victim("low", "a", 10)},
			preemptible: []int{0}, ask: ask("high", 5)},
		{name: "separate_from: stopping the separated job itself makes the node usable",
			nodes:       []Node{node("a")},
			placed:      []Placed{victim("low", "a", 1)},
			preemptible: []int{0},
			ask:         Ask{Job: "high", Role: RolePrimary, SeparateFrom: []JobID{"low"}, Requirements: Requirements{Capacity: 1}},
			wantNode:    "a", wantVictims: []string{"low@a"}},
		{name: "cores: the victim's pinned cores are given to the ask",
			nodes:       []Node{node("a", func(n *Node) { n.Cores = coreRange(0, 2) })},
			placed:      []Placed{{Job: "low", Role: RolePrimary, Node: "a", Capacity: 1, Cores: []int{0, 1}}},
			preemptible: []int{0},
			ask:         Ask{Job: "high", Role: RolePrimary, Requirements: Requirements{Capacity: 1, Cores: 2}},
			wantNode:    "a", wantVictims: []string{"low@a"}},
		{name: "a victim on another node than it says is ignored",
			nodes:       []Node{node("a")},
			placed:      []Placed{victim("low", "a", 10)},
			preemptible: []int{-1}, ask: ask("high", 5)},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			v, err := NewView(tc.nodes, tc.placed)
			if err != nil {
				t.Fatal(err)
			}
			var vs []Placed
			for _, i := range tc.preemptible {
				if i < 0 {
					vs = append(vs, victim("low", "elsewhere", 10))
					continue
				}
				vs = append(vs, tc.placed[i])
			}
			before := freeOf(v)
			p, err := v.SelectPreempting(tc.ask, vs)
			if after := freeOf(v); after != before {
				t.Fatalf("view changed: free %v, was %v", after, before)
			}
			var f *Failure
			switch {
			case tc.wantNode == "" && errors.As(err, &f):
				return
			case tc.wantNode == "":
				t.Fatalf("SelectPreempting = %+v, %v; want a *Failure", p, err)
			case err != nil:
				t.Fatalf("SelectPreempting: %v", err)
			}
			got := victimNames(p.Victims)
			if p.Decision.Node != tc.wantNode || !equalStrings(got, tc.wantVictims) {
				t.Fatalf("node %s victims %v; want %s %v", p.Decision.Node, got, tc.wantNode, tc.wantVictims)
			}
			if tc.ask.Requirements.Cores > 0 && len(p.Decision.Cores) != tc.ask.Requirements.Cores {
				t.Fatalf("cores %v; want %d", p.Decision.Cores, tc.ask.Requirements.Cores)
			}
		})
	}
}

// TestView_SelectPreempting_ManyVictims: above maxExactVictims the greedy
// search still finds a small set and gives back what is not needed.
func TestView_SelectPreempting_ManyVictims(t *testing.T) {
	n := node("a", withCapacity(100))
	var placed []Placed
	for i := range 20 {
		placed = append(placed, victim(string(rune('a'+i))+"low", "a", 5))
	}
	v, err := NewView([]Node{n}, placed)
	if err != nil {
		t.Fatal(err)
	}
	p, err := v.SelectPreempting(ask("high", 12), placed)
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Victims) != 3 {
		t.Fatalf("victims %v; want 3 of 5 units for 12", victimNames(p.Victims))
	}
}

func freeOf(v *View) float64 {
	total := 0.0
	for _, n := range v.nodes {
		c, _, _, _ := v.Free(n.ID)
		total += c
	}
	return total
}

func equalStrings(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// BenchmarkSelectPreempting is a HIGH ask on benchFleet's nodes made full
// (10 units, ten 1-unit instances, all of them LOW victims), needing the
// room of victims=k instances: the worst case of a preemption decision,
// every node a candidate.
func BenchmarkSelectPreempting(b *testing.B) {
	for _, n := range []int{100, 1000} {
		for _, k := range []int{1, 2, 5} {
			b.Run(fmt.Sprintf("nodes=%d/victims=%d", n, k), func(b *testing.B) {
				nodes, placed, a := benchFleet(n)
				for i := range nodes {
					nodes[i].Capacity = 10
				}
				a.Requirements.Capacity = float64(k)
				a.Requirements.Cores = 0
				a.SeparateFrom = nil
				v, err := NewView(nodes, placed)
				if err != nil {
					b.Fatal(err)
				}
				benchTimed(b, func() {
					p, err := v.SelectPreempting(a, placed)
					if err != nil || len(p.Victims) != k {
						b.Fatalf("victims %d, %v; want %d", len(p.Victims), err, k)
					}
				})
			})
		}
	}
}
