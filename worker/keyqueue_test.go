package worker

import (
	"slices"
	"sync"
	"testing"
	"time"
)

// queueRecorder runs a keyQueue over tracked goroutines and records what
// ran, in order.
type queueRecorder struct {
	q  *keyQueue
	wg sync.WaitGroup

	mu  sync.Mutex
	ran []string
}

func newQueueRecorder() *queueRecorder {
	r := &queueRecorder{}
	r.q = newKeyQueue(func(f func()) {
		r.wg.Add(1)
		go func() {
			defer r.wg.Done()
			f()
		}()
	})
	return r
}

// step returns a function that waits for gate (if not nil), then records
// name.
func (r *queueRecorder) step(name string, gate <-chan struct{}) func() {
	return func() {
		if gate != nil {
			<-gate
		}
		r.mu.Lock()
		r.ran = append(r.ran, name)
		r.mu.Unlock()
	}
}

func (r *queueRecorder) snapshot() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.ran)
}

func (r *queueRecorder) waitFor(t *testing.T, name string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !slices.Contains(r.snapshot(), name) {
		if time.Now().After(deadline) {
			t.Fatalf("%s did not run; ran %v", name, r.snapshot())
		}
		time.Sleep(time.Millisecond)
	}
}

func before(ran []string, a, b string) bool {
	i, j := slices.Index(ran, a), slices.Index(ran, b)
	return i >= 0 && j >= 0 && i < j
}

func TestKeyQueue_DoJob_BarrierForEveryRole(t *testing.T) {
	r := newQueueRecorder()
	jp, jb := JobKey{JobID: "j", Role: "primary"}, JobKey{JobID: "j", Role: "backup"}
	other := JobKey{JobID: "k", Role: "primary"}
	gateP, gateB := make(chan struct{}), make(chan struct{})
	r.q.Do(jp, r.step("stop j/primary", gateP))
	r.q.Do(jb, r.step("stop j/backup", gateB))
	r.q.DoJob("j", r.step("delete j", nil))
	r.q.Do(jb, r.step("start j/backup", nil))
	r.q.DoJob("j", r.step("delete j again", nil))
	r.q.Do(jp, r.step("start j/primary", nil))
	r.q.Do(other, r.step("start k", nil))
	r.q.DoJob("k", r.step("delete k", nil))

	// Another job is not held up by j's barrier.
	r.waitFor(t, "delete k")
	if ran := r.snapshot(); slices.Contains(ran, "delete j") || !before(ran, "start k", "delete k") {
		t.Fatalf("ran %v", ran)
	}
	close(gateB)
	r.waitFor(t, "stop j/backup")
	if ran := r.snapshot(); slices.Contains(ran, "delete j") || slices.Contains(ran, "start j/backup") {
		t.Fatalf("j's barrier ran while a role of j was busy: %v", ran)
	}
	close(gateP)
	r.waitFor(t, "start j/primary")
	r.wg.Wait()
	ran := r.snapshot()
	for _, order := range [][2]string{
		{"stop j/primary", "delete j"}, {"stop j/backup", "delete j"},
		{"delete j", "start j/backup"}, {"start j/backup", "delete j again"},
		{"delete j again", "start j/primary"},
	} {
		if !before(ran, order[0], order[1]) {
			t.Errorf("%s did not run before %s: %v", order[0], order[1], ran)
		}
	}
	if len(ran) != 8 {
		t.Errorf("ran %v, want 8 steps", ran)
	}
}

func TestKeyQueue_DoJob_IdleJobRunsAtOnce(t *testing.T) {
	r := newQueueRecorder()
	r.q.DoJob("j", r.step("delete j", nil))
	r.q.Do(JobKey{JobID: "j", Role: "primary"}, r.step("start j", nil))
	r.wg.Wait()
	if ran := r.snapshot(); !slices.Equal(ran, []string{"delete j", "start j"}) {
		t.Errorf("ran %v", ran)
	}
	r.q.Close()
	if r.q.DoJob("j", r.step("late", nil)) {
		t.Error("DoJob accepted work after Close")
	}
}
