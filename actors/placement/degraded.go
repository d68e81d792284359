package placement

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/norsk-oss/norsk-manager/actors/bundle"
	"github.com/norsk-oss/norsk-manager/actors/placement/scheduler"
	"github.com/norsk-oss/norsk-manager/proto/internalpb"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
)

// RecheckWriteGap is the shortest time between two writes of an
// instance's re-checked degradation (each raises placement_degraded), read
// from the note's noted_at: free capacity that comes and goes does not
// make the state flap in the journal.
const RecheckWriteGap = 30 * time.Second

// noteOf is the placement note of p's StartJob: the decision's pool, tier
// and text, and the failure domains c (the asked job when asked, else a
// co-located member) shares with its own other replica against the
// resilience policy, each against its own peer (the decision's Degraded is
// the union over the group, so it is not used here).
func (w *world) noteOf(c *candidate, d scheduler.Decision, asked bool, peer *scheduler.Peer) *internalpb.PlacementNote {
	n := &internalpb.PlacementNote{Pool: c.pool, Tier: d.Tier, Decision: d.String(), Fence: w.fences(c)}
	var shared []scheduler.Domain
	if !asked {
		peer = w.peerOf(c.rec, c.bundle, c.replica, c.jobName)
	}
	// Per job: d.Degraded is the group's union (any member's peer).
	if peer != nil && c.bundle != nil {
		node := schedNode(w.nodeRecs[string(d.Node)])
		node.ID = d.Node
		shared = scheduler.Shared(&node, peer, scheduler.AntiAffinityFromProto(c.bundle.GetBundle().GetResiliencePolicy()))
	}
	if peer != nil {
		n.PeerNodeId = string(peer.Node)
	}
	for _, x := range shared {
		n.DegradedAtPlacement = append(n.DegradedAtPlacement, string(x))
	}
	return n
}

// peerOf is where the other replica of a bundle's derived job runs (its
// node, zone and cloud), nil for a plain job, a bundle without a
// resilience policy, or a peer with no instance.
func (w *world) peerOf(rec *internalpb.JobRecord, b *internalpb.BundleRecord, replica uint32, name string) *scheduler.Peer {
	if b == nil || b.GetBundle().GetResiliencePolicy() == nil {
		return nil
	}
	other, role := uint32(1), scheduler.RoleBackup
	if replica == 1 {
		other, role = 0, scheduler.RolePrimary
	}
	n, ok := w.whereOf(key{scheduler.JobID(bundle.JobID(b.GetBundle().GetBundleId().GetBundleId(), other, name)), role})
	if !ok {
		return nil
	}
	sn := schedNode(w.nodeRecs[n])
	return &scheduler.Peer{Node: scheduler.NodeID(n), Zone: sn.Zone, Cloud: sn.Cloud}
}

// weight orders sets of shared domains as the ranking does (node 4, zone
// 2, cloud 1): the lower, the better kept the policy.
func weight(ds []string) int {
	w := 0
	for _, d := range ds {
		switch scheduler.Domain(d) {
		case scheduler.DomainNode:
			w += 4
		case scheduler.DomainZone:
			w += 2
		case scheduler.DomainCloud:
			w += 1
		}
	}
	return w
}

// recheckPass re-checks every instance placed degraded (its note names
// domains, or a state of a degradation) against the records of pass w:
// whether it still shares the domains with its other replica (which may
// have moved), and if so whether a node sharing fewer has room now (the
// chain run for it with its own room given back in view). A change of the
// state is written to its note through the job grain's RecheckPlacement
// (placement_degraded), at most once per RecheckWriteGap per instance and
// within the engine's write budget. Nothing is moved. An instance whose
// peer has no instance (being re-placed) keeps its state: the pair is
// judged once both run.
func (e *Engine) recheckPass(ctx context.Context, w *world, view *scheduler.View) {
	noted := w.runningIn(w.noted) // the others have no note to re-check
	for i := range noted {
		r := &noted[i]
		in := instanceOf(r.rec, string(r.role))
		note := in.GetPlacement()
		if note == nil || r.js == nil || r.status == internalpb.InstanceStatus_INSTANCE_STOPPING ||
			(len(note.GetDegradedAtPlacement()) == 0 && note.GetDegradation() == managerpb.PlacementDegraded_PLACEMENT_DEGRADED_UNSPECIFIED) {
			continue
		}
		if at := note.GetNotedAt().AsTime(); !w.now.Before(at) && w.now.Sub(at) < RecheckWriteGap {
			continue
		}
		peer := w.peerOf(r.rec, r.bundle, r.js.GetReplicaIndex(), r.js.GetJobName())
		if peer == nil {
			continue
		}
		rc := e.recheck(w, view, r, peer)
		if slices.Equal(rc.GetDegraded(), note.GetDegraded()) && rc.GetDegradation() == note.GetDegradation() && rc.GetPeerNodeId() == note.GetPeerNodeId() {
			continue
		}
		e.mu.Lock()
		send := !e.notes.inflight[r.key] && e.notes.take(w.now)
		if send {
			if e.notes.inflight == nil {
				e.notes.inflight = map[key]bool{}
			}
			e.notes.inflight[r.key] = true
		}
		e.mu.Unlock()
		if !send {
			continue
		}
		e.log.Info("degraded placement re-checked", "job_id", r.job, "role", r.role, "node_id", r.node,
			"degradation", rc.GetDegradation().String(), "degraded", strings.Join(rc.GetDegraded(), ","), "peer_node_id", rc.GetPeerNodeId())
		e.sendNote(ctx, r.key, &internalpb.JobCommand{RequestId: fmt.Sprintf("placement/recheck/%s/%s/%d", r.job, r.role, r.seq),
			JobId: string(r.job), Cmd: &internalpb.JobCommand_RecheckPlacement{RecheckPlacement: rc}}, "record placement re-check")
	}
}

// recheck judges r against its peer now (see recheckPass).
func (e *Engine) recheck(w *world, view *scheduler.View, r *running, peer *scheduler.Peer) *internalpb.RecheckPlacement {
	rc := &internalpb.RecheckPlacement{Role: string(r.role), NodeId: r.node, PeerNodeId: string(peer.Node)}
	node := schedNode(w.nodeRecs[r.node])
	node.ID = scheduler.NodeID(r.node)
	aa := scheduler.AntiAffinityFromProto(r.bundle.GetBundle().GetResiliencePolicy())
	for _, d := range scheduler.Shared(&node, peer, aa) {
		rc.Degraded = append(rc.Degraded, string(d))
	}
	if len(rc.Degraded) == 0 {
		rc.Degradation = managerpb.PlacementDegraded_RESOLVED
		rc.Message = fmt.Sprintf("no longer shares a forbidden failure domain with the other replica on node %s", peer.Node)
		return rc
	}
	rc.Degradation = managerpb.PlacementDegraded_DEGRADED
	rc.Message = fmt.Sprintf("shares %s with the other replica on node %s: no node sharing less has room",
		strings.Join(rc.Degraded, ", "), peer.Node)
	if better, ok := e.betterNode(w, view, r, weight(rc.Degraded)); ok {
		rc.Degradation = managerpb.PlacementDegraded_FIX_AVAILABLE
		rc.Message = fmt.Sprintf("shares %s with the other replica on node %s; node %s shares less and has room now: the job is not moved (a restart or a drain of node %s will use it)",
			strings.Join(rc.Degraded, ", "), peer.Node, better, r.node)
	}
	return rc
}

// betterNode runs the chain for r with its own instance's room given back
// and reports the node chosen if it shares less with the peer than want
// (the weight of what r's node shares). The view is left as it was.
func (e *Engine) betterNode(w *world, view *scheduler.View, r *running, want int) (scheduler.NodeID, bool) {
	c := newCandidate(r.rec, r.seq, r.bundle, r.js)
	var pool *managerpb.Pool
	if c.pool != "" {
		if pool = w.pools[c.pool]; pool == nil {
			return "", false
		}
	}
	own, ok := w.placed[key{r.job, r.role}]
	if !ok || !view.Remove(r.job, r.role) {
		return "", false
	}
	defer view.Add(own)
	d, err := view.Select(e.askOf(w, &c, pool))
	if err != nil || d.Node == scheduler.NodeID(r.node) {
		return "", false
	}
	got := make([]string, len(d.Degraded))
	for i, x := range d.Degraded {
		got[i] = string(x)
	}
	return d.Node, weight(got) < want
}

// instanceOf returns rec's instance of role, nil if none.
func instanceOf(rec *internalpb.JobRecord, role string) *internalpb.Instance {
	for _, in := range rec.GetInstances() {
		if in.GetRole() == role {
			return in
		}
	}
	return nil
}
