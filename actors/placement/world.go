package placement

import (
	"errors"
	"fmt"
	"time"

	"github.com/norsk-oss/norsk-manager/actors/bundle"
	"github.com/norsk-oss/norsk-manager/actors/node"
	"github.com/norsk-oss/norsk-manager/actors/placement/scheduler"
	"github.com/norsk-oss/norsk-manager/actors/provisioner"
	"github.com/norsk-oss/norsk-manager/actors/roles"
	"github.com/norsk-oss/norsk-manager/persistence"
	"github.com/norsk-oss/norsk-manager/proto/internalpb"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
	"github.com/norsk-oss/norsk-manager/proto/noderesources"
)

// key names one (job, role).
type key struct {
	job  scheduler.JobID
	role scheduler.Role
}

func (k key) String() string { return fmt.Sprintf("%s/%s", k.job, k.role) }

// candidate is one job role the pass may place: auto-placed, active, not
// dormant, no terminal state, no instance of the role.
type candidate struct {
	key
	rec *internalpb.JobRecord
	seq persistence.Seq
	// bundle is the bundle record of a derived job; nil for a plain job.
	bundle  *internalpb.BundleRecord
	replica uint32
	jobName string
	// pool names the pool the role is placed into; "" for any node.
	pool string
}

// world is one pass's world: the engine's base (base.go: the records as
// of the pass's World snapshot, kept from pass to pass) and what the pass
// adds to it — the roles and moves it looks at, the roles it placed, holds
// and waits for. Nothing the pass adds reaches base.
type world struct {
	*base
	now time.Time
	// candidates are the roles to place (base.cands, in job-id order,
	// then sorted by priority), and moves the moves in progress.
	candidates []candidate
	moves      []move
	// byKey indexes candidates, and busy holds the roles with a StartJob
	// in flight; both set by Pass.
	byKey map[key]*candidate
	busy  map[key]bool
	// tentative holds the node of each role this pass placed or holds (a
	// StartJob in flight, a decision, a move's target), over base.where.
	tentative map[key]string
	// runningCache, once loaded (runningAll), holds every instance the
	// engine may stop (drain.go), in job-id order.
	runningCache  []running
	runningLoaded bool
	// waiting holds the roles no node fitted in this pass (provision.go).
	waiting []provisioner.Waiting
}

// whereOf returns the node of (job, role) in this pass: placed by it, or
// recorded (a logical role answers for its move's roles, addJob).
func (w *world) whereOf(k key) (string, bool) {
	if n, ok := w.tentative[k]; ok {
		return n, true
	}
	n, ok := w.base.where[k]
	return n, ok
}

// runningAll returns every instance the engine may stop, loading them from
// base on first use in the pass (a scan of every instance: for drains,
// rolling updates and preemption, which run only while they have work).
func (w *world) runningAll() []running {
	if !w.runningLoaded {
		w.runningCache, w.runningLoaded = w.base.allRunning(), true
	}
	return w.runningCache
}

// readWorld reads the store's World view (persistence.World: decoded
// records fed by the applies, the placement-relevant jobs only) whole, at
// now, into a fresh base: for a one-off question (CheckMove). It decodes
// nothing: the records are the World's, shared, never modified.
func readWorld(store *persistence.Store, now time.Time) (*world, error) {
	b := newBase()
	if err := b.update(store.World(), now); err != nil {
		return nil, err
	}
	return b.world(now), nil
}

// schedNode is what the chain knows of a node record. Online is the
// replicated lifecycle state STARTED: a session blip the node timers have
// not declared a loss keeps the node online (issue 11 §4). The core ids,
// architecture, shape, availability domain and subnet are node.FactsOf.
func schedNode(n *internalpb.NodeRecord) scheduler.Node {
	res := n.GetResources()
	facts := node.FactsOf(n)
	return scheduler.Node{
		ID:           scheduler.NodeID(n.GetNodeId()),
		Online:       n.GetState() == managerpb.NodeLifecycle_NODE_LIFECYCLE_STARTED,
		Cordoned:     node.Cordoned(n),
		Draining:     node.Draining(n),
		Tags:         n.GetMetadata().GetTags(),
		Zone:         node.Zone(n),
		Cloud:        noderesources.Cloud(n.GetProvider()),
		Capacity:     res.GetCapacity(),
		GPUCapacity:  res.GetGpuCapacity(),
		GPUModel:     res.GetGpuModel(),
		Capabilities: res.GetCapabilities(),

		Cores:              coreInts(facts.Cores),
		Architecture:       facts.Architecture,
		Shape:              facts.Shape,
		AvailabilityDomain: facts.AvailabilityDomain,
		Subnet:             facts.Subnet,
		SecurityGroups:     n.GetCloud().GetAws().GetExtraSecurityGroups(),
		Templates:          scheduler.TemplatesFromProto(res.GetTemplates()),
	}
}

// coreInts converts core ids of the wire to the scheduler's.
func coreInts(ids []uint32) []int {
	if len(ids) == 0 {
		return nil
	}
	out := make([]int, len(ids))
	for i, c := range ids {
		out[i] = int(c)
	}
	return out
}

// coreIDs converts the scheduler's core ids to the wire's (they are
// 0..8191, scheduler.View's bound).
func coreIDs(ids []int) []uint32 {
	if len(ids) == 0 {
		return nil
	}
	out := make([]uint32, len(ids))
	for i, c := range ids {
		out[i] = uint32(c)
	}
	return out
}

// partPlaced returns rec's instances as placed, each holding the core
// ids it was started pinned to (Instance.cpu_list): read from the
// records, so a new leader's view pins the same cores as the old one's;
// and where each is, by role and by logical role.
func partPlaced(rec *internalpb.JobRecord) ([]whereEntry, []scheduler.Placed) {
	id := rec.GetJob().GetJob().GetJobId().GetJobId()
	capacity, gpu := persistence.JobAllocation(rec)
	var placed []scheduler.Placed
	at := map[key]string{}
	var order []key
	set := func(k key, node string) {
		if _, ok := at[k]; !ok {
			order = append(order, k)
		}
		at[k] = node
	}
	for _, in := range rec.GetInstances() {
		k := key{scheduler.JobID(id), scheduler.Role(in.GetRole())}
		set(k, in.GetNodeId())
		if l := (key{k.job, scheduler.Role(roles.LogicalRole(in.GetRole()))}); l != k {
			// A move's role ("primary~2") is its logical role for the
			// questions by role (the other replica's node); the source,
			// sorted first, answers while both run.
			if _, ok := at[l]; !ok {
				set(l, in.GetNodeId())
			}
		}
		placed = append(placed, scheduler.Placed{Job: k.job, Role: k.role, Node: scheduler.NodeID(in.GetNodeId()),
			Capacity: capacity, GPUCapacity: gpu, Cores: coreInts(in.GetCpuList())})
	}
	where := make([]whereEntry, len(order))
	for i, k := range order {
		where[i] = whereEntry{k, at[k]}
	}
	return where, placed
}

// newCandidate is the (job, role) of rec read at seq, with its pool: a
// plain job's (b and js nil) runs as primary in the pool of its pool tag;
// a derived job's (js its state in bundle record b) as primary in the
// bundle's pool for replica 0, as backup in the resilience policy's pool
// (else the bundle's) for replica 1.
func newCandidate(rec *internalpb.JobRecord, seq persistence.Seq, b *internalpb.BundleRecord, js *internalpb.BundleJobState) candidate {
	j := rec.GetJob().GetJob()
	c := candidate{rec: rec, seq: seq}
	c.job = scheduler.JobID(j.GetJobId().GetJobId())
	c.role = scheduler.RolePrimary
	c.pool = j.GetTags()[persistence.PoolTag]
	if b == nil {
		return c
	}
	c.bundle, c.replica, c.jobName = b, js.GetReplicaIndex(), js.GetJobName()
	c.pool = b.GetBundle().GetPool()
	if c.replica == 1 {
		c.role = scheduler.RoleBackup
		if p := b.GetBundle().GetResiliencePolicy().GetPool(); p != "" {
			c.pool = p
		}
	}
	return c
}

// placeable applies the job-level rules: auto_placement set, ACTIVE (or
// PRE whose start_date_time has passed), not dormant, no terminal_state.
func placeable(j *managerpb.Job, now time.Time) bool {
	switch {
	case j.GetAutoPlacement() == nil, j.GetTerminalState() != nil, j.GetTags()[bundle.TagDormant] == "true":
		return false
	case j.GetState() == managerpb.Job_ACTIVE:
		return true
	case j.GetState() == managerpb.Job_PRE:
		return !j.GetStartDateTime().AsTime().After(now)
	}
	return false
}

// bundleOf reads (once per pass) the bundle record bid; nil if none.
func bundleOf(r *persistence.WorldReader, cache map[string]*internalpb.BundleRecord, bid string) (*internalpb.BundleRecord, error) {
	if b, ok := cache[bid]; ok {
		return b, nil
	}
	b, _, err := r.Bundle(bid)
	switch {
	case errors.Is(err, persistence.ErrNotFound):
		b = nil
	case err != nil:
		return nil, fmt.Errorf("read bundle %s: %w", bid, err)
	}
	cache[bid] = b
	return b, nil
}

// derivedState returns the bundle record's state of the derived job id, or
// nil if the record does not list it as wanted.
func derivedState(b *internalpb.BundleRecord, id string) *internalpb.BundleJobState {
	for _, js := range b.GetJobs() {
		if js.GetJobId() == id {
			return js
		}
	}
	return nil
}
