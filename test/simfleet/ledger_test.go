package simfleet

import (
	"testing"

	"github.com/norsk-oss/norsk-manager/worker"
)

func TestLedger_Started_Classifies(t *testing.T) {
	k := worker.JobKey{JobID: "j", Role: "primary"}
	type step struct {
		stop           bool
		node, instance string
	}
	cases := []struct {
		name                string
		steps               []step
		violations, repeats int
		running             []string
	}{
		{name: "one start", steps: []step{{node: "a", instance: "i1"}}, running: []string{"a"}},
		{name: "same instance again on its node is a repeat", steps: []step{{node: "a", instance: "i1"}, {node: "a", instance: "i1"}},
			repeats: 1, running: []string{"a"}},
		{name: "another instance on the same node", steps: []step{{node: "a", instance: "i1"}, {node: "a", instance: "i2"}},
			violations: 1, running: []string{"a"}},
		{name: "another node", steps: []step{{node: "a", instance: "i1"}, {node: "b", instance: "i1"}},
			violations: 1, running: []string{"a", "b"}},
		{name: "start after stop", steps: []step{{node: "a", instance: "i1"}, {stop: true, node: "a"}, {node: "b", instance: "i2"}},
			running: []string{"b"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			l := newLedger()
			for _, s := range tc.steps {
				if s.stop {
					l.stopped(k, s.node)
				} else {
					l.started(k, s.node, s.instance)
				}
			}
			st := l.stats()
			if st.Violations != tc.violations || st.Repeats != tc.repeats || len(st.ViolationLog) != tc.violations {
				t.Fatalf("violations %d (log %q), repeats %d; want %d, %d", st.Violations, st.ViolationLog, st.Repeats, tc.violations, tc.repeats)
			}
			if got := l.nodesOf(k); len(got) != len(tc.running) || (len(got) > 0 && got[0] != tc.running[0]) {
				t.Fatalf("running on %v, want %v", got, tc.running)
			}
		})
	}
}
