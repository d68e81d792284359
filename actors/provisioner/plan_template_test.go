package provisioner

import (
	"slices"
	"testing"

	"github.com/norsk-oss/norsk-manager/proto/managerpb"
)

// TestPlan_TemplateJobCreatesNoNode: a role that runs a product template
// gets no node, nor a place on a node being created for others, and its
// reason says why; the plain roles beside it are planned as before. So a
// template job no node offers cannot make the engine create (and later
// release) node after node.
func TestPlan_TemplateJobCreatesNoNode(t *testing.T) {
	p := &managerpb.Pool{Name: "live", Tiers: []*managerpb.PoolTier{mockTier("cheap", 8, 0)}}
	ws := waiting("live", 2, "plain/primary", "tmpl/primary")
	ws[1].Template = "hello 1.0"
	creating := Node{ID: "live-cheap-1", Pool: "live", Tier: "cheap", State: Creating, Capacity: 8, ForJobs: []string{"tmpl/primary"}}
	for _, tc := range []struct {
		name        string
		nodes       []Node
		wantCreates []string
	}{
		{"nothing being created", nil, []string{"live-cheap-1(mock@):plain/primary"}},
		{"a node being created, even one sized for it", []Node{creating}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := Plan(Input{Pools: pools(p), Waiting: slices.Clone(ws), Nodes: tc.nodes})
			if got := creates(d); !slices.Equal(got, tc.wantCreates) {
				t.Fatalf("creates = %q; want %q", got, tc.wantCreates)
			}
			if _, ok := d.Coming["tmpl/primary"]; ok {
				t.Fatalf("the template role counts on node %s", d.Coming["tmpl/primary"])
			}
			want := "no node is created for it in pool live: it runs product template hello 1.0, and which templates a new node offers is known only once its worker says hello"
			if got := d.Unserved["tmpl/primary"]; got != want {
				t.Fatalf("reason = %q\nwant     %q", got, want)
			}
		})
	}
}
