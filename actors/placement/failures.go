package placement

import (
	"context"
	"errors"
	"fmt"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/norsk-oss/norsk-manager/actors"
	"github.com/norsk-oss/norsk-manager/proto/errorpb"
	"github.com/norsk-oss/norsk-manager/proto/internalpb"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
)

// FailureWriteGap is the shortest time between two writes of a (job,
// role)'s placement failure to its record (each raises placement_failed):
// a reason that changes faster (a fleet whose free capacity moves) is
// written at most this often, the newest reason each time. Read from the
// record's recorded_at, so a new leader keeps the same pace.
const FailureWriteGap = 30 * time.Second

// failureBudget is the engine-wide limit on failure writes and re-check
// writes (degraded.go), per second: a full cluster with thousands of
// unplaceable jobs, all failing for a new reason at once (a node lost),
// records them over seconds instead of flooding the journal in one pass.
// The roles left over are written by the next passes; the leader answers
// GetPlacement from its memory meanwhile.
const failureBudget = 50

// noteWrites holds the engine's writes of placement failures and re-checks
// in flight, and the budget spent in the current second. The zero value is
// ready. Guarded by Engine.mu.
type noteWrites struct {
	inflight    map[key]bool
	budgetStart time.Time
	budgetUsed  int
}

// take reports whether one more write fits the budget at now, and spends
// it. Called with Engine.mu held.
func (n *noteWrites) take(now time.Time) bool {
	if now.Sub(n.budgetStart) >= time.Second || now.Before(n.budgetStart) {
		n.budgetStart, n.budgetUsed = now, 0
	}
	if n.budgetUsed >= failureBudget {
		return false
	}
	n.budgetUsed++
	return true
}

// recordedFailure returns rec's placement failure of role, nil if none.
func recordedFailure(rec *internalpb.JobRecord, role string) *internalpb.PlacementFailureRecord {
	for _, f := range rec.GetPlacementFailures() {
		if f.GetRole() == role {
			return f
		}
	}
	return nil
}

// failureDue reports whether u, the engine's newest failure of a role, is to
// be written over r, the one recorded (nil: none): when r says something
// else (or was cleared by a placement since) and at least FailureWriteGap
// passed since r was written. A recorded_at after now (another manager's
// clock ahead) does not hold the write back.
func failureDue(r *internalpb.PlacementFailureRecord, u Unplaced, now time.Time) bool {
	if r == nil {
		return true
	}
	if !r.GetCleared() && r.GetAttempt().GetReason() == u.Reason {
		return false
	}
	since := now.Sub(r.GetRecordedAt().AsTime())
	return since < 0 || since >= FailureWriteGap
}

// FailureRequestID is the request id of the engine's write of a placement
// failure of (job, role) decided on the job record's sequence seq:
// "placement/failed/<job>/<role>/<seq>" (applied once, as RequestID).
func FailureRequestID(job, role string, seq uint64) string {
	return fmt.Sprintf("placement/failed/%s/%s/%d", job, role, seq)
}

// recordFailures writes to the job records the failures of the pass's
// candidates that are still unplaced and due (failureDue), within the
// budget, through the job grain's RecordPlacementFailure: its commit raises
// placement_failed, and the record lets any manager's GetPlacement explain
// the role. It runs after the pass's placements, so a role placed in this
// pass is skipped.
func (e *Engine) recordFailures(ctx context.Context, w *world) {
	for i := range w.candidates {
		c := &w.candidates[i]
		if w.busy[c.key] {
			continue
		}
		if _, placed := w.whereOf(c.key); placed {
			continue
		}
		e.mu.Lock()
		u, failed := e.failures[c.key]
		send := failed && !e.notes.inflight[c.key] && failureDue(recordedFailure(c.rec, string(c.role)), u, w.now) && e.notes.take(w.now)
		if send {
			if e.notes.inflight == nil {
				e.notes.inflight = map[key]bool{}
			}
			e.notes.inflight[c.key] = true
		}
		e.mu.Unlock()
		if send {
			e.sendFailure(ctx, c, u)
		}
	}
}

// sendFailure sends c's RecordPlacementFailure in the background.
func (e *Engine) sendFailure(ctx context.Context, c *candidate, u Unplaced) {
	cmd := &internalpb.JobCommand{RequestId: FailureRequestID(string(c.job), string(c.role), uint64(c.seq)), JobId: string(c.job),
		Cmd: &internalpb.JobCommand_RecordPlacementFailure{RecordPlacementFailure: &internalpb.RecordPlacementFailure{
			Role: string(c.role), Attempt: attemptOf(u)}}}
	e.sendNote(ctx, c.key, cmd, "record placement failure")
}

// sendNote sends a note command (a failure, a re-check) for k in the
// background and forgets it as in flight once answered. A refusal
// (FAILED_PRECONDITION: the record changed since the pass read it) is
// expected and logged at debug level.
func (e *Engine) sendNote(ctx context.Context, k key, cmd *internalpb.JobCommand, what string) {
	e.wg.Add(1)
	go func() {
		defer e.wg.Done()
		err := e.request(ctx, string(k.job), cmd)
		e.mu.Lock()
		delete(e.notes.inflight, k)
		e.mu.Unlock()
		var re *actors.ReplyError
		switch {
		case err == nil:
		case ctx.Err() != nil:
		case errors.As(err, &re) && re.Code == errorpb.Code_FAILED_PRECONDITION:
			e.log.Debug(what+": refused", "job_id", k.job, "role", k.role, "reply", err)
		default:
			e.log.Warn(what, "job_id", k.job, "role", k.role, "error", err)
		}
	}()
}

// attemptOf is the wire form of a failure (GetPlacement, placement_failed).
func attemptOf(u Unplaced) *managerpb.PlacementAttempt {
	a := &managerpb.PlacementAttempt{Since: timestamppb.New(u.Since), Reason: u.Reason}
	if m := u.Metrics; m != nil {
		a.NodesEvaluated = uint32(m.NodesEvaluated)
		for _, f := range m.Filtered {
			a.Filters = append(a.Filters, &managerpb.PlacementFilterCount{Filter: f.Filter, NodesRemoved: uint32(f.Nodes), Detail: f.String()})
		}
	}
	return a
}

// AttemptOf is the wire form of an engine failure, for GetPlacement.
func AttemptOf(u *Unplaced) *managerpb.PlacementAttempt { return attemptOf(*u) }
