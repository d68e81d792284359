package node

import (
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"google.golang.org/protobuf/proto"

	"github.com/norsk-oss/norsk-manager/actors"
	"github.com/norsk-oss/norsk-manager/proto/errorpb"
	"github.com/norsk-oss/norsk-manager/proto/internalpb"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
)

// Nodes the placement engine creates and releases (issue 13 §1;
// docs/design/placement.md, "Provisioning and release"): the create
// commands carry the engine's mark (NodeRecord.provisioned), recorded with
// a node_provisioning event in the same append as the node; SetIdle keeps
// the idle-since instant the linger counts from; a TerminateNode naming
// that instant is a release, refused if the node runs something.

// evProvisioning is the node_provisioning event of a node the engine
// created (nil when it did not).
func evProvisioning(rec *internalpb.NodeRecord) *managerpb.EventStreamEvent {
	p := rec.GetProvisioned()
	if p == nil {
		return nil
	}
	return &managerpb.EventStreamEvent{Event: &managerpb.EventStreamEvent_NodeProvisioning{NodeProvisioning: &managerpb.NodeProvisioning{
		NodeId: rec.GetMetadata().GetNodeId(), Pool: p.GetPool(), Tier: p.GetTier(), Offering: p.GetOffering(), ForJobs: p.GetForJobs(),
		Message: "created by the placement engine for jobs no node had room for"}}}
}

// createEvents are the events of a node's creation: node_starting, and
// node_provisioning when the engine created it.
func createEvents(rec *internalpb.NodeRecord) []*managerpb.EventStreamEvent {
	evs := []*managerpb.EventStreamEvent{evStarting(rec)}
	if ev := evProvisioning(rec); ev != nil {
		evs = append(evs, ev)
	}
	return evs
}

// setIdle records (or clears, since unset) when the engine-created node
// began running nothing. Refused (FAILED_PRECONDITION) for a node the
// engine did not create.
func (g *grain) setIdle(reqID string, c *internalpb.SetIdle) *internalpb.Reply {
	switch {
	case g.rec == nil:
		return g.notFound()
	case g.rec.GetProvisioned() == nil:
		return actors.Fail(errorpb.Code_FAILED_PRECONDITION, "node %s was not created by the placement engine; it is never released", g.id)
	case proto.Equal(g.rec.GetIdleSince(), c.GetSince()):
		return actors.OK()
	}
	next := g.next()
	next.IdleSince = c.GetSince()
	if r := g.commit(reqID, next); r != nil {
		return r
	}
	return actors.OK()
}

// releaseSettle is how long after a provision was sent to the worker a
// release of the node is refused, when the provision came after the idle
// instant the release names. The job grain records the instance only once
// this grain answered the provision (its commit bounded by its append
// timeout, 10 s by default), so until then the records show nothing on the
// node, and a release in that window would terminate the node under a job
// just sent to it (a StartJob by hand, or a previous leader's, racing the
// engine's release). After it the records say: a provision the worker
// refused leaves nothing recorded, and the node is released.
const releaseSettle = 30 * time.Second

// provisionUnrecorded reports whether a provision may not be recorded yet
// at now for a release of a node idle since idleSince: one queued for the
// session (queued), or one sent at sentAt (zero: never) after idleSince
// and less than releaseSettle ago. A provision before idleSince was seen
// ended by the engine that marked the node idle.
func provisionUnrecorded(queued int, sentAt, idleSince, now time.Time) bool {
	return queued > 0 || !sentAt.IsZero() && sentAt.After(idleSince) && now.Sub(sentAt) < releaseSettle
}

// release terminates the engine-created node idle since c's instant
// (TerminateNode.release_idle_since), with node_released, unless it no
// longer is: another idle instant recorded, a provision queued, or sent
// after the idle instant within releaseSettle (its instance may not be
// recorded yet), or an
// instance recorded on it (a StartJob the engine's view had not seen
// yet). The provision guard is this activation's memory: one sent by an
// activation that ended just before (a topology change in that window)
// is not seen.
func (g *grain) release(ctx actor.Context, reqID string, c *internalpb.TerminateNode) *internalpb.Reply {
	switch {
	case g.rec == nil:
		return g.notFound()
	case g.rec.GetProvisioned() == nil:
		return actors.Fail(errorpb.Code_FAILED_PRECONDITION, "node %s was not created by the placement engine; it is never released", g.id)
	case g.rec.GetState() == managerpb.NodeLifecycle_NODE_LIFECYCLE_STOPPED:
		return g.terminate(ctx, reqID, nil)
	case !proto.Equal(g.rec.GetIdleSince(), c.GetReleaseIdleSince()):
		return actors.Fail(errorpb.Code_FAILED_PRECONDITION, "node %s: idle since %v, not %v: not released", g.id, g.rec.GetIdleSince().AsTime(), c.GetReleaseIdleSince().AsTime())
	case provisionUnrecorded(len(g.provisions), g.provisionSentAt, c.GetReleaseIdleSince().AsTime(), g.cfg.Clock()):
		return actors.Fail(errorpb.Code_FAILED_PRECONDITION, "node %s was just given a job to run (its instance may not be recorded yet): not released", g.id)
	case len(g.instancesOnNode()) > 0:
		return actors.Fail(errorpb.Code_FAILED_PRECONDITION, "node %s runs an instance: not released", g.id)
	}
	idle := g.cfg.Clock().Sub(c.GetReleaseIdleSince().AsTime())
	p := g.rec.GetProvisioned()
	ev := &managerpb.EventStreamEvent{Event: &managerpb.EventStreamEvent_NodeReleased{NodeReleased: &managerpb.NodeReleased{
		NodeId: g.nodeID(), Pool: p.GetPool(), Tier: p.GetTier(), IdleSeconds: uint32(max(idle.Seconds(), 0))}}}
	g.log.Info("releasing a node the engine created: it ran nothing for its linger", "pool", p.GetPool(), "tier", p.GetTier(), "idle", idle.String())
	return g.terminate(ctx, reqID, ev)
}
