package placement

import (
	"github.com/norsk-oss/norsk-manager/actors/roles"
	"github.com/norsk-oss/norsk-manager/persistence"
	"github.com/norsk-oss/norsk-manager/proto/internalpb"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
)

// What a pool's disconnect settings (issue 21 §10; docs/design/pools.md,
// "Disconnected workers") change in a pass:
//
//   - fence on: every StartJob of the pool's jobs carries the note's fence,
//     and the worker stops the instance by itself once it has been cut off
//     from every manager for its lease (worker-sessions.md §8);
//   - replace wait: a role whose last instance ended because its node was
//     declared lost is no candidate while that node is merely lost (its
//     record STOPPED for a lost session, or re-registering): it waits for
//     the node to come back (the worker's hello then reports the instance
//     running, or missing and the role is placed again), or to be gone for
//     good (terminated, stopped by an operator, deleted).

// fences reports whether c's pool fences its jobs (no pool: the default,
// on).
func (w *base) fences(c *candidate) bool {
	return persistence.PoolDisconnect(w.pools[c.pool]).GetFence() == managerpb.PoolDisconnect_FENCE_ON
}

// waitsForLostNode returns the node c waits for under its pool's replace
// wait, or "" if it may be placed now.
func (w *base) waitsForLostNode(c *candidate) string {
	if persistence.PoolDisconnect(w.pools[c.pool]).GetReplace() != managerpb.PoolDisconnect_REPLACE_WAIT {
		return ""
	}
	node := lostWith(c.rec, string(c.role))
	if node == "" || !merelyLost(w.nodeRecs[node]) {
		return ""
	}
	return node
}

// lostWith returns the node role's last instance ended with, if it ended
// because that node was declared lost (JOB_STOPPED_NODE_STOPPED), else "".
func lostWith(rec *internalpb.JobRecord, role string) string {
	h := rec.GetJob().GetHistoryEntry()
	for i := len(h) - 1; i >= 0; i-- {
		s := h[i].GetJobStopping()
		if s == nil || roles.LogicalRole(s.GetRole()) != role {
			continue
		}
		if s.GetReason() != managerpb.JobHistoryJobStopping_JOB_STOPPED_NODE_STOPPED {
			return ""
		}
		return s.GetNodeMetadata().GetNodeId().GetNodeId()
	}
	return ""
}

// merelyLost reports whether n is a node that may come back with its
// worker's jobs: not STARTED (back), and not gone for good (no record, or
// stopped by an operator or its provider).
func merelyLost(n *internalpb.NodeRecord) bool {
	if n == nil {
		return false
	}
	switch n.GetState() {
	case managerpb.NodeLifecycle_NODE_LIFECYCLE_STARTED:
		return false
	case managerpb.NodeLifecycle_NODE_LIFECYCLE_STOPPED:
		if n.StopReason == nil {
			return true // stopped for no recorded reason: not on purpose
		}
		switch n.GetStopReason() {
		case managerpb.NodeStopping_USER_REQUESTED, managerpb.NodeStopping_PROVIDER_STOP,
			managerpb.NodeStopping_PROVIDER_TERMINATE, managerpb.NodeStopping_CREATE_FAILED:
			return false
		}
	}
	return true
}
