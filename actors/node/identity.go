package node

import (
	"fmt"
	"net"
	"strconv"
	"time"

	"github.com/norsk-oss/norsk-manager/actors"
	"github.com/norsk-oss/norsk-manager/proto/errorpb"
	"github.com/norsk-oss/norsk-manager/proto/internalpb"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
	"github.com/norsk-oss/norsk-manager/proto/workerauth"
)

// DefaultMoveGrace is how long a node's worker session must have been
// down before a worker at another address presenting the node's identity
// is taken for the same host having moved (Config.MoveGrace). Longer than
// a health timeout (10 s: the old session is really gone), shorter than
// the lost timeout (30 s: a host that moves is not declared stopped).
const DefaultMoveGrace = 15 * time.Second

// checkTerminated refuses the registration of a cluster slot's worker
// after an operator terminated the node (TerminateNode): re-registering
// would otherwise bring it back 30 s later (docs/design/cluster-slots.md).
func (g *grain) checkTerminated() *internalpb.Reply {
	if g.rec.GetProvider() != managerpb.NodeProvider_NODE_PROVIDER_CLUSTER ||
		g.rec.GetState() != managerpb.NodeLifecycle_NODE_LIFECYCLE_STOPPED || g.rec.GetStopReason() != managerpb.NodeStopping_USER_REQUESTED {
		return nil
	}
	return actors.FailWithReason(errorpb.Code_PERMISSION_DENIED, workerauth.ReasonNodeTerminated,
		"cluster slot %q (node %s) was terminated by an operator: its worker is refused; to use the host again, deregister the slot (norsk-ctl slot deregister %s) and register a new one",
		g.rec.GetSlotName(), g.id, g.id)
}

// checkIdentityInUse refuses a worker that presents the node's credential
// from another address while the node's worker session is live, or went
// down less than MoveGrace ago: two workers with one identity (a copied
// --state-dir) would otherwise take the node's session in turns and
// report each other's jobs. A worker at a new address after the old
// session has been gone for MoveGrace is taken for the host having moved,
// once: from then on the old address is the one refused.
func (g *grain) checkIdentityInUse(c *internalpb.MemberRegister, sameIdentity bool) *internalpb.Reply {
	if !sameIdentity || g.rec.GetAddress() == "" || (c.GetAddress() == g.rec.GetAddress() && c.GetPort() == g.rec.GetPort()) {
		return nil
	}
	old := net.JoinHostPort(g.rec.GetAddress(), strconv.Itoa(int(g.rec.GetPort())))
	next := net.JoinHostPort(c.GetAddress(), strconv.Itoa(int(c.GetPort())))
	if !g.healthy {
		down := g.lostSince
		if down.IsZero() {
			down = g.activatedAt // this activation never saw the session
		}
		if since := g.cfg.Clock().Sub(down); since >= g.cfg.MoveGrace {
			g.log.Warn("the node's worker registered from a new address; its old session has been down long enough: taking it for the host having moved",
				"old_addr", old, "new_addr", next, "down_for", since.Round(time.Second))
			return nil
		}
		// Retried by the worker (FAILED_PRECONDITION): if the old worker
		// does not come back within the grace, this one is accepted.
		return actors.Fail(errorpb.Code_FAILED_PRECONDITION,
			"node %s: its worker at %s was connected until moments ago; a worker at %s presenting the same identity is accepted once the old one has been gone for %s",
			g.id, old, next, g.cfg.MoveGrace)
	}
	msg := fmt.Sprintf("node %s: a live worker at %s holds this node's identity (its session is up); the worker at %s presents the same node credential (a copy of its --state-dir?): refused; stop one of them",
		g.id, old, next)
	g.log.Warn("refused a second worker presenting a live node's identity", "addr", old, "other_addr", next)
	if r := g.commit("", g.next(), g.evAlert(managerpb.NodeAlert_IDENTITY_CONFLICT, nil, nil, "%s", msg)); r != nil {
		g.log.Warn("could not record the identity conflict", "error", r.GetMessage())
	}
	return actors.FailWithReason(errorpb.Code_PERMISSION_DENIED, workerauth.ReasonIdentityInUse, "%s", msg)
}
