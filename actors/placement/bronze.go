package placement

import (
	"context"
	"fmt"
	"time"

	"github.com/norsk-oss/norsk-manager/actors/placement/scheduler"
	"github.com/norsk-oss/norsk-manager/actors/roles"
	"github.com/norsk-oss/norsk-manager/proto/internalpb"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
)

// bronzeDrop gives up on LOW priority c, which fits no node (nf), once it
// has had no instance for longer than its pool's
// low_priority_max_wait_seconds (0: never): the engine writes
// terminal_state { failure_reason: "bronze drop: ..." } as the restart
// ceiling does (writeTerminal: an UpdateJob through the job grain, which
// raises job_updated), and the job is not placed again until an operator
// clears it. "Unplaced since" is read from the record (unplacedSince), so
// a new leader drops it at the same time.
func (e *Engine) bronzeDrop(ctx context.Context, w *world, c *candidate, pool *managerpb.Pool, nf *scheduler.Failure) {
	limit := time.Duration(pool.GetLowPriorityMaxWaitSeconds()) * time.Second
	if limit <= 0 {
		return
	}
	since, ok := unplacedSince(c.rec, string(c.role))
	if !ok {
		return
	}
	waited := w.now.Sub(since)
	if waited < limit {
		return
	}
	w.unwait(c.key) // given up: no node is created for it
	e.mu.Lock()
	seq, sent := e.terminalSent[c.job]
	e.mu.Unlock()
	if sent && seq == c.seq {
		return // decided by an earlier pass; its write is in flight
	}
	e.cfg.Metrics.count(ResultBronzeDrop)
	e.log.Warn("bronze drop: giving up on a low priority job", "job_id", c.job, "role", c.role, "pool", c.pool, "waited", waited.Round(time.Second))
	e.writeTerminal(ctx, c, BronzeReason(c.rec, string(c.role), c.pool, waited, limit, nf.Error()))
}

// BronzeReason is the failure_reason of a bronze drop of role of rec in
// pool: "bronze drop: LOW priority job role R had no instance for W
// (pool P allows L): <why it fits no node>", with "; it was preempted by
// job H role R on node N at T" when the role's last instance ended so.
func BronzeReason(rec *internalpb.JobRecord, role, pool string, waited, limit time.Duration, why string) string {
	s := fmt.Sprintf("bronze drop: LOW priority job role %s had no instance for %s (pool %s allows %s): %s",
		role, waited.Round(time.Second), pool, limit, why)
	if p := preemptionOf(rec, role); p != nil && lastStopReason(rec, role) == managerpb.JobHistoryJobStopping_JOB_STOPPED_PREEMPTED {
		s += fmt.Sprintf("; it was preempted by job %s role %s on node %s at %s", p.GetForJobId(), p.GetForRole(), p.GetNodeId(),
			p.GetAt().AsTime().UTC().Format(time.RFC3339))
	}
	return s
}

// unplacedSince is when role of rec last lost its instance or became
// placeable, read from the record alone (a new leader agrees): the newest
// of the job's creation, its last update (an operator's change, a bundle
// making it dormant or live again: the wait starts afresh), the role's last
// job_stopping or job_stopped, and the start_date_time of a job that
// waited for it. If the bounded history holds none of them, the recorded
// placement failure's first sighting; false when nothing is known.
func unplacedSince(rec *internalpb.JobRecord, role string) (time.Time, bool) {
	var t time.Time
	later := func(ts time.Time) {
		if ts.After(t) {
			t = ts
		}
	}
	for _, h := range rec.GetJob().GetHistoryEntry() {
		switch {
		case h.GetJobCreated() != nil:
			later(h.GetJobCreated().GetTimestamp().AsTime())
		case h.GetJobUpdated() != nil:
			later(h.GetJobUpdated().GetTimestamp().AsTime())
		case h.GetJobStopping() != nil && roles.LogicalRole(h.GetJobStopping().GetRole()) == roles.LogicalRole(role):
			later(h.GetJobStopping().GetTimestamp().AsTime())
		case h.GetJobStopped() != nil && roles.LogicalRole(h.GetJobStopped().GetRole()) == roles.LogicalRole(role):
			later(h.GetJobStopped().GetTimestamp().AsTime())
		}
	}
	if t.IsZero() {
		if f := recordedFailure(rec, role); f != nil && f.GetAttempt().GetSince() != nil {
			t = f.GetAttempt().GetSince().AsTime()
		}
	}
	if t.IsZero() {
		return t, false
	}
	if st := rec.GetJob().GetJob().GetStartDateTime(); st != nil {
		later(st.AsTime())
	}
	return t, true
}
