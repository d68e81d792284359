package placement

import (
	"fmt"
	"maps"
	"time"

	"github.com/google/btree"

	"github.com/norsk-oss/norsk-manager/actors/bundle"
	"github.com/norsk-oss/norsk-manager/actors/job"
	"github.com/norsk-oss/norsk-manager/actors/node"
	"github.com/norsk-oss/norsk-manager/actors/placement/scheduler"
	"github.com/norsk-oss/norsk-manager/actors/roles"
	"github.com/norsk-oss/norsk-manager/persistence"
	"github.com/norsk-oss/norsk-manager/proto/internalpb"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
)

// base is the engine's world kept from pass to pass (issue 22 §1,
// docs/design/world-view.md): what the records say — nodes, pools, the
// placement-relevant jobs each derived once into a jobPart, the instances
// they place with the view of the room they hold — brought up to date at
// the start of each pass with only what changed since the last one (the
// World's change log), plus the jobs a timer made due (a PRE job's
// start). A pass then costs what changed, the roles to place and the
// moves in progress; the scans that concern every instance (drains,
// dormant bundle jobs, rolling updates, degraded re-checks) run only while
// something of their kind exists. A pass's own decisions never enter
// base: they live in the pass's world and the view's journal, undone when
// the pass ends.
//
// Decisions are those of a world read whole: every part is derived by the
// same functions from the same records (a new leader's first pass reads
// every relevant job into a fresh base).
type base struct {
	// built: gen and every field below reflect the World at gen.
	built bool
	gen   uint64
	read  *persistence.WorldReader

	nodes    []scheduler.Node
	nodeRecs map[string]*internalpb.NodeRecord
	draining int // nodes whose record says DRAINING
	pools    map[string]*managerpb.Pool
	// bundles caches the bundle records the parts read (nil: missing),
	// dropped when the World says one changed or no part reads it any
	// more.
	bundles map[string]*internalpb.BundleRecord

	parts *btree.BTreeG[*jobPart] // by job id
	jobs  map[string]*internalpb.JobRecord
	// where is the node of every recorded instance by (job, role), and by
	// logical role (addJob); placed holds the recorded instances; perNode
	// counts where's entries per node.
	where   map[key]string
	placed  map[key]scheduler.Placed
	perNode map[string]int
	// view is the recorded instances on the nodes; a pass works on it
	// between Begin and Rollback. viewStale: a part added or dropped shows
	// one role twice (a faulty record), which the view cannot take back
	// one by one (View.Add): update rebuilds it from the parts.
	view      *scheduler.View
	viewStale bool

	// Sets of job ids, by what a pass looks for in them: a role to place,
	// a move in progress, an instance with a degraded placement note, a
	// stale instance of a rolling-update job, an instance of a dormant
	// bundle job.
	cands, moving, noted, rolling, dormant *btree.BTreeG[string]
	// bundleJobs holds the relevant jobs tagged with each bundle id, so a
	// bundle's change re-derives them.
	bundleJobs map[string]map[string]bool
	// lostDeps holds the jobs whose candidacy read a node record (the
	// pool's replace wait on a lost node), re-derived when nodes or pools
	// change.
	lostDeps map[string]bool
	// preAt holds the PRE auto-placed jobs not placeable yet, by start.
	preAt *btree.BTreeG[preEntry]
	preOf map[string]time.Time
}

// jobPart is what one job record contributes to base.
type jobPart struct {
	id       string
	rec      *internalpb.JobRecord
	seq      persistence.Seq
	bundleID string
	where    []whereEntry
	placed   []scheduler.Placed
	running  []running
	moves    []move
	cand     *candidate
}

type whereEntry struct {
	k    key
	node string
}

// preEntry orders the PRE jobs by start time, then id.
type preEntry struct {
	at time.Time
	id string
}

func lessID(a, b string) bool { return a < b }

// newBase returns an empty base; its first update reads the whole World.
func newBase() *base {
	return &base{}
}

// reset empties b for a full read.
func (b *base) reset() {
	*b = base{
		nodeRecs: map[string]*internalpb.NodeRecord{}, pools: map[string]*managerpb.Pool{},
		bundles: map[string]*internalpb.BundleRecord{},
		parts:   btree.NewG(32, func(a, c *jobPart) bool { return a.id < c.id }),
		jobs:    map[string]*internalpb.JobRecord{}, where: map[key]string{}, placed: map[key]scheduler.Placed{},
		perNode: map[string]int{},
		cands:   btree.NewG(32, lessID), moving: btree.NewG(32, lessID), noted: btree.NewG(32, lessID),
		rolling: btree.NewG(32, lessID), dormant: btree.NewG(32, lessID),
		bundleJobs: map[string]map[string]bool{}, lostDeps: map[string]bool{},
		preAt: btree.NewG(32, func(a, c preEntry) bool { return a.at.Before(c.at) || a.at.Equal(c.at) && a.id < c.id }),
		preOf: map[string]time.Time{},
	}
}

// update brings b up to the World of store at now: the changed jobs
// re-derived, nodes and pools re-read when one changed, the PRE jobs whose
// start has come re-derived.
func (b *base) update(world *persistence.World, now time.Time) error {
	r, gen, keys, all, err := world.ReadSince(b.gen)
	if err != nil {
		return fmt.Errorf("read the world view: %w", err)
	}
	if !b.built || all {
		return b.readAll(r, gen, now)
	}
	dirty := map[string]bool{}
	nodes, pools := false, false
	for _, k := range keys {
		switch k.Kind() {
		case persistence.KindJob:
			dirty[k.ID()] = true
		case persistence.KindNode:
			nodes = true
		case persistence.KindPlacementPool:
			pools = true
		case persistence.KindBundle:
			delete(b.bundles, k.ID())
			for id := range b.bundleJobs[k.ID()] {
				dirty[id] = true
			}
		}
	}
	b.read = r
	if nodes {
		if err := b.readNodes(); err != nil {
			return err
		}
	}
	if pools {
		if err := b.readPools(); err != nil {
			return err
		}
	}
	if nodes || pools {
		for id := range b.lostDeps {
			dirty[id] = true
		}
	}
	for e, ok := b.preAt.Min(); ok && !e.at.After(now); e, ok = b.preAt.Min() {
		b.preAt.DeleteMin()
		delete(b.preOf, e.id)
		dirty[e.id] = true
	}
	for id := range dirty {
		rec, seq, ok := r.PlacementJob(id)
		if err := b.setPart(id, rec, seq, ok, now); err != nil {
			return err
		}
	}
	if nodes || b.viewStale {
		if err := b.rebuildView(); err != nil {
			return err
		}
	}
	b.gen = gen
	return nil
}

// readAll reads the whole World into a fresh b.
func (b *base) readAll(r *persistence.WorldReader, gen uint64, now time.Time) error {
	b.reset()
	b.read = r
	if err := b.readNodes(); err != nil {
		return err
	}
	if err := b.readPools(); err != nil {
		return err
	}
	if err := r.PlacementJobs(func(rec *internalpb.JobRecord, seq persistence.Seq) error {
		return b.setPart(rec.GetJob().GetJob().GetJobId().GetJobId(), rec, seq, true, now)
	}); err != nil {
		return err
	}
	if err := b.rebuildView(); err != nil {
		return err
	}
	b.built, b.gen = true, gen
	return nil
}

// readNodes re-reads every node record.
func (b *base) readNodes() error {
	b.nodes, b.draining = b.nodes[:0], 0
	clear(b.nodeRecs)
	if err := b.read.Nodes(func(n *internalpb.NodeRecord, _ persistence.Seq) error {
		b.nodeRecs[n.GetNodeId()] = n
		b.nodes = append(b.nodes, schedNode(n))
		if node.Draining(n) {
			b.draining++
		}
		return nil
	}); err != nil {
		return fmt.Errorf("read nodes: %w", err)
	}
	return nil
}

// readPools re-reads every placement pool record.
func (b *base) readPools() error {
	clear(b.pools)
	if err := b.read.PlacementPools(func(p *internalpb.PoolRecord, _ persistence.Seq) error {
		b.pools[p.GetPool().GetName()] = p.GetPool()
		return nil
	}); err != nil {
		return fmt.Errorf("read pools: %w", err)
	}
	return nil
}

// rebuildView builds the view of the recorded instances from the parts,
// in job-id order: after the nodes changed, and at a full read.
func (b *base) rebuildView() error {
	var placed []scheduler.Placed
	b.parts.Ascend(func(p *jobPart) bool {
		placed = append(placed, p.placed...)
		return true
	})
	v, err := scheduler.NewView(b.nodes, placed)
	if err != nil {
		return fmt.Errorf("placement view: %w", err)
	}
	b.view, b.viewStale = v, false
	return nil
}

// setPart replaces job id's part with the one rec (at seq; ok false: no
// relevant record any more) derives, keeping every index in step.
func (b *base) setPart(id string, rec *internalpb.JobRecord, seq persistence.Seq, ok bool, now time.Time) error {
	if old, had := b.parts.Get(&jobPart{id: id}); had {
		b.dropPart(old)
	}
	if !ok {
		return nil
	}
	p, err := b.derive(id, rec, seq, now)
	if err != nil {
		return err
	}
	b.parts.ReplaceOrInsert(p)
	b.jobs[id] = rec
	for _, e := range p.where {
		b.where[e.k] = e.node
		b.perNode[e.node]++
	}
	for _, pl := range p.placed {
		b.placed[key{pl.Job, pl.Role}] = pl
	}
	if b.view != nil {
		b.view.Add(p.placed...)
	}
	if roleTwice(p.placed) {
		b.viewStale = true
	}
	if p.bundleID != "" {
		if b.bundleJobs[p.bundleID] == nil {
			b.bundleJobs[p.bundleID] = map[string]bool{}
		}
		b.bundleJobs[p.bundleID][id] = true
	}
	if p.cand != nil {
		b.cands.ReplaceOrInsert(id)
	}
	if len(p.moves) > 0 {
		b.moving.ReplaceOrInsert(id)
	}
	for i := range p.running {
		r := &p.running[i]
		if notedForRecheck(r) {
			b.noted.ReplaceOrInsert(id)
		}
		if r.js.GetDormant() {
			b.dormant.ReplaceOrInsert(id)
		}
	}
	if rollingCandidate(rec) {
		b.rolling.ReplaceOrInsert(id)
	}
	return nil
}

// dropPart removes p and everything it contributed.
func (b *base) dropPart(p *jobPart) {
	id := p.id
	b.parts.Delete(p)
	delete(b.jobs, id)
	for _, e := range p.where {
		if b.where[e.k] == e.node {
			delete(b.where, e.k)
		}
		if b.perNode[e.node]--; b.perNode[e.node] <= 0 {
			delete(b.perNode, e.node)
		}
	}
	for _, pl := range p.placed {
		delete(b.placed, key{pl.Job, pl.Role})
		if b.view != nil {
			b.view.Remove(pl.Job, pl.Role)
		}
	}
	if roleTwice(p.placed) {
		b.viewStale = true
	}
	if p.bundleID != "" {
		delete(b.bundleJobs[p.bundleID], id)
		if len(b.bundleJobs[p.bundleID]) == 0 {
			delete(b.bundleJobs, p.bundleID)
			delete(b.bundles, p.bundleID) // no part reads it: only live bundles are held
		}
	}
	b.cands.Delete(id)
	b.moving.Delete(id)
	b.noted.Delete(id)
	b.rolling.Delete(id)
	b.dormant.Delete(id)
	delete(b.lostDeps, id)
	if at, ok := b.preOf[id]; ok {
		b.preAt.Delete(preEntry{at: at, id: id})
		delete(b.preOf, id)
	}
}

// derive computes job id's part from rec (at seq), at now.
func (b *base) derive(id string, rec *internalpb.JobRecord, seq persistence.Seq, now time.Time) (*jobPart, error) {
	p := &jobPart{id: id, rec: rec, seq: seq, bundleID: rec.GetJob().GetJob().GetTags()[bundle.TagBundleID]}
	p.where, p.placed = partPlaced(rec)
	var err error
	if p.moves, err = movesOf(b.read, b.bundles, rec, seq); err != nil {
		return nil, err
	}
	if p.running, err = runningOf(b.read, b.bundles, rec, seq); err != nil {
		return nil, err
	}
	c, ok, err := b.candidateOf(rec, seq, now)
	if err != nil {
		return nil, err
	}
	if ok {
		p.cand = &c
	}
	j := rec.GetJob().GetJob()
	if j.GetState() == managerpb.Job_PRE && j.GetAutoPlacement() != nil && j.GetTerminalState() == nil &&
		j.GetStartDateTime().AsTime().After(now) {
		at := j.GetStartDateTime().AsTime()
		b.preAt.ReplaceOrInsert(preEntry{at: at, id: id})
		b.preOf[id] = at
	}
	return p, nil
}

// candidateOf reports whether rec has a role to place (issue 11 §1) and
// which, at now. A derived job counts only while its bundle's record
// lists it and the bundle is live (a job is the bundle's because the
// record says so, never because of its tags; a DELETING bundle's jobs are
// being stopped).
func (b *base) candidateOf(rec *internalpb.JobRecord, seq persistence.Seq, now time.Time) (candidate, bool, error) {
	j := rec.GetJob().GetJob()
	if !placeable(j, now) {
		return candidate{}, false, nil
	}
	c := newCandidate(rec, seq, nil, nil)
	if bid, ok := j.GetTags()[bundle.TagBundleID]; ok {
		bd, err := bundleOf(b.read, b.bundles, bid)
		if err != nil || bd == nil {
			return candidate{}, false, err
		}
		js := derivedState(bd, string(c.job))
		if js == nil || bd.GetBundle().GetState() != managerpb.BundleState_BUNDLE_STATE_LIVE || js.GetDormant() {
			return candidate{}, false, nil
		}
		c = newCandidate(rec, seq, bd, js)
	}
	for _, in := range rec.GetInstances() {
		if roles.LogicalRole(in.GetRole()) == string(c.role) {
			return candidate{}, false, nil
		}
	}
	if job.MigrationOf(rec, string(c.role)) != nil {
		return candidate{}, false, nil // the move's to place (migrate.go)
	}
	if lostWith(rec, string(c.role)) != "" {
		b.lostDeps[string(c.job)] = true
	}
	if b.waitsForLostNode(&c) != "" {
		return candidate{}, false, nil // its pool waits for the lost node (disconnect.go)
	}
	return c, true, nil
}

// world returns the pass's world over b at now.
func (b *base) world(now time.Time) *world {
	w := &world{base: b, now: now, tentative: map[key]string{}}
	b.cands.Ascend(func(id string) bool {
		if p, ok := b.parts.Get(&jobPart{id: id}); ok && p.cand != nil {
			w.candidates = append(w.candidates, *p.cand)
		}
		return true
	})
	b.moving.Ascend(func(id string) bool {
		if p, ok := b.parts.Get(&jobPart{id: id}); ok {
			w.moves = append(w.moves, p.moves...)
		}
		return true
	})
	return w
}

// runningIn returns the running entries of the jobs in set, in job-id
// order.
func (b *base) runningIn(set *btree.BTreeG[string]) []running {
	var out []running
	set.Ascend(func(id string) bool {
		if p, ok := b.parts.Get(&jobPart{id: id}); ok {
			out = append(out, p.running...)
		}
		return true
	})
	return out
}

// allRunning returns every job's running entries, in job-id order.
func (b *base) allRunning() []running {
	var out []running
	b.parts.Ascend(func(p *jobPart) bool {
		out = append(out, p.running...)
		return true
	})
	return out
}

// busyByNode counts, per node, the instances recorded there plus those
// the pass placed (tentative).
func (w *world) busyByNode() map[string]int {
	busy := maps.Clone(w.perNode)
	for k, n := range w.tentative {
		if old, ok := w.base.where[k]; ok {
			busy[old]--
		}
		busy[n]++
	}
	return busy
}

// roleTwice reports whether placed (one job's) shows a role twice.
func roleTwice(placed []scheduler.Placed) bool {
	for i := range placed {
		for j := range i {
			if placed[j].Role == placed[i].Role {
				return true
			}
		}
	}
	return false
}

// notedForRecheck reports whether recheckPass looks at r: an instance of
// a bundle job, not stopping, whose placement note says it is (or was at
// placement) degraded.
func notedForRecheck(r *running) bool {
	note := instanceOf(r.rec, string(r.role)).GetPlacement()
	return note != nil && r.js != nil && r.status != internalpb.InstanceStatus_INSTANCE_STOPPING &&
		(len(note.GetDegradedAtPlacement()) > 0 || note.GetDegradation() != managerpb.PlacementDegraded_PLACEMENT_DEGRADED_UNSPECIFIED)
}

// rollingCandidate reports whether rollingOrder may list rec: a job with
// the migrate update strategy and a RUNNING instance of a stale
// definition.
func rollingCandidate(rec *internalpb.JobRecord) bool {
	j := rec.GetJob().GetJob()
	if j.GetUpdateStrategy() != managerpb.UpdateStrategy_UPDATE_STRATEGY_MIGRATE {
		return false
	}
	for _, in := range rec.GetInstances() {
		if in.GetStatus() == internalpb.InstanceStatus_INSTANCE_RUNNING && job.Stale(j, in) {
			return true
		}
	}
	return false
}
