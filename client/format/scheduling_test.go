package format_test

import (
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/norsk-oss/norsk-manager/client/format"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
)

func TestNodeStateAndSchedulingDetails(t *testing.T) {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	since := timestamppb.New(now.Add(-5 * time.Minute))
	stopped := managerpb.NodeStopping_HEALTH_PING_TIME_EXCEEDED
	cases := []struct {
		name    string
		node    *managerpb.NodeInfo
		state   string
		details string
	}{
		{"never cordoned", &managerpb.NodeInfo{State: managerpb.NodeLifecycle_NODE_LIFECYCLE_STARTED}, "started", "eligible"},
		{"cordoned", &managerpb.NodeInfo{State: managerpb.NodeLifecycle_NODE_LIFECYCLE_STARTED, Scheduling: &managerpb.NodeSchedulingState{
			State: managerpb.NodeScheduling_NODE_SCHEDULING_CORDONED, RequestedBy: "127.0.0.1:5000", Reason: "disk swap", Since: since}},
			"started,cordoned", "cordoned 5m ago by 127.0.0.1:5000: disk swap"},
		{"stopped and draining", &managerpb.NodeInfo{State: managerpb.NodeLifecycle_NODE_LIFECYCLE_STOPPED, StopReason: &stopped,
			Scheduling: &managerpb.NodeSchedulingState{State: managerpb.NodeScheduling_NODE_SCHEDULING_DRAINING, Since: since}},
			"stopped (health_ping_time_exceeded),draining", "draining 5m ago"},
		{"uncordoned", &managerpb.NodeInfo{State: managerpb.NodeLifecycle_NODE_LIFECYCLE_REGISTERED, Scheduling: &managerpb.NodeSchedulingState{
			RequestedBy: "127.0.0.1:5000", Since: since}}, "registered", "eligible since 5m ago by 127.0.0.1:5000"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := format.NodeState(tc.node); got != tc.state {
				t.Errorf("NodeState = %q, want %q", got, tc.state)
			}
			if got := format.SchedulingDetails(now, tc.node.GetScheduling()); got != tc.details {
				t.Errorf("SchedulingDetails = %q, want %q", got, tc.details)
			}
		})
	}
}
