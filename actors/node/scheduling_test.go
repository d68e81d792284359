package node

import (
	"testing"

	"github.com/norsk-oss/norsk-manager/proto/internalpb"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
)

func TestSchedulable(t *testing.T) {
	started := managerpb.NodeLifecycle_NODE_LIFECYCLE_STARTED
	sched := func(s managerpb.NodeScheduling, by, reason string) *managerpb.NodeSchedulingState {
		return &managerpb.NodeSchedulingState{State: s, RequestedBy: by, Reason: reason}
	}
	cases := []struct {
		name     string
		rec      *internalpb.NodeRecord
		ok       bool
		why      string
		draining bool
	}{
		{"nil record", nil, false, "node unknown", false},
		{"started, never cordoned", &internalpb.NodeRecord{State: started}, true, "", false},
		{"started, uncordoned", &internalpb.NodeRecord{State: started, Scheduling: sched(managerpb.NodeScheduling_NODE_SCHEDULING_ELIGIBLE, "127.0.0.1:5", "")}, true, "", false},
		{"registered slot", &internalpb.NodeRecord{}, false, "node is registered", false},
		{"starting", &internalpb.NodeRecord{State: managerpb.NodeLifecycle_NODE_LIFECYCLE_STARTING}, false, "node is starting", false},
		{"stopping", &internalpb.NodeRecord{State: managerpb.NodeLifecycle_NODE_LIFECYCLE_STOPPING}, false, "node is stopping", false},
		{"cordoned with reason", &internalpb.NodeRecord{State: started, Scheduling: sched(managerpb.NodeScheduling_NODE_SCHEDULING_CORDONED, "127.0.0.1:5", "disk swap")},
			false, "node is cordoned (by 127.0.0.1:5, reason: disk swap)", false},
		{"cordoned, nothing said", &internalpb.NodeRecord{State: started, Scheduling: sched(managerpb.NodeScheduling_NODE_SCHEDULING_CORDONED, "", "")},
			false, "node is cordoned", false},
		{"draining", &internalpb.NodeRecord{State: started, Scheduling: sched(managerpb.NodeScheduling_NODE_SCHEDULING_DRAINING, "10.0.0.1:9", "")},
			false, "node is draining (by 10.0.0.1:9)", true},
		{"stopped and draining: the lifecycle is said first", &internalpb.NodeRecord{State: managerpb.NodeLifecycle_NODE_LIFECYCLE_STOPPED,
			Scheduling: sched(managerpb.NodeScheduling_NODE_SCHEDULING_DRAINING, "", "")}, false, "node is stopped", true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ok, why := Schedulable(tc.rec)
			if ok != tc.ok || why != tc.why {
				t.Errorf("Schedulable = (%v, %q), want (%v, %q)", ok, why, tc.ok, tc.why)
			}
			if got := Draining(tc.rec); got != tc.draining {
				t.Errorf("Draining = %v, want %v", got, tc.draining)
			}
			cordoned := tc.rec.GetScheduling().GetState() == managerpb.NodeScheduling_NODE_SCHEDULING_CORDONED
			if got := Cordoned(tc.rec); got != cordoned {
				t.Errorf("Cordoned = %v, want %v", got, cordoned)
			}
		})
	}
}
