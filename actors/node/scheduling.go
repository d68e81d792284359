package node

import (
	"fmt"
	"strings"

	"github.com/norsk-oss/norsk-manager/actors"
	"github.com/norsk-oss/norsk-manager/proto/errorpb"
	"github.com/norsk-oss/norsk-manager/proto/internalpb"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
)

// Cordon and drain (docs/design/nodes-capacity.md, "Cordon and drain"):
// an operator's say on whether the placement engine may put new job
// instances on a node. The state is a field of the node record, written
// here like the record's other fields, so the one-writer and freshness
// rules of docs/design/grains.md hold. Nothing in this package acts on it:
// the placement engine (next step) reads it through Schedulable and
// Draining.

// setScheduling moves the node to the scheduling state c asks for. A node
// already in that state is left as it is (nothing written, OK), so a
// retried or repeated command is harmless. NOT_FOUND for an unknown node;
// FAILED_PRECONDITION for a terminated one (an operator's TerminateNode,
// or a cloud node whose instance is gone): no placement can go there
// anyway, and a record being torn down is not changed.
func (g *grain) setScheduling(reqID string, c *internalpb.SetScheduling) *internalpb.Reply {
	if g.rec == nil {
		return g.notFound()
	}
	want := c.GetState()
	if _, ok := managerpb.NodeScheduling_name[int32(want)]; !ok {
		return actors.Fail(errorpb.Code_INVALID_ARGUMENT, "node %s: unknown scheduling state %d", g.id, want)
	}
	if g.terminated() {
		return actors.Fail(errorpb.Code_FAILED_PRECONDITION, "node %q was terminated (state %s): it takes no placements; there is nothing to %s",
			g.id, g.rec.GetState().String(), verb(want))
	}
	have := g.rec.GetScheduling().GetState()
	if have == want {
		return actors.OK()
	}
	next := g.next()
	next.Scheduling = &managerpb.NodeSchedulingState{State: want, Reason: c.GetReason(), RequestedBy: c.GetRequestedBy(), Since: g.now()}
	if want == managerpb.NodeScheduling_NODE_SCHEDULING_ELIGIBLE {
		// Nothing to explain about an eligible node but when and by whom.
		next.Scheduling.Reason = ""
	}
	if r := g.commit(reqID, next, g.evScheduling(have, next.GetScheduling())); r != nil {
		return r
	}
	g.log.Info("node scheduling changed", "from", SchedulingName(have), "to", SchedulingName(want),
		"reason", c.GetReason(), "requested_by", c.GetRequestedBy())
	return actors.OK()
}

// terminated reports whether the node was stopped for good: an operator's
// TerminateNode, or a cloud node whose instance is (being) terminated.
func (g *grain) terminated() bool {
	return g.cloudClosed() || g.rec.GetState() == managerpb.NodeLifecycle_NODE_LIFECYCLE_STOPPED &&
		g.rec.GetStopReason() == managerpb.NodeStopping_USER_REQUESTED
}

// evScheduling is the node_alert event for a change from one scheduling
// state to s.
func (g *grain) evScheduling(from managerpb.NodeScheduling, s *managerpb.NodeSchedulingState) *managerpb.EventStreamEvent {
	kind := managerpb.NodeAlert_UNCORDONED
	msg := fmt.Sprintf("node %s uncordoned: new placements allowed", g.id)
	switch s.GetState() {
	case managerpb.NodeScheduling_NODE_SCHEDULING_CORDONED:
		kind = managerpb.NodeAlert_CORDONED
		msg = fmt.Sprintf("node %s cordoned: no new placements, its jobs keep running", g.id)
		if from == managerpb.NodeScheduling_NODE_SCHEDULING_DRAINING {
			msg = fmt.Sprintf("node %s cordoned, its drain stopped: no new placements, the jobs not yet moved stay", g.id)
		}
	case managerpb.NodeScheduling_NODE_SCHEDULING_DRAINING:
		kind = managerpb.NodeAlert_DRAINING
		msg = fmt.Sprintf("node %s draining: no new placements, its placed jobs are to be moved elsewhere", g.id)
	}
	if from == managerpb.NodeScheduling_NODE_SCHEDULING_DRAINING && kind == managerpb.NodeAlert_UNCORDONED {
		msg += " (its drain stopped)"
	}
	return g.evAlert(kind, nil, nil, "%s%s", msg, describeBy(s))
}

// describeBy renders " (by X: reason)" for an event or a listing.
func describeBy(s *managerpb.NodeSchedulingState) string {
	var parts []string
	if s.GetRequestedBy() != "" {
		parts = append(parts, "by "+s.GetRequestedBy())
	}
	if s.GetReason() != "" {
		parts = append(parts, "reason: "+s.GetReason())
	}
	if len(parts) == 0 {
		return ""
	}
	return " (" + strings.Join(parts, ", ") + ")"
}

func verb(s managerpb.NodeScheduling) string {
	switch s {
	case managerpb.NodeScheduling_NODE_SCHEDULING_CORDONED:
		return "cordon"
	case managerpb.NodeScheduling_NODE_SCHEDULING_DRAINING:
		return "drain"
	}
	return "uncordon"
}

// SchedulingName is the short lowercase name of s for logs and listings:
// "eligible", "cordoned" or "draining".
func SchedulingName(s managerpb.NodeScheduling) string {
	return strings.ToLower(strings.TrimPrefix(s.String(), "NODE_SCHEDULING_"))
}

// Schedulable reports whether the placement engine may put a new job
// instance on the node of record rec, as far as the record says: the node
// is STARTED (its worker registered and pinging) and an operator has not
// cordoned or drained it. When not, why says so for a placement
// explanation ("node is cordoned (by 127.0.0.1:50112, reason: disk
// swap)"). Liveness (a worker session up right now) and room (capacity,
// capabilities) are the engine's other filters, not checked here. A nil
// record is not schedulable ("node unknown"). Pure: safe from any
// goroutine on a record read from the store (which it does not modify).
func Schedulable(rec *internalpb.NodeRecord) (ok bool, why string) {
	if rec == nil {
		return false, "node unknown"
	}
	if st := rec.GetState(); st != managerpb.NodeLifecycle_NODE_LIFECYCLE_STARTED {
		return false, "node is " + strings.ToLower(strings.TrimPrefix(st.String(), "NODE_LIFECYCLE_"))
	}
	if s := rec.GetScheduling(); s.GetState() != managerpb.NodeScheduling_NODE_SCHEDULING_ELIGIBLE {
		return false, "node is " + SchedulingName(s.GetState()) + describeBy(s)
	}
	return true, ""
}

// Draining reports whether an operator drained the node of record rec
// (DrainNode): the placement engine moves the job instances placed on it
// elsewhere, one replica of a bundle at a time, never primary and backup
// together. False for a nil record.
func Draining(rec *internalpb.NodeRecord) bool {
	return rec.GetScheduling().GetState() == managerpb.NodeScheduling_NODE_SCHEDULING_DRAINING
}

// Cordoned reports whether an operator cordoned the node of record rec
// (CordonNode) and it is not draining: no new placements, nothing moved.
// With Draining, what the scheduler's node view (actors/placement/scheduler
// Node.Cordoned, Node.Draining) is filled from. False for a nil record.
func Cordoned(rec *internalpb.NodeRecord) bool {
	return rec.GetScheduling().GetState() == managerpb.NodeScheduling_NODE_SCHEDULING_CORDONED
}
