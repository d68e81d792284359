package gateway

import (
	"fmt"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/norsk-oss/norsk-manager/proto/managerpb"
)

func TestValidatePool(t *testing.T) {
	tier := func(name string, sel map[string]string) *managerpb.PoolTier {
		return &managerpb.PoolTier{Name: name, NodeSelector: sel}
	}
	pool := func(name string, tiers ...*managerpb.PoolTier) *managerpb.Pool {
		return &managerpb.Pool{Name: name, Tiers: tiers}
	}
	withCeiling := func(p *managerpb.Pool, fails, window uint32) *managerpb.Pool {
		p.RestartCeiling = &managerpb.RestartCeiling{MaxFailures: fails, WindowSeconds: window}
		return p
	}
	many := make([]*managerpb.PoolTier, maxPoolTiers+1)
	for i := range many {
		many[i] = tier(fmt.Sprintf("t%d", i), nil)
	}
	bigSel := map[string]string{}
	for i := range maxSelectorTags + 1 {
		bigSel[fmt.Sprintf("k%02d", i)] = "v"
	}
	cases := []struct {
		name  string
		pool  *managerpb.Pool
		field string // "" = valid
	}{
		{"minimal", pool("live", tier("any", nil)), ""},
		{"full", withCeiling(&managerpb.Pool{Name: "eu-live.1", Description: "EU live events", Tiers: []*managerpb.PoolTier{
			tier("onprem", map[string]string{"site": "osl", "zone": "a"}),
			{Name: "aws_spot", NodeSelector: map[string]string{"cloud": "aws"}, MaxNodes: 20}}}, 3, 300), ""},
		{"16 tiers", pool("p", many[:maxPoolTiers]...), ""},
		{"ceiling at its limits", withCeiling(pool("p", tier("a", nil)), maxCeilingFails, maxCeilingWindow), ""},
		{"empty name", pool("", tier("a", nil)), "pool.name"},
		{"name with slash", pool("a/b", tier("a", nil)), "pool.name"},
		{"name with space", pool("my pool", tier("a", nil)), "pool.name"},
		{"name starting with dot", pool(".p", tier("a", nil)), "pool.name"},
		{"name too long", pool(strings.Repeat("p", maxNewIDLen+1), tier("a", nil)), "pool.name"},
		{"no tiers", pool("p"), "pool.tiers"},
		{"17 tiers", pool("p", many...), "pool.tiers"},
		{"empty tier name", pool("p", tier("", nil)), "pool.tiers[0].name"},
		{"tier name with dot", pool("p", tier("a", nil), tier("b.c", nil)), "pool.tiers[1].name"},
		{"duplicate tier name", pool("p", tier("a", nil), tier("b", nil), tier("a", nil)), "pool.tiers[2].name"},
		{"empty selector key", pool("p", tier("a", map[string]string{"": "x"})), "pool.tiers[0].node_selector key"},
		{"empty selector value", pool("p", tier("a", map[string]string{"zone": ""})), `pool.tiers[0].node_selector["zone"]`},
		{"control character in value", pool("p", tier("a", map[string]string{"zone": "a\nb"})), `pool.tiers[0].node_selector["zone"]`},
		{"selector key too long", pool("p", tier("a", map[string]string{strings.Repeat("k", maxTagLen+1): "x"})), "pool.tiers[0].node_selector key"},
		{"selector too big", pool("p", tier("a", bigSel)), "pool.tiers[0].node_selector"},
		{"zero failures", withCeiling(pool("p", tier("a", nil)), 0, 600), "pool.restart_ceiling.max_failures"},
		{"too many failures", withCeiling(pool("p", tier("a", nil)), maxCeilingFails+1, 600), "pool.restart_ceiling.max_failures"},
		{"zero window", withCeiling(pool("p", tier("a", nil)), 5, 0), "pool.restart_ceiling.window_seconds"},
		{"window over a day", withCeiling(pool("p", tier("a", nil)), 5, maxCeilingWindow+1), "pool.restart_ceiling.window_seconds"},
		{"priority settings at their limits", &managerpb.Pool{Name: "p", Tiers: []*managerpb.PoolTier{tier("a", nil)},
			LowPriorityMaxWaitSeconds: maxLowPriorityWaitSeconds, HighPriorityProvisionWaitSeconds: maxProvisionWaitSeconds, PreemptionDisabled: true}, ""},
		{"bronze drop wait too long", &managerpb.Pool{Name: "p", Tiers: []*managerpb.PoolTier{tier("a", nil)},
			LowPriorityMaxWaitSeconds: maxLowPriorityWaitSeconds + 1}, "pool.low_priority_max_wait_seconds"},
		{"provision wait too long", &managerpb.Pool{Name: "p", Tiers: []*managerpb.PoolTier{tier("a", nil)},
			HighPriorityProvisionWaitSeconds: maxProvisionWaitSeconds + 1}, "pool.high_priority_provision_wait_seconds"},
		{"pool too big (unknown fields count)", func() *managerpb.Pool {
			p := pool("p", tier("a", nil))
			p.ProtoReflect().SetUnknown(protowire.AppendBytes(protowire.AppendTag(nil, 999, protowire.BytesType), make([]byte, maxPoolBytes)))
			return p
		}(), "pool"},
		{"bad description", &managerpb.Pool{Name: "p", Description: "a\x00", Tiers: []*managerpb.PoolTier{tier("a", nil)}}, "pool.description"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			out, err := validatePool(tc.pool)
			if tc.field == "" {
				if err != nil {
					t.Fatalf("unexpected error: %v", err)
				}
				if out.GetRestartCeiling() == nil || out.GetVersion() != 0 {
					t.Fatalf("stored pool %v: want a restart ceiling and no version", out)
				}
				return
			}
			if status.Code(err) != codes.InvalidArgument || !strings.HasPrefix(status.Convert(err).Message(), tc.field+":") {
				t.Fatalf("got %v, want InvalidArgument naming %s", err, tc.field)
			}
		})
	}
}

// TestValidatePool_Defaults: an unset ceiling becomes the default, a set
// one is kept, a version is dropped, and the input is not modified.
func TestValidatePool_Defaults(t *testing.T) {
	in := &managerpb.Pool{Name: "p", Version: 7, Tiers: []*managerpb.PoolTier{{Name: "a"}}}
	out, err := validatePool(in)
	if err != nil {
		t.Fatal(err)
	}
	if c := out.GetRestartCeiling(); c.GetMaxFailures() != 5 || c.GetWindowSeconds() != 600 {
		t.Fatalf("default ceiling = %v, want 5 in 600 s", c)
	}
	if out.GetVersion() != 0 || in.GetVersion() != 7 || in.GetRestartCeiling() != nil {
		t.Fatalf("in %v, out %v: the input changed or the version was kept", in, out)
	}
	in.RestartCeiling = &managerpb.RestartCeiling{MaxFailures: 2, WindowSeconds: 60}
	out, err = validatePool(in)
	if err != nil {
		t.Fatal(err)
	}
	if c := out.GetRestartCeiling(); c.GetMaxFailures() != 2 || c.GetWindowSeconds() != 60 {
		t.Fatalf("ceiling = %v, want the pool's own", c)
	}
}
