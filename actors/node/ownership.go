package node

import (
	"fmt"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/norsk-oss/norsk-manager/actors"
	"github.com/norsk-oss/norsk-manager/persistence"
	"github.com/norsk-oss/norsk-manager/proto/commonpb"
	"github.com/norsk-oss/norsk-manager/proto/errorpb"
	"github.com/norsk-oss/norsk-manager/proto/internalpb"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
	"github.com/norsk-oss/norsk-manager/proto/workerpb"
)

// One commanding activation (ARCHITECTURE §7.7, docs/design/grains.md
// "Freshness and ownership"): a node grain's worker session is the one
// thing two activations of the grain cannot share. The worker obeys only
// its newest session, and the epoch of every verified session is recorded
// in the node record. An activation that finds a newer session than its
// own — the worker ended its stream as superseded, or the record holds a
// newer epoch — no longer commands the worker: it passivates, answering
// what reaches it meanwhile with UNAVAILABLE (nothing done), and never
// dials again by itself. The next command to the grain activates it afresh
// on whichever manager owns it then, and that activation dials at once.

// provisionTimeout is the self-message that ends the wait of queued
// provisions whose deadline passed.
type provisionTimeout struct{}

// stopResend is the self-message of the stop-resend ticker.
type stopResend struct{}

// pendingProvision is a Provision waiting for the worker session to come
// up (the grain was just activated, or is re-dialling).
type pendingProvision struct {
	sender   *actor.PID
	cmd      *internalpb.Provision
	deadline time.Time
}

// provisionMargin is how long before the caller's deadline a queued
// provision is answered "not online", so the answer reaches the caller.
const provisionMargin = 500 * time.Millisecond

// refresh makes the record the newest committed one before a command is
// decided on (actors.Current). A non-nil reply is the answer: the check
// could not be made, or this activation no longer commands the worker.
func (g *grain) refresh(ctx actor.Context, m *internalpb.NodeCommand) *internalpb.Reply {
	if g.superseded {
		return g.supersededReply()
	}
	stale, fail := actors.Current(g.cfg.Journal, persistence.NodeKey(g.id), g.seq, m.GetDeadline())
	if fail != nil {
		return fail
	}
	if stale {
		g.reloadChecked(ctx)
		if g.superseded {
			return g.supersededReply()
		}
	}
	return nil
}

// reloadChecked reloads the record; a newer session epoch in it than this
// activation's own session means another activation has the worker.
func (g *grain) reloadChecked(ctx actor.Context) {
	own := g.sessionEpoch
	hadSession := g.session != nil
	g.load()
	if hadSession && g.rec.GetSessionEpoch() > own {
		g.onSuperseded(ctx, "the node record holds a newer worker session")
	}
}

func (g *grain) supersededReply() *internalpb.Reply {
	return actors.Fail(errorpb.Code_UNAVAILABLE,
		"node %s: another activation of its grain holds the worker session (a manager topology change is in progress); nothing was done: retry", g.id)
}

// onSuperseded ends this activation's command of the worker: the session
// closes, queued provisions are answered, timers stop and the grain
// passivates. Idempotent.
func (g *grain) onSuperseded(ctx actor.Context, why string) {
	if g.superseded {
		return
	}
	g.superseded = true
	g.log.Info("worker session taken by another activation of this node grain; passivating", "why", why, "epoch", g.sessionEpoch)
	if g.session != nil {
		ctx.Stop(g.session)
		g.session = nil
	}
	// Not markDisconnected: the liveness registry belongs to the
	// activation that holds the session now, if it is on this manager.
	g.connected, g.healthy = false, false
	g.stopTimers()
	g.failProvisions(ctx, g.supersededReply())
	ctx.Send(ctx.Parent(), &actors.Passivate{})
}

// onSessionTaken handles the worker ending this activation's session as
// superseded. Every session of this cluster records its epoch before the
// worker accepts it, so a record (read after the barrier) with a newer
// epoch means another activation of the grain took over: passivate. A
// record without one means a manager this cluster does not know took the
// worker (a second manager on a copy of the data dir): contested, said
// loudly, and the node stays without a session here until a command needs
// the worker or the other manager lets go (its worker then registers again).
func (g *grain) onSessionTaken(ctx actor.Context, epoch uint64) {
	rec := &internalpb.NodeRecord{}
	found, seq, err := actors.LoadRecord(g.cfg.Journal, persistence.NodeKey(g.id), rec)
	if err != nil || !found || rec.GetSessionEpoch() > epoch {
		g.onSuperseded(ctx, "the worker ended this session as superseded")
		return
	}
	g.rec, g.seq = rec, seq
	what := fmt.Sprintf("the worker's session (epoch %d) was taken by a session no manager of this cluster opened: "+
		"another manager, outside this cluster, dials this worker with its credential (a copy of a data dir?); never run two managers on copies of one data dir",
		epoch)
	g.log.Error("worker session taken by a manager outside this cluster", "epoch", epoch, "address", g.rec.GetAddress(), "port", g.rec.GetPort())
	if g.rec.GetContested() != "" {
		return
	}
	next := g.next()
	next.Contested = what
	if r := g.commit("", next, g.evAlert(managerpb.NodeAlert_CONTESTED, nil, nil, "node %s: %s", g.id, what)); r != nil {
		g.log.Warn("could not record the node as contested", "error", r.GetMessage())
	}
}

// queueProvision holds c until the session being dialled is up (or its
// dial fails, or the caller's deadline nears). It dials at once if no dial
// is under way.
func (g *grain) queueProvision(ctx actor.Context, c *internalpb.Provision, deadline time.Time) {
	if deadline.IsZero() {
		deadline = time.Now().Add(g.cfg.HelloTimeout)
	}
	g.provisions = append(g.provisions, pendingProvision{sender: ctx.Sender(), cmd: c, deadline: deadline})
	if g.session == nil {
		if g.cancelRedial != nil {
			g.cancelRedial()
			g.cancelRedial = nil
		}
		g.ensureSession(ctx)
	}
	g.timer.SendOnce(max(time.Until(deadline)-provisionMargin, 0), ctx.Self(), &provisionTimeout{})
}

// flushProvisions sends the queued provisions on the session that just
// became healthy and answers their callers; one whose product template
// the session's hello did not offer is refused instead (templateRefusal).
func (g *grain) flushProvisions() {
	for _, p := range g.provisions {
		if r := g.templateRefusal(p.cmd.GetJob()); r != nil {
			g.system.Root.Send(p.sender, r)
			continue
		}
		g.sendToWorker(g.provisionMessage(p.cmd.GetJob()))
		g.system.Root.Send(p.sender, &internalpb.Reply{Payload: &internalpb.Reply_Node{Node: g.rec}})
		g.provisionSentAt = g.cfg.Clock()
	}
	g.provisions = nil
}

// failProvisions answers every queued provision with r.
func (g *grain) failProvisions(ctx actor.Context, r *internalpb.Reply) {
	for _, p := range g.provisions {
		ctx.Send(p.sender, r)
	}
	g.provisions = nil
}

// onProvisionTimeout answers the queued provisions whose deadline nears.
func (g *grain) onProvisionTimeout(ctx actor.Context) {
	keep := g.provisions[:0]
	for _, p := range g.provisions {
		if time.Until(p.deadline) > provisionMargin {
			keep = append(keep, p)
			continue
		}
		ctx.Send(p.sender, g.notOnline())
	}
	g.provisions = keep
}

// notOnline is the refusal of a provision to a node without a session.
func (g *grain) notOnline() *internalpb.Reply {
	return actors.Fail(errorpb.Code_FAILED_PRECONDITION, "node %q is not online (state %s, worker session %s)",
		g.id, g.rec.GetState().String(), map[bool]string{true: "up", false: "down"}[g.connected])
}

// startStopResend starts the ticker that re-sends stop_job while the
// session is healthy.
func (g *grain) startStopResend(ctx actor.Context) {
	if g.cancelResend == nil && g.cfg.StopResendInterval > 0 {
		g.cancelResend = g.timer.SendRepeatedly(g.cfg.StopResendInterval, g.cfg.StopResendInterval, ctx.Self(), &stopResend{})
	}
}

// resendStops sends stop_job for every instance that job records on this
// node mark STOPPING. A StopJob commits STOPPING and then asks the node
// grain once; that message can reach an activation that no longer holds
// the worker session (a manager frozen or cut off while another took the
// session over) and be lost. Re-sending from the records, level-triggered,
// makes every committed stop reach the worker within an interval; the
// worker answers a stop of a job it does not run with job_stopped (with
// the instance id of the stop), which ends the instance.
func (g *grain) resendStops() {
	if !g.healthy || g.superseded {
		return
	}
	refs := g.instancesOnNode()
	if len(refs) == 0 {
		return
	}
	// The records come from the store's World view (decoded in memory,
	// fed by the applies: a job with an instance is always in it), not a
	// decode of each record: every node grain does this every interval,
	// so it would cost every placed job's decode per interval (issue 22).
	w, err := g.cfg.Store.World().Read()
	if err != nil {
		g.log.Warn("read the instances to stop", "error", err)
		return
	}
	n := 0
	for _, ref := range refs {
		rec, _, ok := w.PlacementJob(ref.JobID)
		if !ok {
			continue
		}
		for _, in := range rec.GetInstances() {
			if in.GetRole() == ref.Role && in.GetNodeId() == g.id && in.GetStatus() == internalpb.InstanceStatus_INSTANCE_STOPPING {
				g.sendToWorker(&workerpb.NodeControllerMessage{Message: &workerpb.NodeControllerMessage_StopJob{StopJob: &commonpb.ActiveJobKey{
					JobId: &commonpb.JobId{JobId: ref.JobID}, Role: ref.Role, InstanceId: in.GetInstanceId()}}})
				n++
			}
		}
	}
	if n > 0 {
		g.log.Debug("re-sent stop_job for instances still stopping", "instances", n)
	}
}

// stateAllowsProvision reports whether a provision may wait for a session
// of this node rather than be refused at once.
func (g *grain) stateAllowsProvision() bool {
	return g.wantsSession() && g.rec.GetState() != managerpb.NodeLifecycle_NODE_LIFECYCLE_REGISTERED
}
