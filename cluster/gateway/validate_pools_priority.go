package gateway

import "github.com/norsk-oss/norsk-manager/proto/managerpb"

// Limits of a pool's priority settings (issue 13 §3; docs/design/pools.md,
// docs/design/placement.md "Priorities").
const (
	// maxLowPriorityWaitSeconds bounds low_priority_max_wait_seconds: 30
	// days (a longer wait is "never": 0).
	maxLowPriorityWaitSeconds = 30 * 24 * 60 * 60
	// maxProvisionWaitSeconds bounds high_priority_provision_wait_seconds:
	// one hour (a HIGH job off air for longer than a node takes to boot is
	// not what the setting is for).
	maxProvisionWaitSeconds = 60 * 60
)

// checkPoolPriorities checks a pool's priority settings: InvalidArgument
// naming the field when one is out of range. 0 is always valid (never
// drop; do not wait for a provisioner).
func checkPoolPriorities(p *managerpb.Pool) error {
	if s := p.GetLowPriorityMaxWaitSeconds(); s > maxLowPriorityWaitSeconds {
		return invalid("pool.low_priority_max_wait_seconds", "is %d; it must be at most %d (30 days), or 0 to never drop a LOW priority job",
			s, maxLowPriorityWaitSeconds)
	}
	if s := p.GetHighPriorityProvisionWaitSeconds(); s > maxProvisionWaitSeconds {
		return invalid("pool.high_priority_provision_wait_seconds", "is %d; it must be at most %d (1 hour), or 0 to preempt without waiting for a provisioner",
			s, maxProvisionWaitSeconds)
	}
	return nil
}
