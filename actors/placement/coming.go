package placement

import (
	"time"

	"github.com/norsk-oss/norsk-manager/actors/placement/scheduler"
	"github.com/norsk-oss/norsk-manager/actors/provisioner"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
)

// The engine's own answer to Provisioning.NodeComing (placement.md,
// "Priorities"): the last provisioning plan says which node is coming for
// each waiting role, the node's create says when it started, and
// Config.NodeBootTime how long a create takes until the node's worker
// takes jobs.

// DefaultNodeBootTime is Config.NodeBootTime's default: about what a cloud
// instance takes from its launch to a worker that has registered its
// resources (boot, the worker's start, its first report).
const DefaultNodeBootTime = 2 * time.Minute

// comingNode is a node the last plan counts on for a waiting role.
type comingNode struct {
	id string
	// started is when its create started: the node record's creation, the
	// send of a create in flight, or the pass that planned it.
	started time.Time
}

// keepComing keeps, from plan d decided at now over nodes (the
// engine-created nodes and the creates in flight), the node coming for
// each waiting role, and which roles the plan saw (waiting).
func (e *Engine) keepComing(d provisioner.Decision, nodes []provisioner.Node, waiting []provisioner.Waiting, now time.Time) {
	started := make(map[string]time.Time, len(nodes))
	for _, n := range nodes {
		started[n.ID] = n.CreatedAt
	}
	coming := map[string]comingNode{}
	for k, id := range d.Coming {
		coming[k] = comingNode{id: id, started: started[id]}
	}
	for _, c := range d.Creates {
		for _, k := range c.ForJobs {
			coming[k] = comingNode{id: c.NodeID, started: now}
		}
	}
	planned := make(map[string]bool, len(waiting))
	for _, w := range waiting {
		planned[w.Key] = true
	}
	e.prov.mu.Lock()
	e.prov.coming, e.prov.planned = coming, planned
	e.prov.mu.Unlock()
}

// NodeComing reports whether the engine's last provisioning plan counts on
// a node for (job, role) — one being created, or one it decided to create
// — and when that node is expected to take it: its create's start plus
// Config.NodeBootTime (the engine's clock; possibly already past, for a
// node slower than expected). It is the Provisioning the engine uses
// when Config.Provisioning is nil.
func (e *Engine) NodeComing(job, role string) (time.Time, bool) {
	e.prov.mu.Lock()
	defer e.prov.mu.Unlock()
	n, ok := e.prov.coming[key{job: scheduler.JobID(job), role: scheduler.Role(role)}.String()]
	if !ok {
		return time.Time{}, false
	}
	return n.started.Add(e.cfg.NodeBootTime), true
}

// unplanned reports whether k has not been seen by a provisioning plan
// yet: a role that became unplaced in this pass, whose plan runs after the
// pass's decisions (provisionPass).
func (e *Engine) unplanned(k key) bool {
	e.prov.mu.Lock()
	defer e.prov.mu.Unlock()
	return !e.prov.planned[k.String()]
}

// provisioned reports whether a tier of pool has a provisioner: a role of
// that pool that fits no node may get a node created for it.
func provisioned(pool *managerpb.Pool) bool {
	for _, t := range pool.GetTiers() {
		if len(provisioner.Offerings(t)) > 0 {
			return true
		}
	}
	return false
}

// comingFor is whether a node is coming for c, and by when: from
// Config.Provisioning when set, else from the engine's own plans. wait is
// set when no plan has seen c yet (it became unplaced in this pass; the
// plan runs after the pass's decisions), c's pool can provision, and a
// node could take c by deadline — one created now, or one of the pool
// already being created: c then neither preempts now nor gets a node as
// well; the next pass decides on the plan.
func (e *Engine) comingFor(w *world, c *candidate, pool *managerpb.Pool, deadline time.Time) (by time.Time, ok, wait bool) {
	if e.cfg.Provisioning != nil {
		by, ok = e.cfg.Provisioning.NodeComing(string(c.job), string(c.role))
		return by, ok, false
	}
	if e.unplanned(c.key) && provisioned(pool) {
		return deadline, false, e.canComeBy(w, pool, deadline)
	}
	by, ok = e.NodeComing(string(c.job), string(c.role))
	return by, ok, false
}

// canComeBy reports whether a node of pool could take a job by deadline:
// one created now in a tier below its max_nodes, or one being created
// (recorded or in flight). Whether the job fits the node is the plan's to
// say; this only keeps a role that no plan could serve in time from
// waiting a pass.
func (e *Engine) canComeBy(w *world, pool *managerpb.Pool, deadline time.Time) bool {
	boot := e.cfg.NodeBootTime
	name := pool.GetName()
	live := map[string]int{}
	e.prov.mu.Lock()
	defer e.prov.mu.Unlock()
	creating := func(n provisioner.Node) bool {
		if n.Pool != name || n.State == provisioner.Stopped {
			return false
		}
		live[n.Tier]++
		return n.State == provisioner.Creating && !n.CreatedAt.Add(boot).After(deadline)
	}
	for id, rec := range w.nodeRecs {
		n, ok := provisioner.NodeOf(rec)
		if _, sent := e.prov.creating[id]; ok && !sent && creating(n) {
			return true
		}
	}
	for _, n := range e.prov.creating {
		if creating(n) {
			return true
		}
	}
	if w.now.Add(boot).After(deadline) {
		return false
	}
	for _, t := range pool.GetTiers() {
		if len(provisioner.Offerings(t)) > 0 && (t.GetMaxNodes() == 0 || live[t.GetName()] < int(t.GetMaxNodes())) {
			return true
		}
	}
	return false
}

// unwait takes k out of the pass's waiting set: a HIGH role that preempts
// (or whose preemption is in progress) takes the room it makes, so no
// node is created for it; its victims wait and are planned for in the
// next pass.
func (w *world) unwait(k key) {
	s := k.String()
	for i := len(w.waiting) - 1; i >= 0; i-- {
		if w.waiting[i].Key == s {
			w.waiting = append(w.waiting[:i], w.waiting[i+1:]...)
			return
		}
	}
}
