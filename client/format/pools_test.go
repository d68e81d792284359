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
