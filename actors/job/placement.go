package job

import (
	"slices"
	"strings"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/norsk-oss/norsk-manager/actors"
	"github.com/norsk-oss/norsk-manager/proto/commonpb"
	"github.com/norsk-oss/norsk-manager/proto/errorpb"
	"github.com/norsk-oss/norsk-manager/proto/internalpb"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
)

// The placement engine's notes on a job record (docs/design/placement.md,
// "Events"): a StartJob's note kept on the instance it records (job_placed,
// placement_degraded), a failure to place a role (placement_failed), and a
// re-check of a degraded instance (placement_degraded). The functions
// below change a record the caller owns and return the events of the
// commit; the grain commits them, and the placement engine's tests apply
// them to their fake records, so both follow one rule.

// maxNoteText bounds the free texts the engine sends (decision, reason,
// message, filter details), in bytes: a note must never push a record
// towards the store's batch limit.
const maxNoteText = 2048

// maxNoteFilters bounds the filter counts of one attempt (the chain has 16
// filters).
const maxNoteFilters = 32

// NotePlaced keeps note (the StartJob's; nil: a start by hand) on in, an
// instance being recorded in rec, marks rec's placement failure of the role
// cleared, and returns the events the commit raises beside job_updated:
// job_placed, and placement_degraded when the decision shares a failure
// domain with the other replica. now stamps the note.
func NotePlaced(rec *internalpb.JobRecord, in *internalpb.Instance, note *internalpb.PlacementNote, now *timestamppb.Timestamp) []*managerpb.EventStreamEvent {
	if note == nil {
		return nil
	}
	n := proto.Clone(note).(*internalpb.PlacementNote)
	n.Decision = clip(n.GetDecision())
	n.NotedAt = now
	if len(n.GetDegraded()) == 0 {
		n.Degraded = slices.Clone(n.GetDegradedAtPlacement())
	}
	if len(n.GetDegraded()) > 0 && n.GetDegradation() == managerpb.PlacementDegraded_PLACEMENT_DEGRADED_UNSPECIFIED {
		n.Degradation = managerpb.PlacementDegraded_DEGRADED
	}
	in.Placement = n
	for _, f := range rec.GetPlacementFailures() {
		if f.GetRole() == in.GetRole() {
			f.Cleared = true
		}
	}
	id := rec.GetJob().GetJob().GetJobId()
	out := []*managerpb.EventStreamEvent{{Event: &managerpb.EventStreamEvent_JobPlaced{JobPlaced: &managerpb.JobPlaced{
		JobId: id, Role: in.GetRole(), NodeId: &commonpb.NodeId{NodeId: in.GetNodeId()}, Pool: n.GetPool(), Tier: n.GetTier(),
		DegradedDomains: n.GetDegraded(), Decision: n.GetDecision()}}}}
	if len(n.GetDegraded()) > 0 {
		msg := "placed sharing " + strings.Join(n.GetDegraded(), ", ") + " with the other replica on node " + n.GetPeerNodeId() +
			" against the resilience policy: no node keeping out of it had room; re-checked as capacity appears, without moving the job"
		out = append(out, degradedEvent(id, in, n, msg))
	}
	return out
}

// ApplyPlacementFailure records f as the placement engine's last failure to
// place its role in rec and returns the placement_failed event, or a
// FAILED_PRECONDITION reply (nothing changed) when the role has an
// instance: the engine decided on an older record. now is the record's
// recorded_at.
func ApplyPlacementFailure(rec *internalpb.JobRecord, f *internalpb.RecordPlacementFailure, now *timestamppb.Timestamp) (*managerpb.EventStreamEvent, *internalpb.Reply) {
	id := rec.GetJob().GetJob().GetJobId().GetJobId()
	if i := instanceIndex(rec, f.GetRole()); i >= 0 {
		return nil, actors.Fail(errorpb.Code_FAILED_PRECONDITION, "job %q role %q is placed on node %q: placement failure not recorded",
			id, f.GetRole(), rec.GetInstances()[i].GetNodeId())
	}
	a := clipAttempt(f.GetAttempt())
	rec.PlacementFailures = slices.DeleteFunc(rec.PlacementFailures, func(x *internalpb.PlacementFailureRecord) bool { return x.GetRole() == f.GetRole() })
	rec.PlacementFailures = append(rec.PlacementFailures, &internalpb.PlacementFailureRecord{Role: f.GetRole(), Attempt: a, RecordedAt: now})
	slices.SortFunc(rec.PlacementFailures, func(x, y *internalpb.PlacementFailureRecord) int { return strings.Compare(x.GetRole(), y.GetRole()) })
	return &managerpb.EventStreamEvent{Event: &managerpb.EventStreamEvent_PlacementFailed{PlacementFailed: &managerpb.PlacementFailed{
		JobId: rec.GetJob().GetJob().GetJobId(), Role: f.GetRole(), Attempt: a}}}, nil
}

// ApplyRecheck replaces the re-checked fields of the note of c's instance
// in rec and returns the placement_degraded event; nil and nil when the
// note already says so (nothing to write). FAILED_PRECONDITION when the
// role has no instance on c's node, or one the engine did not place.
func ApplyRecheck(rec *internalpb.JobRecord, c *internalpb.RecheckPlacement, now *timestamppb.Timestamp) (*managerpb.EventStreamEvent, *internalpb.Reply) {
	id := rec.GetJob().GetJob().GetJobId()
	i := instanceIndex(rec, c.GetRole())
	if i < 0 || rec.GetInstances()[i].GetNodeId() != c.GetNodeId() {
		return nil, actors.Fail(errorpb.Code_FAILED_PRECONDITION, "job %q role %q has no instance on node %q: re-check not recorded",
			id.GetJobId(), c.GetRole(), c.GetNodeId())
	}
	in := rec.GetInstances()[i]
	n := in.GetPlacement()
	if n == nil {
		return nil, actors.Fail(errorpb.Code_FAILED_PRECONDITION, "job %q role %q was not placed by the placement engine: nothing to re-check",
			id.GetJobId(), c.GetRole())
	}
	if slices.Equal(n.GetDegraded(), c.GetDegraded()) && n.GetDegradation() == c.GetDegradation() && n.GetPeerNodeId() == c.GetPeerNodeId() {
		return nil, nil
	}
	n.Degraded, n.Degradation, n.PeerNodeId, n.NotedAt = slices.Clone(c.GetDegraded()), c.GetDegradation(), c.GetPeerNodeId(), now
	return degradedEvent(id, in, n, clip(c.GetMessage())), nil
}

func degradedEvent(id *commonpb.JobId, in *internalpb.Instance, n *internalpb.PlacementNote, msg string) *managerpb.EventStreamEvent {
	return &managerpb.EventStreamEvent{Event: &managerpb.EventStreamEvent_PlacementDegraded{PlacementDegraded: &managerpb.PlacementDegraded{
		JobId: id, Role: in.GetRole(), NodeId: &commonpb.NodeId{NodeId: in.GetNodeId()}, Domains: n.GetDegraded(),
		State: n.GetDegradation(), Message: msg, PeerNodeId: &commonpb.NodeId{NodeId: n.GetPeerNodeId()}}}}
}

// clipAttempt is a copy of a bounded in size.
func clipAttempt(a *managerpb.PlacementAttempt) *managerpb.PlacementAttempt {
	c := proto.Clone(a).(*managerpb.PlacementAttempt)
	if c == nil {
		c = &managerpb.PlacementAttempt{}
	}
	c.Reason = clip(c.GetReason())
	if len(c.Filters) > maxNoteFilters {
		c.Filters = c.Filters[:maxNoteFilters]
	}
	for _, f := range c.Filters {
		f.Filter, f.Detail = clip(f.GetFilter()), clip(f.GetDetail())
	}
	return c
}

// clip bounds s to maxNoteText bytes of valid UTF-8.
func clip(s string) string {
	if len(s) <= maxNoteText {
		return s
	}
	return strings.ToValidUTF8(s[:maxNoteText], "") + "…"
}

// recordPlacementFailure is the grain's RecordPlacementFailure: also
// refused while a start of the role is in flight.
func (g *grain) recordPlacementFailure(reqID string, f *internalpb.RecordPlacementFailure) *internalpb.Reply {
	if g.rec == nil {
		return g.notFound()
	}
	if p, ok := g.pending[f.GetRole()]; ok {
		return actors.Fail(errorpb.Code_FAILED_PRECONDITION, "job %q role %q is being started on node %q: placement failure not recorded", g.id, f.GetRole(), p.node)
	}
	next := g.next()
	ev, fail := ApplyPlacementFailure(next, f, g.now())
	if fail != nil {
		return fail
	}
	if r := g.commit(reqID, next, ev); r != nil {
		return r
	}
	g.log.Info("placement failure recorded", "role", f.GetRole(), "reason", f.GetAttempt().GetReason())
	return actors.OK()
}

// recheckPlacement is the grain's RecheckPlacement.
func (g *grain) recheckPlacement(reqID string, c *internalpb.RecheckPlacement) *internalpb.Reply {
	if g.rec == nil {
		return g.notFound()
	}
	next := g.next()
	ev, fail := ApplyRecheck(next, c, g.now())
	if fail != nil || ev == nil {
		if fail == nil {
			return actors.OK()
		}
		return fail
	}
	if r := g.commit(reqID, next, ev); r != nil {
		return r
	}
	g.log.Info("placement re-checked", "role", c.GetRole(), "node_id", c.GetNodeId(),
		"degradation", c.GetDegradation().String(), "degraded", strings.Join(c.GetDegraded(), ","))
	return actors.OK()
}
