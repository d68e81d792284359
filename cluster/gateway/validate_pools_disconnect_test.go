package gateway

import (
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/norsk-oss/norsk-manager/proto/managerpb"
)

// TestValidatePool_Disconnect: pool.disconnect's fields are UNSPECIFIED
// or named values (others are InvalidArgument naming the field, and the
// input is left as it was); the stored pool says what applies, each
// UNSPECIFIED field filled with the live-video default (fence on, replace
// at once).
func TestValidatePool_Disconnect(t *testing.T) {
	type dc = managerpb.PoolDisconnect
	on, off := managerpb.PoolDisconnect_FENCE_ON, managerpb.PoolDisconnect_FENCE_OFF
	now, wait := managerpb.PoolDisconnect_REPLACE_IMMEDIATELY, managerpb.PoolDisconnect_REPLACE_WAIT
	for _, tc := range []struct {
		name  string
		in    *dc
		want  *dc
		field string // "" = valid
	}{
		{"unset: defaults", nil, &dc{Fence: on, Replace: now}, ""},
		{"empty: defaults", &dc{}, &dc{Fence: on, Replace: now}, ""},
		{"fence off, replace unset", &dc{Fence: off}, &dc{Fence: off, Replace: now}, ""},
		{"replace wait, fence unset", &dc{Replace: wait}, &dc{Fence: on, Replace: wait}, ""},
		{"both set", &dc{Fence: off, Replace: wait}, &dc{Fence: off, Replace: wait}, ""},
		{"unknown fence", &dc{Fence: 7}, nil, "pool.disconnect.fence"},
		{"unknown replace", &dc{Fence: on, Replace: -1}, nil, "pool.disconnect.replace"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := &managerpb.Pool{Name: "live", Tiers: []*managerpb.PoolTier{{Name: "any"}}, Disconnect: tc.in}
			out, err := validatePool(p)
			if tc.field != "" {
				if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), tc.field) {
					t.Fatalf("err = %v, want InvalidArgument naming %s", err, tc.field)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got := out.GetDisconnect()
			if got.GetFence() != tc.want.GetFence() || got.GetReplace() != tc.want.GetReplace() {
				t.Errorf("stored disconnect %v, want %v", got, tc.want)
			}
			if p.GetDisconnect() != tc.in {
				t.Error("validatePool modified its input")
			}
		})
	}
}
