package scheduler

import (
	"testing"

	"github.com/norsk-oss/norsk-manager/proto/managerpb"
)

func TestFilter_Schedulable(t *testing.T) {
	nodes := []Node{
		node("a", func(n *Node) { n.Online = false }),
		node("b", func(n *Node) { n.Cordoned = true }),
		node("c", func(n *Node) { n.Draining = true }),
		node("d", func(n *Node) { n.Stopping = true }),
		node("e", withCapacity(-1)),
		node("f"),
	}
	runSelectCases(t, []selectCase{
		{name: "only the schedulable node", nodes: nodes, ask: ask("j", 1), want: "f",
			filtered: map[string]int{FilterSchedulable: 5}},
		{name: "none schedulable", nodes: nodes[:5], ask: ask("j", 1),
			filtered: map[string]int{FilterSchedulable: 5}},
	})
	v, _ := NewView(nodes[:5], nil)
	_, err := v.Select(ask("j", 1))
	if _, ok := err.(*Failure); !ok {
		t.Fatalf("Select: %v; want a *Failure", err)
	}
	want := "constraint schedulable filtered 5 nodes (cordoned 1, draining 1, invalid record 1, offline 1, stopping 1)"
	if got := err.(*Failure).Metrics.Filtered[0].String(); got != want {
		t.Fatalf("text = %q; want %q", got, want)
	}
}

func TestFilter_Tier(t *testing.T) {
	nodes := []Node{
		node("a", withTags("tier", "cheap", "zone", "z1")),
		node("b", withTags("tier", "cheap")),
		node("c", withTags("tier", "dear")),
		node("d"),
	}
	cheap := Tier{Name: "cheap", Selector: map[string]string{"tier": "cheap", "zone": "z1"}}
	dear := Tier{Name: "dear", Selector: map[string]string{"tier": "dear"}}
	withTiers := func(a Ask, ts ...Tier) Ask { a.Tiers = ts; a.Pool = "p"; return a }
	runSelectCases(t, []selectCase{
		{name: "every tag of the selector", nodes: nodes, ask: withTiers(ask("j", 1), cheap), want: "a",
			filtered: map[string]int{FilterTier: 3}},
		{name: "no tiers takes every node", nodes: nodes, ask: ask("j", 1), want: "a",
			filtered: map[string]int{}},
		{name: "empty selector takes every node", nodes: nodes, ask: withTiers(ask("j", 1), Tier{Name: "all"}), want: "a",
			filtered: map[string]int{}},
		{name: "in no tier", nodes: nodes[3:], ask: withTiers(ask("j", 1), cheap, dear),
			filtered: map[string]int{FilterTier: 1}},
	})
}

func TestFilter_Constraints(t *testing.T) {
	full := node("full", func(n *Node) {
		n.Cloud = managerpb.Cloud_CLOUD_AWS
		n.Architecture, n.Shape, n.AvailabilityDomain, n.Subnet = "arm64", "c7g.xlarge", "eu-west-1a", "sub-1"
	})
	unknown := node("unknown")
	other := node("other", func(n *Node) {
		n.Cloud = managerpb.Cloud_CLOUD_OCI
		n.Architecture, n.Shape, n.AvailabilityDomain, n.Subnet = "x86_64", "E4", "AD-1", "sub-2"
	})
	nodes := []Node{unknown, other, full}
	with := func(k Constraints) Ask { a := ask("j", 1); a.Constraints = k; return a }
	runSelectCases(t, []selectCase{
		{name: "cloud", nodes: nodes, ask: with(Constraints{Cloud: managerpb.Cloud_CLOUD_AWS}), want: "full",
			filtered: map[string]int{FilterCloud: 2}},
		{name: "architecture", nodes: nodes, ask: with(Constraints{Architecture: "arm64"}), want: "full",
			filtered: map[string]int{FilterArchitecture: 2}},
		{name: "shape", nodes: nodes, ask: with(Constraints{Shape: "c7g.xlarge"}), want: "full",
			filtered: map[string]int{FilterShape: 2}},
		{name: "availability domain", nodes: nodes, ask: with(Constraints{AvailabilityDomain: "eu-west-1a"}), want: "full",
			filtered: map[string]int{FilterAvailabilityDomain: 2}},
		{name: "subnet", nodes: nodes, ask: with(Constraints{Subnet: "sub-1"}), want: "full",
			filtered: map[string]int{FilterSubnet: 2}},
		{name: "first failing filter counts", nodes: nodes,
			ask:      with(Constraints{Cloud: managerpb.Cloud_CLOUD_OCI, Subnet: "sub-1"}),
			filtered: map[string]int{FilterCloud: 2, FilterSubnet: 1}},
		{name: "unset constraints filter nothing", nodes: nodes, ask: ask("j", 1), want: "full",
			filtered: map[string]int{}},
	})
}

func TestFilter_Capabilities(t *testing.T) {
	nodes := []Node{
		node("a", func(n *Node) { n.Capabilities = map[string]string{"nvenc": "yes"} }),
		node("b", func(n *Node) { n.Capabilities = map[string]string{"nvenc": "no", "sdi": "4"} }),
		node("c", func(n *Node) { n.Capabilities = map[string]string{"nvenc": "yes", "sdi": "4"} }),
		node("d"),
	}
	with := func(cs ...Capability) Ask { a := ask("j", 1); a.Requirements.Capabilities = cs; return a }
	runSelectCases(t, []selectCase{
		{name: "exact value", nodes: nodes, ask: with(Capability{"nvenc", "yes"}), want: "a",
			filtered: map[string]int{FilterCapabilities: 2}},
		{name: "every capability", nodes: nodes, ask: with(Capability{"nvenc", "yes"}, Capability{"sdi", "4"}), want: "c",
			filtered: map[string]int{FilterCapabilities: 3}},
		{name: "none has it", nodes: nodes, ask: with(Capability{"smpte2110", "1"}),
			filtered: map[string]int{FilterCapabilities: 4}},
	})
	v, _ := NewView(nodes, nil)
	d, err := v.Select(with(Capability{"nvenc", "yes"}, Capability{"sdi", "4"}))
	if err != nil {
		t.Fatalf("Select: %v", err)
	}
	want := "constraint capabilities filtered 3 nodes (wants nvenc=yes, sdi=4; missing nvenc=yes 2, missing sdi=4 1)"
	if got := d.Metrics.Filtered[0].String(); got != want {
		t.Fatalf("text = %q; want %q", got, want)
	}
}

func TestFilter_GPUModel(t *testing.T) {
	nodes := []Node{
		node("a", func(n *Node) { n.GPUModel = "L4" }),
		node("b", func(n *Node) { n.GPUModel = "T4" }),
		node("c"),
	}
	with := func(model string) Ask { a := ask("j", 1); a.Requirements.GPUModel = model; return a }
	twoModels := with("L4")
	twoModels.CoLocated = []Member{{Job: "k", Role: RolePrimary, Requirements: Requirements{GPUModel: "T4"}}}
	runSelectCases(t, []selectCase{
		{name: "exact model", nodes: nodes, ask: with("T4"), want: "b", filtered: map[string]int{FilterGPUModel: 2}},
		{name: "model names are case sensitive", nodes: nodes, ask: with("l4"), filtered: map[string]int{FilterGPUModel: 3}},
		{name: "co-located jobs want two models", nodes: nodes, ask: twoModels, filtered: map[string]int{FilterGPUModel: 3}},
	})
}

func TestFilter_Capacity(t *testing.T) {
	nodes := []Node{node("a", withCapacity(4)), node("b", withCapacity(8)), node("c", withCapacity(0))}
	placed := []Placed{{Job: "x", Role: RolePrimary, Node: "b", Capacity: 5}}
	runSelectCases(t, []selectCase{
		{name: "free capacity is capacity less what is placed", nodes: nodes, placed: placed, ask: ask("j", 3.5), want: "a",
			filtered: map[string]int{FilterCapacity: 2}},
		{name: "exactly full fits", nodes: nodes, placed: placed, ask: ask("j", 3), want: "b",
			filtered: map[string]int{FilterCapacity: 1}},
		{name: "exhausted everywhere", nodes: nodes, placed: placed, ask: ask("j", 4.5),
			filtered: map[string]int{FilterCapacity: 3}},
		{name: "zero units fits a node with no capacity", nodes: nodes[2:], ask: ask("j", 0), want: "c",
			filtered: map[string]int{}},
		{name: "an over-committed node takes nothing", nodes: nodes[:1],
			placed: []Placed{{Job: "x", Role: RolePrimary, Node: "a", Capacity: 5}}, ask: ask("j", 0),
			filtered: map[string]int{FilterCapacity: 1}},
	})
}

func TestFilter_GPUCapacity(t *testing.T) {
	gpu := func(c float64) func(*Node) { return func(n *Node) { n.GPUCapacity = c } }
	nodes := []Node{node("a"), node("b", gpu(2)), node("c", gpu(4))}
	placed := []Placed{{Job: "x", Role: RolePrimary, Node: "c", GPUCapacity: 3}}
	with := func(g float64) Ask { a := ask("j", 1); a.Requirements.GPUCapacity = g; return a }
	runSelectCases(t, []selectCase{
		{name: "free gpu capacity", nodes: nodes, placed: placed, ask: with(1.5), want: "b",
			filtered: map[string]int{FilterGPUCapacity: 2}},
		{name: "float32 widened from the wire still fits", nodes: nodes[1:2],
			ask: with(float64(float32(0.1)) * 20), want: "b", filtered: map[string]int{}},
		{name: "exhausted", nodes: nodes, placed: placed, ask: with(2.5), filtered: map[string]int{FilterGPUCapacity: 3}},
	})
}

func TestFilter_Cores(t *testing.T) {
	nodes := []Node{node("a", func(n *Node) { n.Cores = []int{0} }), node("b")}
	placed := []Placed{{Job: "x", Role: RolePrimary, Node: "b", Cores: []int{0, 1, 2, 3, 4, 5}}}
	with := func(c int) Ask { a := ask("j", 1); a.Requirements.Cores = c; return a }
	runSelectCases(t, []selectCase{
		{name: "whole cores free", nodes: nodes, placed: placed, ask: with(2), want: "b",
			filtered: map[string]int{FilterCores: 1}},
		{name: "too few free anywhere", nodes: nodes, placed: placed, ask: with(3),
			filtered: map[string]int{FilterCores: 2}},
		{name: "core ids the node does not offer are ignored", nodes: []Node{node("a", func(n *Node) { n.Cores = []int{3, 2} })},
			placed: []Placed{{Job: "x", Role: RolePrimary, Node: "a", Cores: []int{-1, 0, 7}}}, ask: with(2), want: "a"},
		{name: "no cores offered", nodes: []Node{node("a", func(n *Node) { n.Cores = nil })}, ask: with(1),
			filtered: map[string]int{FilterCores: 1}},
		{name: "core id out of range is an invalid record", nodes: []Node{node("a", func(n *Node) { n.Cores = []int{0, maxCoreID + 1} })},
			ask: with(1), filtered: map[string]int{FilterSchedulable: 1}},
	})
}

func TestFilter_CoLocate(t *testing.T) {
	nodes := []Node{node("a"), node("b"), node("c")}
	with := func(group ...JobID) Ask { a := ask("j", 1); a.CoLocateWith = group; return a }
	runSelectCases(t, []selectCase{
		{name: "the placed member pins the node", nodes: nodes,
			placed: []Placed{{Job: "k", Role: RolePrimary, Node: "b"}}, ask: with("k", "l"), want: "b",
			filtered: map[string]int{FilterCoLocate: 2}},
		{name: "no member placed: anywhere", nodes: nodes, ask: with("k"), want: "a", filtered: map[string]int{}},
		{name: "the pinned node is full", nodes: nodes,
			placed: []Placed{{Job: "k", Role: RolePrimary, Node: "b", Capacity: 10}}, ask: with("k"),
			filtered: map[string]int{FilterCoLocate: 2, FilterCapacity: 1}},
		{name: "members already split", nodes: nodes,
			placed: []Placed{{Job: "k", Role: RolePrimary, Node: "b"}, {Job: "l", Role: RolePrimary, Node: "c"}},
			ask:    with("k", "l"), filtered: map[string]int{FilterCoLocate: 3}},
	})
}

func TestFilter_Separate(t *testing.T) {
	nodes := []Node{node("a"), node("b"), node("c")}
	placed := []Placed{
		{Job: "k", Role: RolePrimary, Node: "a", Capacity: 9},
		{Job: "l", Role: RolePrimary, Node: "b", Capacity: 5},
	}
	with := func(sep ...JobID) Ask { a := ask("j", 1); a.SeparateFrom = sep; return a }
	runSelectCases(t, []selectCase{
		{name: "not on the nodes of the named jobs", nodes: nodes, placed: placed, ask: with("k", "l"), want: "c",
			filtered: map[string]int{FilterSeparate: 2}},
		{name: "unplaced names filter nothing", nodes: nodes, placed: placed, ask: with("m"), want: "a",
			filtered: map[string]int{}},
		{name: "nowhere left", nodes: nodes[:2], placed: placed, ask: with("k", "l"),
			filtered: map[string]int{FilterSeparate: 2}},
	})
}
