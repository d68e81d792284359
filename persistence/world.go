package persistence

import (
	"fmt"
	"sort"
	"sync"

	"github.com/dgraph-io/badger/v4"
	"github.com/google/btree"
	"google.golang.org/protobuf/proto"

	"github.com/norsk-oss/norsk-manager/proto/internalpb"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
)

// World is the in-memory, decoded view of the records the placement
// engine reads on every pass (docs/design/world-view.md): every node,
// placement pool and bundle record, and the job records that can matter to
// placement (PlacementRelevant), each with its sequence. Every manager
// keeps one, fed by its FSM's applies after each batch commits and rebuilt
// from the store when the store is opened and after a snapshot restore, so
// a new leader's engine starts from it without decoding the store. A job
// that can no longer matter (completed, failed for good, never
// auto-placed, with no instance and no move) costs the view only its id:
// a pass's cost follows the live jobs, not the history.
//
// Its tables are copy-on-write B-trees (google/btree): a read (Read)
// clones them in O(1) and sees what every apply committed before it and
// nothing after; the apply that follows copies only the nodes it changes.
// Readers never block the apply loop for longer than the clone.
//
// The records it hands out are shared by every reader and must never be
// modified: clone one (proto.Clone) to change it.
type World struct {
	mu sync.Mutex
	// t is the current tables; guarded by mu (the apply loop writes them
	// in place, Read clones them).
	t worldTables
	// gen counts the applies that changed what the engine reads (a
	// relevant job, a node, pool, bundle or provider health record);
	// changed is closed and replaced when it grows. Guarded by mu.
	gen     uint64
	changed chan struct{}
	// log holds the keys of the changes counted by gen, oldest first,
	// each with the count its batch made; a reader at a count of at least
	// logFloor gets from it every key changed since (ReadSince). It is cut
	// by half past worldLogMax entries; a rebuild empties it. Guarded by
	// mu.
	log      []worldLogEntry
	logFloor uint64
	// broken is the error of a rebuild that failed after an apply the
	// World could not take; reads return it until a rebuild succeeds.
	// Guarded by mu.
	broken error
}

// worldTables is one version of the World's tables, each ordered by id.
type worldTables struct {
	// jobs holds the placement-relevant job records; jobIDs every live
	// job's id.
	jobs, nodes, pools, bundles *btree.BTreeG[*worldEntry]
	jobIDs                      *btree.BTreeG[string]
}

// worldDegree is the B-trees' degree: nodes of up to 63 entries.
const worldDegree = 32

func newWorldTables() worldTables {
	less := func(a, b *worldEntry) bool { return a.ID < b.ID }
	return worldTables{
		jobs: btree.NewG(worldDegree, less), nodes: btree.NewG(worldDegree, less),
		pools: btree.NewG(worldDegree, less), bundles: btree.NewG(worldDegree, less),
		jobIDs: btree.NewG(worldDegree, func(a, b string) bool { return a < b }),
	}
}

// clone returns a copy of t that shares its nodes until either is written.
func (t worldTables) clone() worldTables {
	return worldTables{jobs: t.jobs.Clone(), nodes: t.nodes.Clone(), pools: t.pools.Clone(),
		bundles: t.bundles.Clone(), jobIDs: t.jobIDs.Clone()}
}

// table returns the tree of entity kind; nil for a kind the World does not
// hold.
func (t worldTables) table(kind string) *btree.BTreeG[*worldEntry] {
	switch kind {
	case KindJob:
		return t.jobs
	case KindNode:
		return t.nodes
	case KindPlacementPool:
		return t.pools
	case KindBundle:
		return t.bundles
	}
	return nil
}

// worldEntry is one record of a World table: its id, sequence and decoded
// record.
type worldEntry struct {
	ID  string
	Seq Seq
	Rec proto.Message
}

// worldKinds are the entity kinds whose applies the World takes; the
// provider health records are not held, but their changes wake the
// engine (its provisioning reads them).
var worldKinds = map[string]bool{KindJob: true, KindNode: true, KindPlacementPool: true, KindBundle: true, KindProvider: true}

// newWorld returns an empty World.
func newWorld() (*World, error) {
	return &World{t: newWorldTables(), changed: make(chan struct{})}, nil
}

// PlacementRelevant reports whether the placement engine can act on or
// count job record rec, and so whether the World keeps its record: it has
// an instance (it holds room on a node, it may be drained, moved or
// re-checked), a move in progress, or it is auto-placed with no terminal
// verdict and ACTIVE or PRE (it may be placed). The engine's own rules
// (actors/placement: placeable, candidateOf) are a subset of this one, so
// what it does not keep the engine would have skipped.
func PlacementRelevant(rec *internalpb.JobRecord) bool {
	j := rec.GetJob().GetJob()
	switch {
	case len(rec.GetInstances()) > 0, len(rec.GetMigrations()) > 0:
		return true
	case j.GetAutoPlacement() == nil, j.GetTerminalState() != nil:
		return false
	}
	return j.GetState() == managerpb.Job_ACTIVE || j.GetState() == managerpb.Job_PRE
}

// worldChange is one applied write the World is to take: the entity's
// key, its new sequence, and its decoded record (nil: deleted).
type worldChange struct {
	key EntityKey
	seq Seq
	rec record
}

// take applies the changes of one committed batch, in order. It cannot
// fail: the trees take any entry.
func (w *World) take(changes []worldChange) {
	if len(changes) == 0 {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	wake := false
	for _, c := range changes {
		if w.t.put(c.key, c.seq, c.rec) {
			if !wake {
				wake = true
				w.gen++
			}
			w.log = append(w.log, worldLogEntry{gen: w.gen, key: c.key})
		}
	}
	if !wake {
		return
	}
	if n := len(w.log); n > worldLogMax {
		cut := n - worldLogMax/2
		w.logFloor = w.log[cut-1].gen
		w.log = append(w.log[:0:0], w.log[cut:]...)
	}
	close(w.changed)
	w.changed = make(chan struct{})
}

// worldLogEntry is one key of the World's change log and the change count
// its batch made.
type worldLogEntry struct {
	gen uint64
	key EntityKey
}

// worldLogMax bounds the change log: a reader more than about that many
// changes behind reads the whole World again (a new leader's first pass
// does anyway).
const worldLogMax = 1 << 16

// put writes one entity's new state (rec nil: deleted) into t, and
// reports whether the engine's reads changed.
func (t worldTables) put(key EntityKey, seq Seq, rec record) bool {
	kind, id := key.Kind(), key.ID()
	tree := t.table(kind)
	if tree == nil {
		return kind == KindProvider
	}
	if kind == KindJob {
		if rec == nil {
			t.jobIDs.Delete(id)
		} else {
			t.jobIDs.ReplaceOrInsert(id)
			if !PlacementRelevant(rec.(*internalpb.JobRecord)) {
				_, was := tree.Delete(&worldEntry{ID: id})
				return was // it stopped mattering: its room is free
			}
		}
	}
	if rec == nil {
		_, was := tree.Delete(&worldEntry{ID: id})
		return was
	}
	tree.ReplaceOrInsert(&worldEntry{ID: id, Seq: seq, Rec: rec})
	return true
}

// rebuild replaces the World's content with the live records of db's
// kinds it holds, decoding each once (at open and after a restore).
func (w *World) rebuild(db *badger.DB) error {
	fresh := newWorldTables()
	err := db.View(func(btxn *badger.Txn) error {
		r := &Reader{txn: btxn}
		for kind := range worldKinds {
			if fresh.table(kind) == nil {
				continue
			}
			newRec := func() proto.Message { rec, _ := newRecord(kind); return rec } // worldKinds are all known kinds
			if err := r.entitiesKeyed(kind, newRec, func(key EntityKey, m proto.Message, seq Seq) error {
				fresh.put(key, seq, m.(record))
				return nil
			}); err != nil {
				return fmt.Errorf("world view: read %s records: %w", kind, err)
			}
		}
		return nil
	})
	w.mu.Lock()
	defer w.mu.Unlock()
	if err != nil {
		w.broken = err
		return err
	}
	w.t, w.broken = fresh, nil
	w.gen++
	w.log, w.logFloor = nil, w.gen
	close(w.changed)
	w.changed = make(chan struct{})
	return nil
}

// markBroken makes reads fail with err until a rebuild succeeds: the
// store's records are not whole (an interrupted snapshot restore).
func (w *World) markBroken(err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.broken = err
}

// Changed returns the World's change count and a channel closed when it
// next grows: when an apply changes what the placement engine reads (a
// placement-relevant job, a node, pool, bundle or provider health record)
// or the World is rebuilt. The engine waits on it rather than on the event
// log, so that writes it cannot act on (a job never auto-placed, an audit
// entry) do not wake it.
func (w *World) Changed() (uint64, <-chan struct{}) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.gen, w.changed
}

// Read returns a snapshot of the World: what every apply committed before
// it, and nothing committed after. It is cheap (no copy) and safe for
// concurrent use with applies and other reads. It fails (wrapping
// ErrCorrupt) only when the World could not take a committed batch nor
// be rebuilt from the store.
func (w *World) Read() (*WorldReader, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.broken != nil {
		return nil, fmt.Errorf("world view: %w: %w", w.broken, ErrCorrupt)
	}
	return &WorldReader{t: w.t.clone()}, nil
}

// ReadSince returns a snapshot of the World (as Read), its change count,
// and the keys of the entities changed since count since (in apply order,
// a key possibly repeated), or all=true when the log no longer reaches
// back that far (or the World was rebuilt since): the caller then reads
// everything. The keys are of jobs that were or became
// PlacementRelevant, and of nodes, placement pools, bundles and provider
// health records.
func (w *World) ReadSince(since uint64) (r *WorldReader, gen uint64, keys []EntityKey, all bool, err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.broken != nil {
		return nil, 0, nil, false, fmt.Errorf("world view: %w: %w", w.broken, ErrCorrupt)
	}
	r = &WorldReader{t: w.t.clone()}
	if since < w.logFloor || since > w.gen {
		return r, w.gen, nil, true, nil
	}
	i := sort.Search(len(w.log), func(i int) bool { return w.log[i].gen > since })
	keys = make([]EntityKey, 0, len(w.log)-i)
	for _, e := range w.log[i:] {
		keys = append(keys, e.key)
	}
	return r, w.gen, keys, false, nil
}

// WorldReader is one snapshot of the World (World.Read). Its methods
// return shared records that must not be modified. It is not safe for
// concurrent use.
type WorldReader struct {
	t worldTables
}

// each calls fn for every entry of tree, in id order, until fn returns an
// error (which each returns).
func each(tree *btree.BTreeG[*worldEntry], fn func(*worldEntry) error) error {
	var err error
	tree.Ascend(func(e *worldEntry) bool {
		err = fn(e)
		return err == nil
	})
	return err
}

// Nodes calls fn for every node record and its sequence, in node-id
// order, until fn returns an error (which Nodes returns).
func (r *WorldReader) Nodes(fn func(*internalpb.NodeRecord, Seq) error) error {
	return each(r.t.nodes, func(e *worldEntry) error { return fn(e.Rec.(*internalpb.NodeRecord), e.Seq) })
}

// PlacementPools calls fn for every placement pool record and its
// sequence, in pool-name order, until fn returns an error.
func (r *WorldReader) PlacementPools(fn func(*internalpb.PoolRecord, Seq) error) error {
	return each(r.t.pools, func(e *worldEntry) error { return fn(e.Rec.(*internalpb.PoolRecord), e.Seq) })
}

// PlacementJobs calls fn for every job record PlacementRelevant keeps,
// with its sequence, in job-id order (the order of Reader.JobsSeq), until
// fn returns an error (which PlacementJobs returns).
func (r *WorldReader) PlacementJobs(fn func(*internalpb.JobRecord, Seq) error) error {
	return each(r.t.jobs, func(e *worldEntry) error { return fn(e.Rec.(*internalpb.JobRecord), e.Seq) })
}

// JobExists reports whether a live job record of id exists, relevant to
// placement or not.
func (r *WorldReader) JobExists(id string) bool {
	return r.t.jobIDs.Has(id)
}

// Bundle returns the bundle record of id and its sequence, or
// ErrNotFound.
func (r *WorldReader) Bundle(id string) (*internalpb.BundleRecord, Seq, error) {
	e, ok := r.t.bundles.Get(&worldEntry{ID: id})
	if !ok {
		return nil, 0, fmt.Errorf("bundle %s: %w", id, ErrNotFound)
	}
	return e.Rec.(*internalpb.BundleRecord), e.Seq, nil
}

// PlacementJob returns the job record of id and its sequence if
// PlacementRelevant keeps it; ok false if there is none (no such job, or
// one that no longer matters to placement).
func (r *WorldReader) PlacementJob(id string) (rec *internalpb.JobRecord, seq Seq, ok bool) {
	e, ok := r.t.jobs.Get(&worldEntry{ID: id})
	if !ok {
		return nil, 0, false
	}
	return e.Rec.(*internalpb.JobRecord), e.Seq, true
}
