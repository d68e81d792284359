package scheduler

import (
	"errors"
	"fmt"
	"math"
	"math/rand"
	"reflect"
	"slices"
	"testing"

	"github.com/norsk-oss/norsk-manager/proto/commonpb"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
)

func TestSelect_AntiAffinityDegraded(t *testing.T) {
	aws, oci := managerpb.Cloud_CLOUD_AWS, managerpb.Cloud_CLOUD_OCI
	cloud := func(c managerpb.Cloud) func(*Node) { return func(n *Node) { n.Cloud = c } }
	p1 := node("p1", withZone("z1"), cloud(aws))
	p2 := node("p2", withZone("z1"), cloud(aws))
	q1 := node("q1", withZone("z2"), cloud(aws))
	o1 := node("o1", withZone("o1"), cloud(oci))
	peer := &Peer{Node: "p1", Zone: "z1", Cloud: aws}
	backup := func(aa AntiAffinity, tiers ...Tier) Ask {
		a := ask("b.1.enc", 4)
		a.Role, a.Peer, a.AntiAffinity, a.Tiers = RoleBackup, peer, aa, tiers
		return a
	}
	nodeZone := AntiAffinity{Node: true, Zone: true}
	all := AntiAffinity{Node: true, Zone: true, Cloud: true}
	full := func(ids ...NodeID) []Placed {
		var ps []Placed
		for _, id := range ids {
			ps = append(ps, Placed{Job: JobID("full-" + id), Role: RolePrimary, Node: id, Capacity: 8})
		}
		return ps
	}
	cases := []struct {
		name     string
		nodes    []Node
		placed   []Placed
		ask      Ask
		want     NodeID
		degraded []Domain
	}{
		{name: "another zone is free", nodes: []Node{p1, p2, q1}, ask: backup(nodeZone), want: "q1"},
		{name: "packing does not beat the policy", nodes: []Node{p1, p2, q1}, placed: []Placed{{Job: "other", Role: RolePrimary, Node: "p2", Capacity: 4}},
			ask: backup(nodeZone), want: "q1"},
		{name: "other zone full: same zone, other node", nodes: []Node{p1, p2, q1}, placed: full("q1"),
			ask: backup(nodeZone), want: "p2", degraded: []Domain{DomainZone}},
		{name: "only the primary's node has room", nodes: []Node{p1, p2, q1}, placed: full("q1", "p2"),
			ask: backup(nodeZone), want: "p1", degraded: []Domain{DomainNode, DomainZone}},
		{name: "cloud given up before zone", nodes: []Node{p1, p2, q1}, ask: backup(all), want: "q1",
			degraded: []Domain{DomainCloud}},
		{name: "another cloud keeps all", nodes: []Node{p1, p2, q1, o1}, ask: backup(all), want: "o1"},
		{name: "allow: packs next to the primary", nodes: []Node{p1, q1},
			placed: []Placed{{Job: "b.0.enc", Role: RolePrimary, Node: "p1", Capacity: 4}},
			ask:    backup(AntiAffinity{}), want: "p1"},
		{name: "resilience before cost: a dear node in another zone beats a cheap one beside the primary",
			nodes: []Node{node("p2", withZone("z1"), withTags("t", "cheap")), node("q1", withZone("z2"), withTags("t", "dear"))},
			ask: backup(nodeZone, Tier{Name: "cheap", Selector: map[string]string{"t": "cheap"}},
				Tier{Name: "dear", Selector: map[string]string{"t": "dear"}}),
			want: "q1"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			v, err := NewView(tc.nodes, tc.placed)
			if err != nil {
				t.Fatal(err)
			}
			d, err := v.Select(tc.ask)
			if err != nil {
				t.Fatalf("Select: %v", err)
			}
			if d.Node != tc.want || !slices.Equal(d.Degraded, tc.degraded) {
				t.Fatalf("Select = node %s degraded %v; want node %s degraded %v", d.Node, d.Degraded, tc.want, tc.degraded)
			}
		})
	}
}

func TestSelect_CoresWithoutOverlap(t *testing.T) {
	v, err := NewView([]Node{node("a")}, []Placed{{Job: "x", Role: RolePrimary, Node: "a", Cores: []int{1, 4}}})
	if err != nil {
		t.Fatal(err)
	}
	steps := []struct {
		job   JobID
		cores int
		want  []int
	}{
		{"j1", 2, []int{0, 2}},
		{"j2", 3, []int{3, 5, 6}},
		{"j3", 0, nil},
		{"j4", 1, []int{7}},
	}
	for _, s := range steps {
		a := ask(string(s.job), 1)
		a.Requirements.Cores = s.cores
		d, err := v.Select(a)
		if err != nil {
			t.Fatalf("%s: %v", s.job, err)
		}
		if !slices.Equal(d.Cores, s.want) {
			t.Fatalf("%s: cores %v; want %v", s.job, d.Cores, s.want)
		}
		v.Add(d.Placed...)
	}
	a := ask("j5", 1)
	a.Requirements.Cores = 1
	var f *Failure
	if _, err := v.Select(a); !errors.As(err, &f) || countsOf(f.Metrics)[FilterCores] != 1 {
		t.Fatalf("Select on a node with every core pinned = %v; want cores exhausted on 1 node", err)
	}
	// Removing an instance gives its cores back.
	if !v.Remove("j2", RolePrimary) {
		t.Fatal("Remove(j2) = false")
	}
	a.Requirements.Cores = 3
	if d, err := v.Select(a); err != nil || !slices.Equal(d.Cores, []int{3, 5, 6}) {
		t.Fatalf("Select after Remove = %v, %v; want cores [3 5 6]", d.Cores, err)
	}
}

// A node offers the ids its worker reported (--cores 2-5,9), not 0..n-1:
// the decision hands out those ids, lowest first, and never one it does
// not offer.
func TestSelect_CoresOfferedIDs(t *testing.T) {
	v, err := NewView([]Node{node("a", func(n *Node) { n.Cores = []int{9, 5, 4, 3, 2, 9} })}, nil)
	if err != nil {
		t.Fatal(err)
	}
	var got [][]int
	for _, job := range []string{"j1", "j2"} {
		a := ask(job, 1)
		a.Requirements.Cores = 2
		d, err := v.Select(a)
		if err != nil {
			t.Fatalf("%s: %v", job, err)
		}
		v.Add(d.Placed...)
		got = append(got, d.Cores)
	}
	if !slices.Equal(got[0], []int{2, 3}) || !slices.Equal(got[1], []int{4, 5}) {
		t.Fatalf("cores %v; want [2 3] then [4 5]", got)
	}
	if _, _, free, _ := v.Free("a"); free != 1 {
		t.Fatalf("free cores %d; want 1 (9)", free)
	}
}

func TestSelect_CoLocatedGroup(t *testing.T) {
	nodes := []Node{node("a", withCapacity(5)), node("b")}
	// a is fuller per unit but cannot take the group's sum.
	placed := []Placed{{Job: "x", Role: RolePrimary, Node: "a", Capacity: 1}}
	v, err := NewView(nodes, placed)
	if err != nil {
		t.Fatal(err)
	}
	a := ask("bun.0.enc", 3)
	a.Requirements.Cores = 2
	a.CoLocated = []Member{
		{Job: "bun.0.pkg", Role: RolePrimary, Requirements: Requirements{Capacity: 2, Cores: 1}},
		{Job: "bun.0.mux", Role: RolePrimary, Requirements: Requirements{Capacity: 0.5}},
	}
	d, err := v.Select(a)
	if err != nil {
		t.Fatalf("Select: %v", err)
	}
	want := []Placed{
		{Job: "bun.0.enc", Role: RolePrimary, Node: "b", Capacity: 3, Cores: []int{0, 1}},
		{Job: "bun.0.pkg", Role: RolePrimary, Node: "b", Capacity: 2, Cores: []int{2}},
		{Job: "bun.0.mux", Role: RolePrimary, Node: "b", Capacity: 0.5},
	}
	if !reflect.DeepEqual(d.Placed, want) {
		t.Fatalf("Placed = %+v; want %+v", d.Placed, want)
	}
	if got := countsOf(d.Metrics); got[FilterCapacity] != 1 {
		t.Fatalf("filtered = %v; want capacity exhausted on node a", got)
	}
	v.Add(d.Placed...)
	if c, _, cores, _ := v.Free("b"); c != 4.5 || cores != 5 {
		t.Fatalf("Free(b) = %v units, %d cores; want 4.5, 5", c, cores)
	}
}

func TestSelect_Determinism(t *testing.T) {
	var nodes []Node
	var placed []Placed
	for i := range 60 {
		// Many ties: six loads over sixty nodes in three zones.
		id := NodeID(fmt.Sprintf("n%02d", i))
		nodes = append(nodes, node(string(id), withZone(fmt.Sprint("z", i%3)), withTags("tier", []string{"a", "b"}[i%2])))
		placed = append(placed, Placed{Job: JobID("load-" + id), Role: RolePrimary, Node: id, Capacity: float64(i % 6)})
	}
	a := ask("j", 2)
	a.Role, a.Peer, a.AntiAffinity = RoleBackup, &Peer{Node: "n00", Zone: "z0"}, AntiAffinity{Node: true, Zone: true}
	a.Tiers = []Tier{{Name: "b", Selector: map[string]string{"tier": "b"}}, {Name: "a", Selector: map[string]string{"tier": "a"}}}
	v, _ := NewView(nodes, placed)
	first, err := v.Select(a)
	if err != nil {
		t.Fatal(err)
	}
	// Tier b (odd ids), not zone z0, fullest (load 5): n05 (zone z2), n11 (z2), ...; lowest id.
	if first.Node != "n05" {
		t.Fatalf("Select chose %s; want n05", first.Node)
	}
	rng := rand.New(rand.NewSource(1))
	for range 50 {
		rng.Shuffle(len(nodes), func(i, j int) { nodes[i], nodes[j] = nodes[j], nodes[i] })
		rng.Shuffle(len(placed), func(i, j int) { placed[i], placed[j] = placed[j], placed[i] })
		v, _ := NewView(nodes, placed)
		d, err := v.Select(a)
		if err != nil || !reflect.DeepEqual(d, first) {
			t.Fatalf("after a shuffle Select = %+v, %v; want %+v", d, err, first)
		}
	}
}

func TestSelect_PlanAPass(t *testing.T) {
	// Twenty 1-unit jobs over three 10-unit nodes, each added before the
	// next: packing fills a, then b, and never over-commits.
	v, _ := NewView([]Node{node("c"), node("a"), node("b")}, nil)
	var got []NodeID
	for i := range 21 {
		d, err := v.Select(ask(fmt.Sprint("j", i), 1))
		if err != nil {
			t.Fatalf("job %d: %v", i, err)
		}
		got = append(got, d.Node)
		v.Add(d.Placed...)
	}
	want := slices.Concat(slices.Repeat([]NodeID{"a"}, 10), slices.Repeat([]NodeID{"b"}, 10), []NodeID{"c"})
	if !slices.Equal(got, want) {
		t.Fatalf("placements = %v; want %v", got, want)
	}
}

func TestSelect_FailureText(t *testing.T) {
	nodes := []Node{
		node("a", func(n *Node) { n.Cloud = managerpb.Cloud_CLOUD_OCI }),
		node("b", func(n *Node) { n.Cloud = managerpb.Cloud_CLOUD_OCI }),
		node("c", func(n *Node) { n.Cloud = managerpb.Cloud_CLOUD_OCI }),
		node("d", func(n *Node) { n.Cloud = managerpb.Cloud_CLOUD_AWS }, withCapacity(1)),
		node("e", func(n *Node) { n.Cloud = managerpb.Cloud_CLOUD_AWS }, withCapacity(2)),
		node("f", func(n *Node) { n.Cloud = managerpb.Cloud_CLOUD_AWS; n.Cordoned = true }),
	}
	v, _ := NewView(nodes, nil)
	a := ask("news", 3)
	a.Constraints.Cloud = managerpb.Cloud_CLOUD_AWS
	_, err := v.Select(a)
	want := "job news role primary fits no node: 6 nodes evaluated: " +
		"constraint schedulable filtered 1 node (cordoned 1), " +
		"constraint cloud filtered 3 nodes (wants CLOUD_AWS), " +
		"capacity exhausted on 2 nodes (needs 3 units)"
	if err == nil || err.Error() != want {
		t.Fatalf("error = %v\nwant    %s", err, want)
	}
	empty, _ := NewView(nil, nil)
	if _, err := empty.Select(a); err == nil || err.Error() != "job news role primary fits no node: no nodes known" {
		t.Fatalf("empty view: %v", err)
	}
}

func TestSelect_Errors(t *testing.T) {
	v, _ := NewView([]Node{node("a")}, []Placed{{Job: "run", Role: RolePrimary, Node: "a"}})
	member := func(m Member) Ask { a := ask("j", 1); a.CoLocated = []Member{m}; return a }
	cases := []struct {
		name string
		ask  Ask
		want error
	}{
		{"no job", Ask{Role: RolePrimary}, ErrInvalidAsk},
		{"no role", Ask{Job: "j"}, ErrInvalidAsk},
		{"negative capacity", ask("j", -1), ErrInvalidAsk},
		{"NaN capacity", ask("j", math.NaN()), ErrInvalidAsk},
		{"infinite gpu", func() Ask { a := ask("j", 1); a.Requirements.GPUCapacity = math.Inf(1); return a }(), ErrInvalidAsk},
		{"negative cores", func() Ask { a := ask("j", 1); a.Requirements.Cores = -2; return a }(), ErrInvalidAsk},
		{"member without job", member(Member{Role: RolePrimary}), ErrInvalidAsk},
		{"member is the job", member(Member{Job: "j", Role: RolePrimary}), ErrInvalidAsk},
		{"member bad requirements", member(Member{Job: "k", Role: RolePrimary, Requirements: Requirements{Capacity: -1}}), ErrInvalidAsk},
		{"already placed", ask("run", 1), ErrAlreadyPlaced},
		{"member already placed", member(Member{Job: "run", Role: RolePrimary}), ErrAlreadyPlaced},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := v.Select(tc.ask); !errors.Is(err, tc.want) {
				t.Fatalf("Select = %v; want %v", err, tc.want)
			}
		})
	}
	// Another role of the same job is not the same instance.
	a := ask("run", 1)
	a.Role = RoleBackup
	if _, err := v.Select(a); err != nil {
		t.Fatalf("Select(run, backup) = %v", err)
	}
	if _, err := NewView([]Node{node("a"), node("a")}, nil); !errors.Is(err, ErrInvalidView) {
		t.Fatalf("NewView with a duplicate id = %v; want ErrInvalidView", err)
	}
}

func TestView_AddRemove(t *testing.T) {
	v, _ := NewView([]Node{node("a", func(n *Node) { n.GPUCapacity = 2 })}, []Placed{
		{Job: "x", Role: RolePrimary, Node: "a", Capacity: 3, GPUCapacity: 1, Cores: []int{0, 1}},
		{Job: "y", Role: RolePrimary, Node: "gone", Capacity: 3},
		{Job: "z", Role: RolePrimary, Node: "a", Capacity: math.NaN()},
	})
	check := func(capacity, gpu float64, cores int) {
		t.Helper()
		c, g, k, ok := v.Free("a")
		if !ok || c != capacity || g != gpu || k != cores {
			t.Fatalf("Free(a) = %v, %v, %d, %v; want %v, %v, %d", c, g, k, ok, capacity, gpu, cores)
		}
	}
	check(7, 1, 6)
	if v.Remove("x", RoleBackup) {
		t.Fatal("Remove of an unknown role = true")
	}
	if !v.Remove("x", RolePrimary) {
		t.Fatal("Remove(x) = false")
	}
	check(10, 2, 8)
	if _, _, _, ok := v.Free("gone"); ok {
		t.Fatal("Free(gone) found a node the view does not have")
	}
}

func TestConvert(t *testing.T) {
	r := RequirementsFromProto(&managerpb.JobRequirements{
		RequiredCapacity:     2.5,
		RequiredCores:        &commonpb.OptionalInt{Value: 3},
		RequiredGpuCapacity:  &commonpb.OptionalFloat{Value: 0.5},
		RequiredGpuModel:     &commonpb.OptionalString{Value: "L4"},
		RequiredCapabilities: []*managerpb.CapabilityRequirement{{Name: "nvenc", Value: "yes"}},
	})
	want := Requirements{Capacity: 2.5, Cores: 3, GPUCapacity: 0.5, GPUModel: "L4", Capabilities: []Capability{{"nvenc", "yes"}}}
	if !reflect.DeepEqual(r, want) {
		t.Fatalf("RequirementsFromProto = %+v; want %+v", r, want)
	}
	if got := RequirementsFromProto(nil); !reflect.DeepEqual(got, Requirements{}) {
		t.Fatalf("RequirementsFromProto(nil) = %+v", got)
	}
	aa := AntiAffinityFromProto(&managerpb.ResiliencePolicy{SameNode: managerpb.AntiAffinity_ANTI_AFFINITY_FORBID, SameAz: managerpb.AntiAffinity_ANTI_AFFINITY_FORBID})
	if aa != (AntiAffinity{Node: true, Zone: true}) {
		t.Fatalf("AntiAffinityFromProto = %+v", aa)
	}
	k := ConstraintsFromJob(&managerpb.Job{Cloud: managerpb.Cloud_CLOUD_OCI, Shape: "E4", AvailabilityDomain: "AD-1"})
	if k != (Constraints{Cloud: managerpb.Cloud_CLOUD_OCI, Shape: "E4", AvailabilityDomain: "AD-1"}) {
		t.Fatalf("ConstraintsFromJob = %+v", k)
	}
}

func TestDecision_String(t *testing.T) {
	nodes := []Node{node("a", withZone("z1"), withTags("t", "cheap")), node("b", withCapacity(1), withTags("t", "cheap"))}
	v, _ := NewView(nodes, nil)
	a := ask("b.1.enc", 2)
	a.Role, a.Pool = RoleBackup, "live"
	a.Tiers = []Tier{{Name: "cheap", Selector: map[string]string{"t": "cheap"}}}
	a.Requirements.Cores = 2
	a.Peer, a.AntiAffinity = &Peer{Node: "p", Zone: "z1"}, AntiAffinity{Node: true, Zone: true}
	d, err := v.Select(a)
	if err != nil {
		t.Fatal(err)
	}
	want := "job b.1.enc role backup on node a (tier cheap; 1 of 2 nodes fit; cores 0,1; degraded: zone)"
	if got := d.String(); got != want {
		t.Fatalf("String = %q\nwant     %q", got, want)
	}
	if got, want := d.Metrics.String(), "2 nodes evaluated: capacity exhausted on 1 node (needs 2 units)"; got != want {
		t.Fatalf("Metrics = %q; want %q", got, want)
	}
	v.Add(d.Placed...)
	v.Remove("b.1.enc", RoleBackup)
	a.Requirements.Capacity = 0.5
	d, _ = v.Select(a)
	if got, want := d.Metrics.String(), "2 of 2 nodes fit"; got != want {
		t.Fatalf("Metrics = %q; want %q", got, want)
	}
	other, _ := NewView([]Node{node("c")}, nil)
	if _, err := other.Select(a); err == nil || err.Error() != "job b.1.enc role backup fits no node: 1 node evaluated: constraint tier filtered 1 node (wants a tier of pool live)" {
		t.Fatalf("error = %v", err)
	}
}

// TestSelect_CoLocatedMemberPeer: the asked job's other replica is not
// placed, but a co-located member's is (on a, in z1): the group keeps out
// of the member's peer's node and zone, although a is the fuller node.
func TestSelect_CoLocatedMemberPeer(t *testing.T) {
	nodes := []Node{node("a", withZone("z1")), node("b", withZone("z1")), node("c", withZone("z2"))}
	placed := []Placed{{Job: "load", Role: RolePrimary, Node: "a", Capacity: 4}, {Job: "load2", Role: RolePrimary, Node: "b", Capacity: 2}}
	v, err := NewView(nodes, placed)
	if err != nil {
		t.Fatal(err)
	}
	a := ask("bun.1.enc", 1)
	a.Role, a.AntiAffinity = RoleBackup, AntiAffinity{Node: true, Zone: true}
	a.CoLocated = []Member{{Job: "bun.1.pkg", Role: RoleBackup, Requirements: Requirements{Capacity: 1},
		Peer: &Peer{Node: "a", Zone: "z1"}}}
	d, err := v.Select(a)
	if err != nil {
		t.Fatalf("Select: %v", err)
	}
	if d.Node != "c" || len(d.Degraded) != 0 {
		t.Fatalf("Node = %s, Degraded = %v; want c, none (the member's peer is on a in z1)", d.Node, d.Degraded)
	}
}
