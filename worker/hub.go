package worker

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/norsk-oss/norsk-manager/proto/workerauth"
)

// hub routes runtime events to the current session: the verified session
// with the highest epoch. It remembers recent lifecycle events so that a
// new session learns what its hello could not say:
//
//   - events that happened while no session was current (undelivered), and
//   - events that happened after the new session's hello snapshot was taken
//     (they may have gone to the session it supersedes).
//
// Job info published while no session is current is kept in a bounded
// buffer (infoBuffer) and handed to the next verified session with the
// lifecycle events, in publication order. Job info published while a
// session is current goes to that session only.
type hub struct {
	log   *slog.Logger
	limit int // max remembered lifecycle events

	mu struct {
		sync.Mutex
		seq       uint64        // sequence of the last lifecycle event
		recent    []recentEvent // oldest first, at most limit
		info      *infoBuffer   // job info published while current was nil
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

// newHub returns a hub remembering limit lifecycle events and buffering
// job info in info while no session is current.
func newHub(log *slog.Logger, limit int, info *infoBuffer) *hub {
	h := &hub{log: log, limit: limit}
	h.mu.info = info
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
		h.publishInfoLocked(ev)
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

// publishInfoLocked sends job info to the current session, or buffers it
// while there is none.
func (h *hub) publishInfoLocked(ev Event) {
	cur := h.mu.current
	if cur == nil {
		if h.mu.info.add(ev, h.mu.seq) {
			h.log.Warn("job info buffer of a job is full while no manager session is up; dropping its oldest lines",
				"job_id", ev.Key.JobID, "role", ev.Key.Role)
		}
		return
	}
	if !cur.offer(ev.Message()) {
		cur.dropped++
		if cur.dropped == 1 || cur.dropped%1000 == 0 {
			h.log.Warn("session send queue full; dropping job info", "dropped", cur.dropped)
		}
	}
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
// highest verified so far, gives it as its backlog what it must learn
// (undelivered lifecycle events, those after helloSeq, and the job info
// buffered while no session was current, in publication order), and ends
// the session it supersedes. It returns a FailedPrecondition status for a
// stale epoch. s's handler must send the backlog before its queue.
func (h *hub) Promote(s *session, helloSeq uint64) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.mu.hasEpoch && s.epoch < h.mu.epoch {
		return workerauth.StaleEpochError(s.epoch, h.mu.epoch)
	}
	old := h.mu.current
	h.mu.epoch, h.mu.hasEpoch = s.epoch, true
	s.backlog = h.backlogLocked(helloSeq)
	h.mu.verified++
	h.setCurrentLocked(s)
	if old != nil && old != s {
		old.end(status.Errorf(codes.Aborted, "worker: superseded by a session with epoch %d", s.epoch))
	}
	return nil
}

// backlogLocked merges the lifecycle events a session promoted with
// helloSeq must get with the buffered job info (emptying the buffer), in
// publication order, and marks the events delivered.
func (h *hub) backlogLocked(helloSeq uint64) []pending {
	infos := h.mu.info.take()
	var out []pending
	i := 0
	for j := range h.mu.recent {
		re := &h.mu.recent[j]
		if re.delivered && re.seq <= helloSeq {
			continue
		}
		// Info published before this event (after an earlier one) goes first.
		for ; i < len(infos) && infos[i].after < re.seq; i++ {
			out = append(out, pending{msg: infos[i].ev.Message(), info: infos[i]})
		}
		out = append(out, pending{msg: re.ev.Message(), seq: re.seq})
		re.delivered = true
	}
	for ; i < len(infos); i++ {
		out = append(out, pending{msg: infos[i].ev.Message(), info: infos[i]})
	}
	return out
}

// Release forgets s if it is the current session. Called when a session's
// handler returns. What s's backlog still held (the session ended before
// sending it) is kept for the next session: its lifecycle events count as
// undelivered again and its job info goes back to the buffer. (A session
// superseded meanwhile loses its unsent backlog; the superseding one
// replays the lifecycle events after its hello snapshot.)
func (h *hub) Release(s *session) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.mu.current != s {
		return
	}
	h.requeueLocked(s.backlog)
	s.backlog = nil
	h.setCurrentLocked(nil)
}

// requeueLocked puts unsent backlog entries back.
func (h *hub) requeueLocked(unsent []pending) {
	if len(unsent) == 0 {
		return
	}
	var infos []bufferedInfo
	for _, p := range unsent {
		if p.seq == 0 {
			infos = append(infos, p.info)
			continue
		}
		for j := range h.mu.recent {
			if h.mu.recent[j].seq == p.seq {
				h.mu.recent[j].delivered = false
			}
		}
	}
	h.mu.info.requeue(infos)
	h.log.Info("session ended before sending everything buffered; keeping the rest for the next session", "unsent", len(unsent))
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
