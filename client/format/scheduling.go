package format

import (
	"strings"
	"time"

	"github.com/norsk-oss/norsk-manager/proto/managerpb"
)

// Scheduling renders a node's scheduling state as one lowercase word:
// "eligible", "cordoned" or "draining" (an unset state is eligible).
func Scheduling(s *managerpb.NodeSchedulingState) string {
	return Enum(s.GetState().String(), "NODE_SCHEDULING_")
}

// NodeState renders a node's lifecycle state for node list's STATE
// column: "started", "stopped (HEALTH_PING_TIME_EXCEEDED)", and, when an
// operator cordoned or drained it, ",cordoned" or ",draining" appended
// ("started,cordoned"), as kubectl shows "Ready,SchedulingDisabled".
func NodeState(n *managerpb.NodeInfo) string {
	state := Enum(n.GetState().String(), "NODE_LIFECYCLE_")
	if n.StopReason != nil {
		state += " (" + Enum(n.GetStopReason().String(), "") + ")"
	}
	if s := n.GetScheduling(); s.GetState() != managerpb.NodeScheduling_NODE_SCHEDULING_ELIGIBLE {
		state += "," + Scheduling(s)
	}
	return state
}

// SchedulingDetails renders a node's scheduling state with when, by whom
// and why, for node get: "cordoned 5m ago by 127.0.0.1:50112: disk swap",
// "eligible" for a node never cordoned, "eligible since 2m ago (by …)"
// after an uncordon.
func SchedulingDetails(now time.Time, s *managerpb.NodeSchedulingState) string {
	if s == nil {
		return "eligible"
	}
	var b strings.Builder
	b.WriteString(Scheduling(s))
	if s.GetState() == managerpb.NodeScheduling_NODE_SCHEDULING_ELIGIBLE {
		b.WriteString(" since")
	}
	b.WriteString(" " + Age(now, s.GetSince()))
	if by := s.GetRequestedBy(); by != "" {
		b.WriteString(" by " + by)
	}
	if r := s.GetReason(); r != "" {
		b.WriteString(": " + r)
	}
	return b.String()
}
