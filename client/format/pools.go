package format

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/norsk-oss/norsk-manager/proto/managerpb"
)

// PoolTiers renders a pool's tiers in order as "name>name2>…" (cheap to
// expensive), or "-" if it has none.
func PoolTiers(p *managerpb.Pool) string {
	if len(p.GetTiers()) == 0 {
		return "-"
	}
	names := make([]string, len(p.GetTiers()))
	for i, t := range p.GetTiers() {
		names[i] = t.GetName()
	}
	return strings.Join(names, ">")
}

// MaxNodes renders a tier's max_nodes: the number, or "unlimited" for 0.
func MaxNodes(n uint32) string {
	if n == 0 {
		return "unlimited"
	}
	return strconv.FormatUint(uint64(n), 10)
}

// RestartCeiling renders a restart ceiling as "5 failures in 10m0s", or
// "-" if it is unset.
func RestartCeiling(c *managerpb.RestartCeiling) string {
	if c == nil {
		return "-"
	}
	return fmt.Sprintf("%d failures in %s", c.GetMaxFailures(), time.Duration(c.GetWindowSeconds())*time.Second)
}

// Preemption renders a pool's preemption settings (issue 13 §3): "off",
// "on" (a HIGH job preempts at once), or "on, after waiting up to 2m0s for
// a node being provisioned".
func Preemption(p *managerpb.Pool) string {
	switch w := p.GetHighPriorityProvisionWaitSeconds(); {
	case p.GetPreemptionDisabled():
		return "off"
	case w == 0:
		return "on"
	default:
		return fmt.Sprintf("on, after waiting up to %s for a node being provisioned", time.Duration(w)*time.Second)
	}
}

// BronzeDrop renders low_priority_max_wait_seconds: "never" for 0, else
// "LOW priority jobs unplaced for 5m0s".
func BronzeDrop(seconds uint32) string {
	if seconds == 0 {
		return "never"
	}
	return fmt.Sprintf("LOW priority jobs unplaced for %s", time.Duration(seconds)*time.Second)
}

// PoolEventDetails renders the key fields of a pool carried by an event:
// name, version and tiers.
func PoolEventDetails(p *managerpb.Pool) string {
	return fmt.Sprintf("pool=%s version=%d tiers=%s", Value(p.GetName()), p.GetVersion(), PoolTiers(p))
}
