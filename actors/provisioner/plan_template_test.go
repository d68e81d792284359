package provisioner

import (
	"slices"
	"strings"
	"testing"

	"github.com/norsk-oss/norsk-manager/proto/managerpb"
)

// TestPlan_TemplateJobCreatesNoNode: a role that runs a product template
// no tier declares (PoolTier.templates) gets no node, nor a place on a
// node being created for others, and its reason says why; the plain roles beside it are planned as before. So a
// template job no node offers cannot make the engine create (and later
// release) node after node.
func TestPlan_TemplateJobCreatesNoNode(t *testing.T) {
	p := &managerpb.Pool{Name: "live", Tiers: []*managerpb.PoolTier{mockTier("cheap", 8, 0)}}
	ws := waiting("live", 2, "plain/primary", "tmpl/primary")
	ws[1].Templates = []TemplateRef{{"hello", "1.0"}}
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
			want := "no tier of pool live declares product template hello 1.0 (PoolTier.templates)"
			if got := d.Unserved["tmpl/primary"]; !strings.HasPrefix(got, want) {
				t.Fatalf("reason = %q\nwant     %q", got, want)
			}
		})
	}
}
