package node

import (
	"testing"
	"time"
)

// TestProvisionUnrecorded: a release of an engine-created node is refused
// while a provision is queued for the worker session, and for
// releaseSettle after one was sent after the node's idle instant (the job
// grain records its instance only after this grain's answer, so the
// records show nothing yet); one sent before the idle instant was seen
// ended, and delays nothing.
func TestProvisionUnrecorded(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	idle := now.Add(-time.Minute)
	cases := []struct {
		name   string
		queued int
		sentAt time.Time
		want   bool
	}{
		{"never provisioned", 0, time.Time{}, false},
		{"one queued for the session", 1, time.Time{}, true},
		{"one sent just now", 0, now, true},
		{"one sent just under the settle time ago", 0, now.Add(-releaseSettle + time.Millisecond), true},
		{"one sent the settle time ago: recorded by now", 0, now.Add(-releaseSettle), false},
		{"one sent before the idle instant", 0, idle.Add(-time.Second), false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := provisionUnrecorded(tc.queued, tc.sentAt, idle, now); got != tc.want {
				t.Fatalf("provisionUnrecorded = %v, want %v", got, tc.want)
			}
		})
	}
}
