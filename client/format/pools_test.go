package format

import (
	"testing"

	"github.com/norsk-oss/norsk-manager/proto/managerpb"
)

func TestPoolValues(t *testing.T) {
	cases := []struct {
		name, got, want string
	}{
		{"tiers", PoolTiers(&managerpb.Pool{Tiers: []*managerpb.PoolTier{{Name: "a"}, {Name: "b"}, {Name: "c"}}}), "a>b>c"},
		{"no tiers", PoolTiers(&managerpb.Pool{}), "-"},
		{"unlimited", MaxNodes(0), "unlimited"},
		{"max nodes", MaxNodes(12), "12"},
		{"ceiling", RestartCeiling(&managerpb.RestartCeiling{MaxFailures: 5, WindowSeconds: 600}), "5 failures in 10m0s"},
		{"no ceiling", RestartCeiling(nil), "-"},
		{"preemption on", Preemption(&managerpb.Pool{}), "on"},
		{"preemption off", Preemption(&managerpb.Pool{PreemptionDisabled: true, HighPriorityProvisionWaitSeconds: 60}), "off"},
		{"preemption after a wait", Preemption(&managerpb.Pool{HighPriorityProvisionWaitSeconds: 120}), "on, after waiting up to 2m0s for a node being provisioned"},
		{"bronze never", BronzeDrop(0), "never"},
		{"bronze drop", BronzeDrop(300), "LOW priority jobs unplaced for 5m0s"},
		{"event with a name to quote", PoolEventDetails(&managerpb.Pool{Name: "", Version: 1}), `pool="" version=1 tiers=-`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if tc.got != tc.want {
				t.Fatalf("got %q, want %q", tc.got, tc.want)
			}
		})
	}
}
