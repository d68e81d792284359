package placement

import (
	"errors"
	"fmt"
	"time"

	"github.com/norsk-oss/norsk-manager/actors/bundle"
	"github.com/norsk-oss/norsk-manager/actors/job"
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

// world is what one pass read from the store's World view, in one
// snapshot.
type world struct {
	now   time.Time
	nodes []scheduler.Node
	// nodeRecs holds every node record by id (a peer on a stopped node
	// still names its zone).
	nodeRecs map[string]*internalpb.NodeRecord
	placed   []scheduler.Placed
	// where is the node of every recorded instance, by (job, role).
	where map[key]string
	// jobs holds the placement-relevant job records
	// (persistence.PlacementRelevant) by id.
	jobs       map[string]*internalpb.JobRecord
	pools      map[string]*managerpb.Pool
	candidates []candidate
	// byKey indexes candidates, and busy holds the roles with a StartJob
	// in flight; both set by Pass.
	byKey map[key]*candidate
	busy  map[key]bool
	// running holds the instances the engine may stop (drain.go).
	running []running
	// waiting holds the roles no node fitted in this pass (provision.go).
	waiting []provisioner.Waiting
	// moves holds the moves in progress (migrate.go).
	moves []move
	// bundles holds the bundle records the pass read, by id (nil: none).
	bundles map[string]*internalpb.BundleRecord
	// read is the World snapshot the pass read: jobs holds only the
	// placement-relevant ones, read answers for the others.
	read *persistence.WorldReader
}

// readWorld reads the store's World view (persistence.World: decoded
// records fed by the applies, the placement-relevant jobs only) at now. It
// decodes nothing: the records are the World's, shared, never modified.
func readWorld(store *persistence.Store, now time.Time) (*world, error) {
	r, err := store.World().Read()
	if err != nil {
		return nil, fmt.Errorf("read the world view: %w", err)
	}
	w := &world{now: now, read: r, nodeRecs: map[string]*internalpb.NodeRecord{}, where: map[key]string{},
		jobs: map[string]*internalpb.JobRecord{}, pools: map[string]*managerpb.Pool{}, bundles: map[string]*internalpb.BundleRecord{}}
	if err := r.Nodes(func(n *internalpb.NodeRecord, _ persistence.Seq) error {
		w.nodeRecs[n.GetNodeId()] = n
		w.nodes = append(w.nodes, schedNode(n))
		return nil
	}); err != nil {
		return nil, fmt.Errorf("read nodes: %w", err)
	}
	if err := r.PlacementPools(func(p *internalpb.PoolRecord, _ persistence.Seq) error {
		w.pools[p.GetPool().GetName()] = p.GetPool()
		return nil
	}); err != nil {
		return nil, fmt.Errorf("read pools: %w", err)
	}
	err = r.PlacementJobs(func(rec *internalpb.JobRecord, seq persistence.Seq) error {
		w.addJob(rec)
		if err := w.addMove(r, w.bundles, rec, seq); err != nil {
			return err
		}
		if err := w.addRunning(r, w.bundles, rec, seq); err != nil {
			return err
		}
		c, ok, err := w.candidateOf(r, w.bundles, rec, seq)
		if err != nil {
			return err
		}
		if ok {
			w.candidates = append(w.candidates, c)
		}
		return nil
	})
	return w, err
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

// addJob records rec's instances as placed, each holding the core ids it
// was started pinned to (Instance.cpu_list): read from the records, so a
// new leader's view pins the same cores as the old one's.
func (w *world) addJob(rec *internalpb.JobRecord) {
	id := rec.GetJob().GetJob().GetJobId().GetJobId()
	w.jobs[id] = rec
	capacity, gpu := persistence.JobAllocation(rec)
	for _, in := range rec.GetInstances() {
		k := key{scheduler.JobID(id), scheduler.Role(in.GetRole())}
		w.where[k] = in.GetNodeId()
		if l := (key{k.job, scheduler.Role(roles.LogicalRole(in.GetRole()))}); l != k {
			// A move's role ("primary~2") is its logical role for the
			// questions by role (the other replica's node); the source,
			// sorted first, answers while both run.
			if _, ok := w.where[l]; !ok {
				w.where[l] = in.GetNodeId()
			}
		}
		w.placed = append(w.placed, scheduler.Placed{Job: k.job, Role: k.role, Node: scheduler.NodeID(in.GetNodeId()),
			Capacity: capacity, GPUCapacity: gpu, Cores: coreInts(in.GetCpuList())})
	}
}

// candidateOf reports whether rec has a role to place (issue 11 §1) and
// which. A derived job counts only while its bundle's record lists it and
// the bundle is live (a job is the bundle's because the record says so,
// never because of its tags; a DELETING bundle's jobs are being stopped).
func (w *world) candidateOf(r *persistence.WorldReader, bundles map[string]*internalpb.BundleRecord, rec *internalpb.JobRecord, seq persistence.Seq) (candidate, bool, error) {
	j := rec.GetJob().GetJob()
	if !placeable(j, w.now) {
		return candidate{}, false, nil
	}
	c := newCandidate(rec, seq, nil, nil)
	if bid, ok := j.GetTags()[bundle.TagBundleID]; ok {
		b, err := bundleOf(r, bundles, bid)
		if err != nil || b == nil {
			return candidate{}, false, err
		}
		js := derivedState(b, string(c.job))
		if js == nil || b.GetBundle().GetState() != managerpb.BundleState_BUNDLE_STATE_LIVE || js.GetDormant() {
			return candidate{}, false, nil
		}
		c = newCandidate(rec, seq, b, js)
	}
	for _, in := range rec.GetInstances() {
		if roles.LogicalRole(in.GetRole()) == string(c.role) {
			return candidate{}, false, nil
		}
	}
	if job.MigrationOf(rec, string(c.role)) != nil {
		return candidate{}, false, nil // the move's to place (migrate.go)
	}
	if w.waitsForLostNode(&c) != "" {
		return candidate{}, false, nil // its pool waits for the lost node (disconnect.go)
	}
	return c, true, nil
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
