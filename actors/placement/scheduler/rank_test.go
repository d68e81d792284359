package scheduler

import (
	"slices"
	"testing"

	"github.com/norsk-oss/norsk-manager/proto/managerpb"
)

func TestShared(t *testing.T) {
	aws, oci := managerpb.Cloud_CLOUD_AWS, managerpb.Cloud_CLOUD_OCI
	all := AntiAffinity{Node: true, Zone: true, Cloud: true}
	peer := &Peer{Node: "p", Zone: "z1", Cloud: aws}
	cases := []struct {
		name string
		node Node
		peer *Peer
		aa   AntiAffinity
		want []Domain
	}{
		{"no peer", node("p"), nil, all, nil},
		{"allow everything", node("p", withZone("z1")), peer, AntiAffinity{}, nil},
		{"the peer's node", node("p", withZone("z1"), func(n *Node) { n.Cloud = aws }), peer, all,
			[]Domain{DomainNode, DomainZone, DomainCloud}},
		{"same zone other node", node("q", withZone("z1"), func(n *Node) { n.Cloud = aws }), peer, all,
			[]Domain{DomainZone, DomainCloud}},
		{"other zone same cloud", node("q", withZone("z2"), func(n *Node) { n.Cloud = aws }), peer, all,
			[]Domain{DomainCloud}},
		{"other cloud", node("q", withZone("z2"), func(n *Node) { n.Cloud = oci }), peer, all, nil},
		{"unknown zone is not another zone", node("q", func(n *Node) { n.Cloud = oci }), peer, all,
			[]Domain{DomainZone}},
		{"peer zone unknown", node("q", withZone("z2")), &Peer{Node: "p"}, AntiAffinity{Zone: true},
			[]Domain{DomainZone}},
		{"only zone forbidden", node("p", withZone("z1")), peer, AntiAffinity{Zone: true},
			[]Domain{DomainZone}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := Shared(&tc.node, tc.peer, tc.aa); !slices.Equal(got, tc.want) {
				t.Fatalf("Shared = %v; want %v", got, tc.want)
			}
		})
	}
}

func TestRank_CheapestTierWithRoom(t *testing.T) {
	tiers := []Tier{
		{Name: "cheap", Selector: map[string]string{"tier": "cheap"}},
		{Name: "dear", Selector: map[string]string{"tier": "dear"}},
	}
	nodes := []Node{
		node("c1", withTags("tier", "cheap"), withCapacity(4)),
		node("d1", withTags("tier", "dear")),
		// In both tiers: it counts as the cheaper one.
		node("x", withTags("tier", "cheap"), withCapacity(2)),
	}
	busyDear := []Placed{{Job: "y", Role: RolePrimary, Node: "d1", Capacity: 9}}
	with := func(a Ask) Ask { a.Tiers = tiers; a.Pool = "p"; return a }
	runSelectCases(t, []selectCase{
		{name: "cheap tier with room beats a fuller dear node", nodes: nodes, placed: busyDear, ask: with(ask("j", 1)), want: "x"},
		{name: "cheap tier full goes dear", nodes: nodes,
			placed: append([]Placed{{Job: "u", Role: RolePrimary, Node: "c1", Capacity: 4}, {Job: "w", Role: RolePrimary, Node: "x", Capacity: 2}}, busyDear...),
			ask:    with(ask("j", 1)), want: "d1", filtered: map[string]int{FilterCapacity: 2}},
		{name: "dear when cheap lacks room", nodes: nodes, ask: with(ask("j", 5)), want: "d1",
			filtered: map[string]int{FilterCapacity: 2}},
	})
	v, _ := NewView(nodes, nil)
	d, err := v.Select(with(ask("j", 5)))
	if err != nil || d.Tier != "dear" || d.TierIndex != 1 {
		t.Fatalf("Select = %+v, %v; want tier dear (index 1)", d, err)
	}
}

func TestRank_Pack(t *testing.T) {
	nodes := []Node{node("a"), node("b"), node("c", withCapacity(20)), node("d")}
	runSelectCases(t, []selectCase{
		{name: "most allocated after placing", nodes: nodes,
			placed: []Placed{{Job: "x", Role: RolePrimary, Node: "b", Capacity: 6}, {Job: "y", Role: RolePrimary, Node: "c", Capacity: 14}},
			ask:    ask("j", 2), want: "b"},
		{name: "fraction, not units: a big node half full loses to a small one more full", nodes: nodes,
			placed: []Placed{{Job: "x", Role: RolePrimary, Node: "b", Capacity: 7}, {Job: "y", Role: RolePrimary, Node: "c", Capacity: 12}},
			ask:    ask("j", 2), want: "b"},
		{name: "the fullest does not fit: next fullest", nodes: nodes,
			placed: []Placed{{Job: "x", Role: RolePrimary, Node: "b", Capacity: 9}, {Job: "y", Role: RolePrimary, Node: "d", Capacity: 5}},
			ask:    ask("j", 2), want: "d"},
		{name: "ties by node id", nodes: nodes[:2], ask: ask("j", 2), want: "a"},
	})
}

func TestRank_PreferAndAvoid(t *testing.T) {
	nodes := []Node{node("a"), node("b"), node("c")}
	placed := []Placed{{Job: "x", Role: RolePrimary, Node: "a", Capacity: 5}}
	prefer := func(id NodeID, avoid ...NodeID) Ask {
		a := ask("j", 2)
		a.PreferNode, a.AvoidNodes = id, avoid
		return a
	}
	runSelectCases(t, []selectCase{
		{name: "the preferred node over packing", nodes: nodes, placed: placed, ask: prefer("c"), want: "c"},
		{name: "preferred but full", nodes: nodes, placed: []Placed{{Job: "x", Role: RolePrimary, Node: "c", Capacity: 9}},
			ask: prefer("c"), want: "a"},
		{name: "avoided node ranks last", nodes: nodes, placed: placed, ask: prefer("", "a"), want: "b"},
		{name: "avoided node still used alone", nodes: nodes[:1], placed: placed, ask: prefer("", "a"), want: "a"},
	})
}
