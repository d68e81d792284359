package providers

import (
	"sync"
	"testing"
	"time"

	"github.com/norsk-oss/norsk-manager/proto/managerpb"
)

func TestHealth_Transitions(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var mu sync.Mutex
	var changes []managerpb.Health
	h := NewHealth(time.Minute, 3, func() time.Time { return now }, nil)
	h.SetOnChange(func(_ string, v managerpb.Health) { mu.Lock(); changes = append(changes, v); mu.Unlock() })
	at := func() managerpb.Health {
		for _, l := range h.Snapshot() {
			if l.Location == "r" {
				return l.Health
			}
		}
		return managerpb.Health_HEALTHY
	}
	steps := []struct {
		name    string
		advance time.Duration
		record  *Outcome
		want    managerpb.Health
	}{
		{"a success is healthy", 0, ptr(OK), managerpb.Health_HEALTHY},
		{"throttling is unstable", 0, ptr(Throttled), managerpb.Health_UNSTABLE},
		{"the window passes", 2 * time.Minute, nil, managerpb.Health_HEALTHY},
		{"one capacity error", 0, ptr(NoCapacity), managerpb.Health_UNSTABLE},
		{"a describe does not clear it", 0, ptr(OK), managerpb.Health_UNSTABLE},
		{"two", 0, ptr(Outage), managerpb.Health_UNSTABLE},
		{"three fail it", 0, ptr(NoCapacity), managerpb.Health_FAILED},
		{"a launch clears FAILED", 0, ptr(Launched), managerpb.Health_UNSTABLE},
		{"three more", 0, ptr(NoCapacity), managerpb.Health_UNSTABLE},
		{"", 0, ptr(NoCapacity), managerpb.Health_UNSTABLE},
		{"", 0, ptr(NoCapacity), managerpb.Health_FAILED},
		{"FAILED recovers with time alone", 2 * time.Minute, nil, managerpb.Health_HEALTHY},
	}
	for _, s := range steps {
		now = now.Add(s.advance)
		if s.record != nil {
			h.Record("r", *s.record)
		}
		if got := at(); got != s.want {
			t.Fatalf("%s: %s, want %s", s.name, got, s.want)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	want := []managerpb.Health{managerpb.Health_UNSTABLE, managerpb.Health_HEALTHY, managerpb.Health_UNSTABLE, managerpb.Health_FAILED,
		managerpb.Health_UNSTABLE, managerpb.Health_FAILED, managerpb.Health_HEALTHY}
	if len(changes) != len(want) {
		t.Fatalf("changes %v, want %v", changes, want)
	}
	for i := range want {
		if changes[i] != want[i] {
			t.Fatalf("changes %v, want %v", changes, want)
		}
	}

	// Seeded from a record published before a restart: recovers after the window.
	h2 := NewHealth(time.Minute, 3, func() time.Time { return now }, nil)
	h2.Seed("r", managerpb.Health_FAILED)
	if s := h2.Snapshot(); len(s) != 1 || s[0].Health != managerpb.Health_FAILED {
		t.Fatalf("seeded: %v", s)
	}
	now = now.Add(2 * time.Minute)
	if s := h2.Snapshot(); s[0].Health != managerpb.Health_HEALTHY {
		t.Fatalf("seeded FAILED after the window: %v", s)
	}
}

func ptr(o Outcome) *Outcome { return &o }
