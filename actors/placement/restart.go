package placement

import (
	"time"

	"github.com/norsk-oss/norsk-manager/actors/placement/scheduler"
	"github.com/norsk-oss/norsk-manager/actors/roles"
	"github.com/norsk-oss/norsk-manager/proto/internalpb"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
)

// failureHistory is what the replicated job record says about one role's
// failed instances: derived from the record alone, so that a new leader
// counts the same failures (issue 11 §4).
type failureHistory struct {
	// times are when the role's instances ended JOB_FAILED (history
	// entries job_stopping with reason JOB_STOPPED_JOB_FAILED, plus the
	// record's last failure of the role when the history no longer holds
	// it), after the last time an operator cleared the terminal state.
	times []time.Time
	// nodes are the nodes those instances ran on, without repeats.
	nodes []scheduler.NodeID
	// last is the newest failure's reason and node; empty if none.
	last     string
	lastNode scheduler.NodeID
}

// failuresOf reads the failure history of role from rec. A failure of a
// move's target (role "<role>~<n>") that never took over — its move backed
// out, the source kept running — is not the role's: a drain or a rolling
// update whose target keeps failing must not use up the restart budget of
// a job whose source runs fine (the move's own pause paces its retries).
// A failure of the instance after its move handed over to it counts.
func failuresOf(rec *internalpb.JobRecord, role scheduler.Role) failureHistory {
	var h failureHistory
	var cleared time.Time
	pending := untakenTargets(rec, string(role))
	for _, e := range rec.GetJob().GetHistoryEntry() {
		if u := e.GetJobUpdated(); u != nil && u.GetPreviousJob().GetTerminalState() != nil {
			// An operator cleared the verdict: what failed before it no
			// longer counts towards the ceiling.
			cleared = u.GetTimestamp().AsTime()
			h = failureHistory{}
			continue
		}
		s := e.GetJobStopping()
		if s == nil || roles.LogicalRole(s.GetRole()) != string(role) || s.GetReason() != managerpb.JobHistoryJobStopping_JOB_STOPPED_JOB_FAILED ||
			pending[s.GetRole()] {
			continue
		}
		h.times = append(h.times, s.GetTimestamp().AsTime())
		h.addNode(scheduler.NodeID(s.GetNodeMetadata().GetNodeId().GetNodeId()))
	}
	for _, f := range rec.GetLastFailures() {
		if roles.LogicalRole(f.GetRole()) != string(role) || f.GetAt() == nil || !f.GetAt().AsTime().After(cleared) || pending[f.GetRole()] {
			continue
		}
		at := f.GetAt().AsTime()
		if !h.hasNear(at) { // trimmed from the bounded history
			h.times = append(h.times, at)
		}
		h.last, h.lastNode = f.GetReason(), scheduler.NodeID(f.GetNodeId().GetNodeId())
		h.addNode(h.lastNode)
	}
	return h
}

// untakenTargets is the set of move target roles of logical role logical
// that rec's history shows provisioned (job_provisioned of "<logical>~<n>")
// and never handed over to: no job_stopping JOB_STOPPED_MIGRATED of the
// logical role (the grain's stop of the source at the hand-over) after
// it. A logical role has one move at a time, so a hand-over is the newest
// target's. A target whose provisioning the bounded history dropped is
// not in the set: its failures count, as any instance's.
func untakenTargets(rec *internalpb.JobRecord, logical string) map[string]bool {
	var pending map[string]bool
	target := ""
	for _, e := range rec.GetJob().GetHistoryEntry() {
		if p := e.GetJobProvisioned(); p != nil && roles.IsMoved(p.GetRole()) && roles.LogicalRole(p.GetRole()) == logical {
			if pending == nil {
				pending = map[string]bool{}
			}
			pending[p.GetRole()], target = true, p.GetRole()
			continue
		}
		if s := e.GetJobStopping(); s != nil && s.GetReason() == managerpb.JobHistoryJobStopping_JOB_STOPPED_MIGRATED &&
			roles.LogicalRole(s.GetRole()) == logical && s.GetRole() != target {
			delete(pending, target)
		}
	}
	return pending
}

// lastUntakenFailure is the newest failure (job_stopping JOB_FAILED in
// the history, or the record's last failure) of a move target of logical
// that never took over (untakenTargets); false if there is none.
func lastUntakenFailure(rec *internalpb.JobRecord, logical string) (time.Time, bool) {
	pending := untakenTargets(rec, logical)
	if len(pending) == 0 {
		return time.Time{}, false
	}
	var last time.Time
	note := func(role string, at time.Time) {
		if pending[role] && at.After(last) {
			last = at
		}
	}
	for _, e := range rec.GetJob().GetHistoryEntry() {
		if s := e.GetJobStopping(); s != nil && s.GetReason() == managerpb.JobHistoryJobStopping_JOB_STOPPED_JOB_FAILED {
			note(s.GetRole(), s.GetTimestamp().AsTime())
		}
	}
	for _, f := range rec.GetLastFailures() {
		if f.GetAt() != nil {
			note(f.GetRole(), f.GetAt().AsTime())
		}
	}
	return last, !last.IsZero()
}

// hasNear reports whether a failure time lies within a second of at (the
// history entry and the last failure of one end are stamped apart by the
// grain's clock reads).
func (h *failureHistory) hasNear(at time.Time) bool {
	for _, t := range h.times {
		if d := t.Sub(at); d < time.Second && d > -time.Second {
			return true
		}
	}
	return false
}

func (h *failureHistory) addNode(n scheduler.NodeID) {
	if n == "" {
		return
	}
	for _, x := range h.nodes {
		if x == n {
			return
		}
	}
	h.nodes = append(h.nodes, n)
}

// replaceWait is the pace floor of placing role again (issue 21 §1): what
// is left at now of the policy's InitialBackoff after the role's newest
// provisioning (its newest job_provisioned in rec's history), when the
// instance it provisioned ended for a reason the manager neither decided
// nor took from a lost node (endPaced); 0 otherwise.
//
// The failure backoff (failuresOf, RestartPolicy.Next) paces the ends the
// record calls failures. The floor is the net under every other path: an
// instance that ends in a way the record does not count (an older record's
// JOB_STOPPED_UNKNOWN_JOB, a reason this manager does not know) is placed
// again at most once per InitialBackoff, never in a hot loop. Ends the
// manager caused (a stop, a move, a preemption) and node losses (which
// take the liveness timeout to detect) are placed again at once: an
// auto-placed job's failover must not wait. Derived from the record alone,
// so a new leader keeps the pace; a provisioning stamped after now (a
// clock ahead on another manager) holds nothing back.
func replaceWait(rec *internalpb.JobRecord, role scheduler.Role, p scheduler.RestartPolicy, now time.Time) time.Duration {
	var provisioned time.Time
	reason, ended := managerpb.JobHistoryJobStopping_Reason(0), false
	for _, e := range rec.GetJob().GetHistoryEntry() {
		if x := e.GetJobProvisioned(); x != nil && x.GetRole() == string(role) {
			provisioned, ended = x.GetTimestamp().AsTime(), false
		}
		if x := e.GetJobStopping(); x != nil && x.GetRole() == string(role) {
			reason, ended = x.GetReason(), true
		}
	}
	if provisioned.IsZero() || !ended || !endPaced(reason) || provisioned.After(now) {
		return 0
	}
	return max(0, provisioned.Add(p.InitialBackoff).Sub(now))
}

// endPaced reports whether an instance that ended for reason is held to
// the pace floor (replaceWait): every reason but the manager's own
// decisions and node losses.
func endPaced(reason managerpb.JobHistoryJobStopping_Reason) bool {
	switch reason {
	case managerpb.JobHistoryJobStopping_JOB_STOPPED_USER_REQUESTED, managerpb.JobHistoryJobStopping_JOB_STOPPED_MIGRATED,
		managerpb.JobHistoryJobStopping_JOB_STOPPED_PREEMPTED,
		managerpb.JobHistoryJobStopping_JOB_STOPPED_NODE_STOPPED, managerpb.JobHistoryJobStopping_JOB_STOPPED_NODE_TERMINATED:
		return false
	}
	return true
}

// policyOf is the restart policy of a pool: its restart_ceiling with the
// default backoff, or scheduler.DefaultRestartPolicy for no pool (or a
// ceiling out of range, which the gateway does not accept).
func policyOf(p *managerpb.Pool) scheduler.RestartPolicy {
	pol := scheduler.DefaultRestartPolicy()
	if c := p.GetRestartCeiling(); c != nil {
		pol.Ceiling, pol.Window = int(c.GetMaxFailures()), time.Duration(c.GetWindowSeconds())*time.Second
	}
	if pol.Validate() != nil {
		return scheduler.DefaultRestartPolicy()
	}
	return pol
}
