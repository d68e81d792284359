package worker

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// hub routes runtime events to the current session: the verified session
// with the highest epoch. It remembers recent lifecycle events so that a
// new session learns what its hello could not say:
//
//   - events that happened while no session was current (undelivered), and
//   - events that happened after the new session's hello snapshot was taken
//     (they may have gone to the session it supersedes).
//
// Job info is only ever sent live; it is dropped while no session is
// current.
type hub struct {
	log   *slog.Logger
	limit int // max remembered lifecycle events

	mu struct {
		sync.Mutex
		seq       uint64        // sequence of the last lifecycle event
		recent    []recentEvent // oldest first, at most limit
		current   *session      // nil while disconnected
		epoch     uint64        // highest verified epoch (valid if hasEpoch)
		hasEpoch  bool          // a session was ever verified
		idleSince time.Time     // when current last became nil
		changed   chan struct{} // closed and replaced when current changes
		verified  uint64        // number of sessions ever promoted
	}
}

type recentEvent struct {
	seq       uint64
	ev        Event
	delivered bool // queued to a current session when it happened
}

func newHub(log *slog.Logger, limit int) *hub {
	h := &hub{log: log, limit: limit}
	h.mu.changed = make(chan struct{})
	h.mu.idleSince = time.Now()
	return h
}

// Seq returns the sequence number of the last lifecycle event. A session
// takes it before snapshotting the runtime's jobs for its hello.
func (h *hub) Seq() uint64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.mu.seq
}

// Publish routes ev. It never blocks.
func (h *hub) Publish(ev Event) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !ev.Kind.Lifecycle() {
		if cur := h.mu.current; cur != nil && !cur.offer(ev.Message()) {
			cur.dropped++
			if cur.dropped == 1 || cur.dropped%1000 == 0 {
				h.log.Warn("session send queue full; dropping job info", "dropped", cur.dropped)
			}
		}
		return
	}
	h.mu.seq++
	re := recentEvent{seq: h.mu.seq, ev: ev}
	if cur := h.mu.current; cur != nil {
		if cur.offer(ev.Message()) {
			re.delivered = true
		} else {
			h.log.Warn("session send queue full; ending the session so that the manager re-dials and re-reads the jobs",
				"epoch", cur.epoch)
			cur.end(status.Error(codes.ResourceExhausted, "worker: session send queue overflowed; re-dial"))
			h.setCurrentLocked(nil)
		}
	}
	h.rememberLocked(re)
}

func (h *hub) rememberLocked(re recentEvent) {
	h.mu.recent = append(h.mu.recent, re)
	if over := len(h.mu.recent) - h.limit; over > 0 {
		for _, old := range h.mu.recent[:over] {
			if !old.delivered {
				h.log.Warn("dropping an undelivered job event (too many while no manager is connected)",
					"job_id", old.ev.Key.JobID, "role", old.ev.Key.Role, "event", old.ev.Kind.String())
			}
		}
		h.mu.recent = append(h.mu.recent[:0:0], h.mu.recent[over:]...)
	}
}

// Promote makes s the current session if its epoch is not lower than the
// highest verified so far, queues on it the lifecycle events it must
// learn (undelivered ones and those after helloSeq), and ends the session
// it supersedes. It returns a FailedPrecondition status for a stale epoch.
func (h *hub) Promote(s *session, helloSeq uint64) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.mu.hasEpoch && s.epoch < h.mu.epoch {
		return status.Errorf(codes.FailedPrecondition,
			"worker: stale session: epoch %d is lower than epoch %d already verified on this worker", s.epoch, h.mu.epoch)
	}
	old := h.mu.current
	h.mu.epoch, h.mu.hasEpoch = s.epoch, true
	for i := range h.mu.recent {
		re := &h.mu.recent[i]
		if re.delivered && re.seq <= helloSeq {
			continue
		}
		if !s.offer(re.ev.Message()) {
			break // queue sized above limit; cannot happen
		}
		re.delivered = true
	}
	h.mu.verified++
	h.setCurrentLocked(s)
	if old != nil && old != s {
		old.end(status.Errorf(codes.Aborted, "worker: superseded by a session with epoch %d", s.epoch))
	}
	return nil
}

// Release forgets s if it is the current session. Called when a session's
// handler returns.
func (h *hub) Release(s *session) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.mu.current == s {
		h.setCurrentLocked(nil)
	}
}

// IsCurrent reports whether s is the current session (commands from any
// other session are ignored).
func (h *hub) IsCurrent(s *session) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.mu.current == s
}

func (h *hub) setCurrentLocked(s *session) {
	if h.mu.current == s {
		return
	}
	h.mu.current = s
	if s == nil {
		h.mu.idleSince = time.Now()
	}
	close(h.mu.changed)
	h.mu.changed = make(chan struct{})
}

// WaitIdle blocks until no session has been current for d, counted from
// the later of the call and the moment the last session ended. It returns
// false if ctx ends first, and reports whether any session was verified
// while it waited.
func (h *hub) WaitIdle(ctx context.Context, d time.Duration) (idle bool, sawSession bool) {
	start := time.Now()
	h.mu.Lock()
	verified0 := h.mu.verified
	h.mu.Unlock()
	for {
		h.mu.Lock()
		cur, changed, since := h.mu.current, h.mu.changed, h.mu.idleSince
		saw := h.mu.verified != verified0
		h.mu.Unlock()
		if cur != nil {
			select {
			case <-changed:
				continue
			case <-ctx.Done():
				return false, saw
			}
		}
		deadline := start
		if since.After(deadline) {
			deadline = since
		}
		timer := time.NewTimer(time.Until(deadline.Add(d)))
		select {
		case <-timer.C:
			return true, saw
		case <-changed:
			timer.Stop()
		case <-ctx.Done():
			timer.Stop()
			return false, saw
		}
	}
}
