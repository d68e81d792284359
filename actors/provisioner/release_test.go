package provisioner

import (
	"testing"
	"time"

	"github.com/norsk-oss/norsk-manager/proto/managerpb"
)

func TestRelease(t *testing.T) {
	linger := 5 * time.Minute
	cases := []struct {
		name string
		n    Idle
		want Action
	}{
		{"started, nothing on it, no mark: mark", Idle{Started: true, Linger: linger}, MarkIdle},
		{"idle less than the linger: keep", Idle{Started: true, IdleSince: t0.Add(-linger + time.Second), Linger: linger}, Keep},
		{"idle for the linger: terminate", Idle{Started: true, IdleSince: t0.Add(-linger), Linger: linger}, Terminate},
		{"runs something: keep", Idle{Started: true, Instances: 1, Linger: linger}, Keep},
		{"runs something again: clear", Idle{Started: true, Instances: 1, IdleSince: t0.Add(-time.Hour), Linger: linger}, ClearIdle},
		{"being created: keep", Idle{Linger: linger}, Keep},
		{"being created for less than the create timeout: keep", Idle{Creating: true, CreatedAt: t0.Add(-CreateTimeout + time.Second), Linger: linger}, Keep},
		{"being created for the create timeout: give up", Idle{Creating: true, CreatedAt: t0.Add(-CreateTimeout), Linger: linger}, GiveUp},
		{"a longer create timeout configured: keep", Idle{Creating: true, CreatedAt: t0.Add(-CreateTimeout), CreateTimeout: time.Hour, Linger: linger}, Keep},
		{"stopped long ago: keep", Idle{CreatedAt: t0.Add(-time.Hour), Linger: linger}, Keep},
		{"being created, cordoned: left to the operator", Idle{Creating: true, Cordoned: true, CreatedAt: t0.Add(-time.Hour), Linger: linger}, Keep},
		{"cordoned: left to the operator", Idle{Started: true, Cordoned: true, IdleSince: t0.Add(-time.Hour), Linger: linger}, Keep},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := Release(tc.n, t0); got != tc.want {
				t.Fatalf("Release = %d, want %d", got, tc.want)
			}
		})
	}
}

func TestLingerOf(t *testing.T) {
	ps := pools(&managerpb.Pool{Name: "p", Tiers: []*managerpb.PoolTier{{Name: "a", LingerSeconds: 30}, {Name: "b"}}})
	for _, tc := range []struct {
		pool, tier string
		want       time.Duration
	}{{"p", "a", 30 * time.Second}, {"p", "b", DefaultLinger}, {"p", "gone", DefaultLinger}, {"gone", "a", DefaultLinger}} {
		if got := LingerOf(ps, tc.pool, tc.tier); got != tc.want {
			t.Errorf("LingerOf(%s, %s) = %s, want %s", tc.pool, tc.tier, got, tc.want)
		}
	}
}
