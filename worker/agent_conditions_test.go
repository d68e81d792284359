package worker_test

import (
	"sync"
	"testing"
	"time"

	"github.com/norsk-oss/norsk-manager/proto/workerpb"
	"github.com/norsk-oss/norsk-manager/worker"
)

// conditionRuntime is a process runtime that reports one condition a test
// sets.
type conditionRuntime struct {
	worker.Runtime
	mu   sync.Mutex
	cond worker.RuntimeCondition
}

func (r *conditionRuntime) Conditions() []worker.RuntimeCondition {
	r.mu.Lock()
	defer r.mu.Unlock()
	return []worker.RuntimeCondition{r.cond}
}

func (r *conditionRuntime) set(c worker.RuntimeCondition) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.cond = c
}

// TestAgent_RuntimeConditions_InHelloAndHealth: a runtime's conditions
// reach the manager in the hello and, as they change, in health.
func TestAgent_RuntimeConditions_InHelloAndHealth(t *testing.T) {
	since := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	rt := &conditionRuntime{Runtime: newRuntime(t, t.TempDir())}
	rt.set(worker.RuntimeCondition{Runtime: "docker", OK: false, Reason: "docker engine at tcp://127.0.0.1:1 unreachable: refused", Since: since})
	a, _ := worker.TestAgent(t, rt, nil)
	s := dialSession(t, a.Addr().String(), "mock-node-1", "n")
	h := s.hello(t)
	if got := h.GetRuntimeConditions(); len(got) != 1 || got[0].GetRuntime() != "docker" || got[0].GetOk() ||
		got[0].GetReason() != "docker engine at tcp://127.0.0.1:1 unreachable: refused" || !got[0].GetSince().AsTime().Equal(since) {
		t.Fatalf("hello conditions %v", got)
	}
	s.respond(t, h, "", 0)
	isHealth := func(ok bool) func(*workerpb.WorkerMessage) bool {
		return func(m *workerpb.WorkerMessage) bool {
			c := m.GetHealth().GetRuntimeConditions()
			return len(c) == 1 && c[0].GetOk() == ok
		}
	}
	s.waitFor(t, "health with the engine down", isHealth(false))
	rt.set(worker.RuntimeCondition{Runtime: "docker", OK: true, Since: since.Add(time.Minute)})
	got := s.waitFor(t, "health with the engine back", isHealth(true)).GetHealth().GetRuntimeConditions()[0]
	if got.GetReason() != "" || !got.GetSince().AsTime().Equal(since.Add(time.Minute)) {
		t.Errorf("health condition %v", got)
	}
}
