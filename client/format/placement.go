package format

import (
	"strings"

	"github.com/norsk-oss/norsk-manager/proto/managerpb"
)

// Degradation renders the failure domains a placement shares with the
// other replica against the resilience policy, with the state of the
// placement engine's last re-check: "-" when never degraded, "zone",
// "zone (fix available, not moved)" when a node sharing less has room, and
// "resolved" once the other replica moved away.
func Degradation(domains []string, state managerpb.PlacementDegraded_State) string {
	d := strings.Join(domains, ",")
	switch state {
	case managerpb.PlacementDegraded_RESOLVED:
		return "resolved"
	case managerpb.PlacementDegraded_FIX_AVAILABLE:
		return d + " (fix available, not moved)"
	}
	if d == "" {
		return "-"
	}
	return d
}
