package provisioner

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/norsk-oss/norsk-manager/proto/commonpb"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
)

func declaring(t *managerpb.PoolTier, name string, versions ...string) *managerpb.PoolTier {
	t.Templates = append(t.Templates, &commonpb.ProductTemplateOffer{Name: name, Versions: versions})
	return t
}

// TestPlan_TierTemplates: a template role gets a new node only from a tier
// declaring its template at its version (other tiers are skipped for it,
// and say why), and room on a node being created counts for it only when
// that node's tier declares it. Plain roles are planned as before, also on
// declaring tiers.
func TestPlan_TierTemplates(t *testing.T) {
	hello := []TemplateRef{{"hello", "1.0"}}
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	cases := []struct {
		name        string
		tiers       []*managerpb.PoolTier
		templates   []TemplateRef
		nodes       []Node
		wantCreates []string
		wantComing  string
		wantReason  string // prefix of Unserved["tmpl/primary"]; "" = served
	}{
		{name: "declaring tier after a plain one",
			tiers:       []*managerpb.PoolTier{mockTier("plain", 8, 0), declaring(mockTier("tmpl", 8, 0), "hello", "0.9", "1.0")},
			templates:   hello,
			wantCreates: []string{"live-tmpl-1(mock@):tmpl/primary"}},
		{name: "version not declared",
			tiers:      []*managerpb.PoolTier{declaring(mockTier("tmpl", 8, 0), "hello", "1.1")},
			templates:  hello,
			wantReason: "no tier of pool live declares product template hello 1.0 (PoolTier.templates)"},
		{name: "other template declared",
			tiers:      []*managerpb.PoolTier{declaring(mockTier("tmpl", 8, 0), "ingest", "1.0")},
			templates:  hello,
			wantReason: "no tier of pool live declares product template hello 1.0"},
		{name: "co-located group needs both",
			tiers: []*managerpb.PoolTier{declaring(mockTier("a", 8, 0), "hello", "1.0"),
				declaring(declaring(mockTier("b", 8, 0), "hello", "1.0"), "ingest", "2")},
			templates:   []TemplateRef{{"hello", "1.0"}, {"ingest", "2"}},
			wantCreates: []string{"live-b-1(mock@):tmpl/primary"}},
		{name: "declaring tier at max_nodes",
			tiers:      []*managerpb.PoolTier{declaring(mockTier("tmpl", 8, 1), "hello", "1.0")},
			templates:  hello,
			nodes:      []Node{{ID: "live-tmpl-1", Pool: "live", Tier: "tmpl", State: Running, Capacity: 8, Hello: true, Offers: offers("hello", "1.0"), CreatedAt: now}},
			wantReason: "no node can be created for it in pool live: tier tmpl: at max_nodes (1)"},
		{name: "room on a node being created of a declaring tier",
			tiers:      []*managerpb.PoolTier{declaring(mockTier("tmpl", 8, 0), "hello", "1.0")},
			templates:  hello,
			nodes:      []Node{{ID: "live-tmpl-1", Pool: "live", Tier: "tmpl", State: Creating, Capacity: 8, ForJobs: []string{"other/primary"}, CreatedAt: now}},
			wantComing: "live-tmpl-1"},
		{name: "room on a node being created of a plain tier",
			tiers:       []*managerpb.PoolTier{mockTier("plain", 8, 0), declaring(mockTier("tmpl", 8, 0), "hello", "1.0")},
			templates:   hello,
			nodes:       []Node{{ID: "live-plain-1", Pool: "live", Tier: "plain", State: Creating, Capacity: 8, ForJobs: []string{"tmpl/primary"}, CreatedAt: now}},
			wantCreates: []string{"live-tmpl-1(mock@):tmpl/primary"}},
		{name: "plain role on a declaring tier",
			tiers:       []*managerpb.PoolTier{declaring(mockTier("tmpl", 8, 0), "hello", "1.0")},
			wantCreates: []string{"live-tmpl-1(mock@):tmpl/primary"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := &managerpb.Pool{Name: "live", Tiers: tc.tiers}
			ws := waiting("live", 2, "tmpl/primary")
			ws[0].Templates = tc.templates
			d := Plan(Input{Now: now, Pools: pools(p), Waiting: ws, Nodes: tc.nodes})
			if got := creates(d); !slices.Equal(got, tc.wantCreates) {
				t.Fatalf("creates = %q; want %q (unserved %q)", got, tc.wantCreates, d.Unserved)
			}
			if got := d.Coming["tmpl/primary"]; got != tc.wantComing {
				t.Fatalf("coming = %q; want %q", got, tc.wantComing)
			}
			got, unserved := d.Unserved["tmpl/primary"]
			if tc.wantReason == "" && unserved {
				t.Fatalf("unserved: %s", got)
			}
			if tc.wantReason != "" && !strings.HasPrefix(got, tc.wantReason) {
				t.Fatalf("reason = %q\nwant prefix %q", got, tc.wantReason)
			}
		})
	}
}

func offers(name string, versions ...string) []*commonpb.ProductTemplateOffer {
	return []*commonpb.ProductTemplateOffer{{Name: name, Versions: versions}}
}

// TestPlan_TemplateLie: a node of a declaring tier that said hello without
// the template keeps the tier out for that template for
// TemplateLieBackoff from its record, read from the nodes alone (so a new
// leader agrees): no second node is created for the role meanwhile, a
// plain role still gets the tier, another declaring tier still serves the
// template, and after the hour the tier is tried again.
func TestPlan_TemplateLie(t *testing.T) {
	created := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	liar := Node{ID: "live-tmpl-1", Pool: "live", Tier: "tmpl", State: Running, Capacity: 8, ForJobs: []string{"tmpl/primary"},
		CreatedAt: created, Hello: true, Offers: offers("hello", "0.9")}
	honest := liar
	honest.Offers = offers("hello", "0.9", "1.0")
	tmplTier := func() *managerpb.PoolTier { return declaring(mockTier("tmpl", 8, 0), "hello", "1.0") }
	cases := []struct {
		name        string
		tiers       []*managerpb.PoolTier
		node        Node
		at          time.Duration
		plain       bool
		wantCreates []string
		wantReason  string
	}{
		{name: "lied: kept out", tiers: []*managerpb.PoolTier{tmplTier()}, node: liar, at: 10 * time.Minute,
			wantReason: "no node can be created for it in pool live: tier tmpl: its node live-tmpl-1 said hello without product template hello 1.0"},
		{name: "lied: plain role still served", tiers: []*managerpb.PoolTier{tmplTier()}, node: liar, at: 10 * time.Minute, plain: true,
			wantCreates: []string{"live-tmpl-2(mock@):tmpl/primary"}},
		{name: "lied: another declaring tier serves", tiers: []*managerpb.PoolTier{tmplTier(), declaring(mockTier("other", 8, 0), "hello", "1.0")},
			node: liar, at: 10 * time.Minute, wantCreates: []string{"live-other-1(mock@):tmpl/primary"}},
		{name: "lied: after the backoff", tiers: []*managerpb.PoolTier{tmplTier()}, node: liar, at: TemplateLieBackoff,
			wantCreates: []string{"live-tmpl-2(mock@):tmpl/primary"}},
		{name: "honest node", tiers: []*managerpb.PoolTier{tmplTier()}, node: honest, at: 10 * time.Minute,
			wantCreates: []string{"live-tmpl-2(mock@):tmpl/primary"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := &managerpb.Pool{Name: "live", Tiers: tc.tiers}
			ws := waiting("live", 2, "tmpl/primary")
			if !tc.plain {
				ws[0].Templates = []TemplateRef{{"hello", "1.0"}}
			}
			d := Plan(Input{Now: created.Add(tc.at), Pools: pools(p), Waiting: ws, Nodes: []Node{tc.node}})
			if got := creates(d); !slices.Equal(got, tc.wantCreates) {
				t.Fatalf("creates = %q; want %q (unserved %q)", got, tc.wantCreates, d.Unserved)
			}
			if got := d.Unserved["tmpl/primary"]; !strings.HasPrefix(got, tc.wantReason) || (tc.wantReason == "") != (got == "") {
				t.Fatalf("reason = %q\nwant prefix %q", got, tc.wantReason)
			}
		})
	}
}
