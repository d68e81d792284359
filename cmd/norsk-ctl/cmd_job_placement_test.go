package main

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/norsk-oss/norsk-manager/proto/managerpb"
)

func TestWritePlacement(t *testing.T) {
	since := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	cases := []struct {
		name string
		in   *managerpb.PlacementInfo
		want string
	}{
		{"placed and unplaced", &managerpb.PlacementInfo{JobId: "j", AutoPlaced: true, Roles: []*managerpb.RolePlacement{
			{Role: "primary", NodeId: "n1", Tier: "cheap", DegradedDomains: []string{"zone"}},
			{Role: "backup", LastAttempt: &managerpb.PlacementAttempt{Since: timestamppb.New(since), Reason: "job j role backup fits no node: 5 nodes evaluated: ...",
				NodesEvaluated: 5, Filters: []*managerpb.PlacementFilterCount{
					{Filter: "cloud", NodesRemoved: 3, Detail: "constraint cloud filtered 3 nodes (wants CLOUD_AWS)"},
					{Filter: "capacity", NodesRemoved: 2, Detail: "capacity exhausted on 2 nodes (needs 2 units)"}}}},
		}}, `Job:          j
Auto-placed:  yes
ROLE     NODE          TIER   DEGRADED
primary  n1            cheap  zone
backup   (not placed)  -      -

Placement failure (backup), since 2026-01-02T03:04:05Z:
  job j role backup fits no node: 5 nodes evaluated: ...
  5 nodes evaluated:
    * constraint cloud filtered 3 nodes (wants CLOUD_AWS)
    * capacity exhausted on 2 nodes (needs 2 units)
`},
		{"terminal, nothing attempted", &managerpb.PlacementInfo{JobId: "k", AutoPlaced: true, TerminalReason: "restart ceiling exceeded"}, `Job:          k
Auto-placed:  yes
Terminal:     restart ceiling exceeded (never placed again until UpdateJob clears it)
No role placed and no attempt recorded yet.
`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var b strings.Builder
			require.NoError(t, writePlacement(&b, tc.in))
			require.Equal(t, tc.want, b.String())
		})
	}
}
