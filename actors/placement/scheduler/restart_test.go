package scheduler

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestRestartPolicy_Next(t *testing.T) {
	p := DefaultRestartPolicy()
	now := time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)
	ago := func(ds ...time.Duration) []time.Time {
		var ts []time.Time
		for _, d := range ds {
			ts = append(ts, now.Add(-d))
		}
		return ts
	}
	cases := []struct {
		name     string
		policy   RestartPolicy
		failures []time.Time
		want     RestartVerdict
	}{
		{name: "no failures", failures: nil, want: RestartVerdict{}},
		{name: "first failure just now: same node after 1s", failures: ago(0),
			want: RestartVerdict{Failures: 1, Backoff: time.Second, Wait: time.Second, SameNode: true}},
		{name: "second failure: elsewhere after 2s", failures: ago(0, time.Minute),
			want: RestartVerdict{Failures: 2, Backoff: 2 * time.Second, Wait: 2 * time.Second}},
		{name: "backoff partly waited", failures: ago(3*time.Second, time.Minute, 2*time.Minute),
			want: RestartVerdict{Failures: 3, Backoff: 4 * time.Second, Wait: time.Second}},
		{name: "backoff over", failures: ago(time.Minute, 2*time.Minute),
			want: RestartVerdict{Failures: 2, Backoff: 2 * time.Second}},
		{name: "any order: the latest counts", failures: ago(2*time.Minute, 0, time.Minute, 3*time.Minute),
			want: RestartVerdict{Failures: 4, Backoff: 8 * time.Second, Wait: 8 * time.Second}},
		{name: "fifth failure in ten minutes: exceeded", failures: ago(0, 1, 2, 3, 4),
			want: RestartVerdict{Failures: 5, Exceeded: true}},
		{name: "old failures leave the window", failures: ago(0, 10*time.Minute, 11*time.Minute, 12*time.Minute, 13*time.Minute),
			want: RestartVerdict{Failures: 1, Backoff: time.Second, Wait: time.Second, SameNode: true}},
		{name: "a failure stamped after now counts", failures: []time.Time{now.Add(time.Second)},
			want: RestartVerdict{Failures: 1, Backoff: time.Second, Wait: 2 * time.Second, SameNode: true}},
		{name: "fourth failure: the last restart, after 8s", failures: ago(0, 1, 2, 3),
			want: RestartVerdict{Failures: 4, Backoff: 8 * time.Second, Wait: 8 * time.Second}},
		{name: "capped at the max", policy: RestartPolicy{Ceiling: 100, Window: time.Hour, InitialBackoff: time.Second, MaxBackoff: time.Minute},
			failures: ago(0, 1, 2, 3, 4, 5, 6, 7, 8, 9),
			want:     RestartVerdict{Failures: 10, Backoff: time.Minute, Wait: time.Minute}},
		{name: "ceiling of one", policy: RestartPolicy{Ceiling: 1, Window: time.Minute, InitialBackoff: time.Second, MaxBackoff: time.Second},
			failures: ago(0),
			want:     RestartVerdict{Failures: 1, Exceeded: true}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			pol := p
			if tc.policy != (RestartPolicy{}) {
				pol = tc.policy
			}
			if got := pol.Next(tc.failures, now); got != tc.want {
				t.Fatalf("Next = %+v; want %+v", got, tc.want)
			}
		})
	}
}

func TestRestartPolicy_Backoff_NoOverflow(t *testing.T) {
	p := RestartPolicy{Ceiling: 1 << 30, Window: time.Hour, InitialBackoff: time.Second, MaxBackoff: 100 * 365 * 24 * time.Hour}
	if got := p.backoff(1 << 20); got != p.MaxBackoff {
		t.Fatalf("backoff = %s; want the max %s", got, p.MaxBackoff)
	}
}

func TestRestartPolicy_Validate(t *testing.T) {
	ok := DefaultRestartPolicy()
	cases := []struct {
		name  string
		edit  func(*RestartPolicy)
		field string
	}{
		{"default", func(*RestartPolicy) {}, ""},
		{"ceiling", func(p *RestartPolicy) { p.Ceiling = 0 }, "ceiling"},
		{"window", func(p *RestartPolicy) { p.Window = 0 }, "window"},
		{"initial", func(p *RestartPolicy) { p.InitialBackoff = -time.Second }, "initial backoff"},
		{"max", func(p *RestartPolicy) { p.MaxBackoff = time.Millisecond }, "max backoff"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := ok
			tc.edit(&p)
			err := p.Validate()
			if tc.field == "" && err != nil || tc.field != "" && (!errors.Is(err, ErrInvalidPolicy) || !strings.Contains(err.Error(), tc.field)) {
				t.Fatalf("Validate = %v; want an error naming %q", err, tc.field)
			}
		})
	}
}

func TestRestartPolicy_FailureReason(t *testing.T) {
	p := DefaultRestartPolicy()
	v := RestartVerdict{Failures: 5, Exceeded: true}
	want := "restart ceiling exceeded: 5 failures in 10m0s, last: exit status 1"
	if got := p.FailureReason(v, "exit status 1"); got != want {
		t.Fatalf("FailureReason = %q; want %q", got, want)
	}
}
