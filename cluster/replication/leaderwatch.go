package replication

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// leaderPoll is how often a call to the leader checks whether this
// manager still knows the same leader (whileLeader).
const leaderPoll = 20 * time.Millisecond

// errLeaderChanged is the cause of a whileLeader context cancelled because
// the known leader changed.
var errLeaderChanged = errors.New("replication: the leader changed")

// whileLeader returns a context derived from ctx that is also cancelled,
// with a cause wrapping errLeaderChanged, as soon as current (the leader
// this manager knows, "" for none) no longer returns leader; it is
// checked every poll. The caller must call the returned cancel.
//
// Why: a leader that is frozen (SIGSTOP, a VM pause) keeps its TCP
// connections open and never answers, so a call to it with no deadline
// (a grain loading its record in Started) waits for as long as the freeze
// lasts, even after the others elected a new leader. Raft clears this
// manager's leader when its heartbeat timeout fires and sets the new one
// when it hears from it: abandoning the call then lets the caller ask the
// current leader (docs/design/grains.md, "A grain on a frozen manager").
func whileLeader(ctx context.Context, leader string, current func() string, poll time.Duration) (context.Context, context.CancelFunc) {
	cctx, cancel := context.WithCancelCause(ctx)
	go func() { // ends with cctx
		t := time.NewTicker(poll)
		defer t.Stop()
		for {
			select {
			case <-cctx.Done():
				return
			case <-t.C:
				if now := current(); now != leader {
					cancel(fmt.Errorf("%w from %q to %q", errLeaderChanged, leader, now))
					return
				}
			}
		}
	}()
	return cctx, func() { cancel(context.Canceled) }
}
