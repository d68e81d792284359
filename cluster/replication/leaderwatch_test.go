package replication

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"
)

// TestWhileLeader: the context ends when the known leader changes (to
// another or to none) with a cause naming both, when the parent ends with
// the parent's error, and not at all while the leader stays.
func TestWhileLeader(t *testing.T) {
	cases := []struct {
		name        string
		next        string // leader after the switch
		cancelOuter bool
		wantDone    bool
		wantChanged bool
	}{
		{name: "same leader", next: "m1"},
		{name: "another leader", next: "m2", wantDone: true, wantChanged: true},
		{name: "no leader (election timer fired)", next: "", wantDone: true, wantChanged: true},
		{name: "parent cancelled", next: "m1", cancelOuter: true, wantDone: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var cur atomic.Value
			cur.Store("m1")
			polled := make(chan struct{}, 100)
			current := func() string {
				select {
				case polled <- struct{}{}:
				default:
				}
				return cur.Load().(string)
			}
			outer, cancelOuter := context.WithCancel(context.Background())
			defer cancelOuter()
			ctx, cancel := whileLeader(outer, "m1", current, time.Millisecond)
			defer cancel()
			<-polled // watching
			cur.Store(tc.next)
			if tc.cancelOuter {
				cancelOuter()
			}
			if !tc.wantDone {
				// Three polls after the switch saw the same leader: the
				// context must still be live.
				for range 3 {
					<-polled
				}
				if err := ctx.Err(); err != nil {
					t.Fatalf("ended while the leader stayed: %v", context.Cause(ctx))
				}
				return
			}
			select {
			case <-ctx.Done():
			case <-time.After(10 * time.Second):
				t.Fatal("did not end")
			}
			if got := errors.Is(context.Cause(ctx), errLeaderChanged); got != tc.wantChanged {
				t.Fatalf("cause %v: leader changed = %v, want %v", context.Cause(ctx), got, tc.wantChanged)
			}
		})
	}
}
