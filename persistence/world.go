package persistence

import (
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/dgraph-io/badger/v4"
	"github.com/hashicorp/go-memdb"
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
// It is a go-memdb database (Nomad's state store's library): a read takes
// a snapshot (Read) that an apply running meanwhile never changes, and
// readers never block the apply loop.
//
// The records it hands out are shared by every reader and must never be
// modified: clone one (proto.Clone) to change it.
type World struct {
	// db is replaced whole by rebuild, which readers may race.
	db atomic.Pointer[memdb.MemDB]
	// broken is the error of a rebuild that failed after an apply the
	// World could not take; reads return it until a rebuild succeeds.
	broken atomic.Pointer[error]
}

// World tables and their indexes.
const (
	worldJobs    = "jobs"
	worldNodes   = "nodes"
	worldPools   = "pools"
	worldBundles = "bundles"
	// worldByID is every table's primary index; worldPlacement the jobs
	// table's index of the entries with a record (PlacementRelevant).
	worldByID      = "id"
	worldPlacement = "placement"
)

// worldEntry is one record of a World table: its id, sequence and decoded
// record (nil in the jobs table for a job PlacementRelevant rejects).
type worldEntry struct {
	ID  string
	Seq Seq
	Rec proto.Message
}

// worldTables maps entity kinds to the World's tables.
var worldTables = map[string]string{KindJob: worldJobs, KindNode: worldNodes, KindPlacementPool: worldPools, KindBundle: worldBundles}

// worldSchema is the World's go-memdb schema.
func worldSchema() *memdb.DBSchema {
	byID := &memdb.IndexSchema{Name: worldByID, Unique: true, Indexer: &memdb.StringFieldIndex{Field: "ID"}}
	table := func(name string, extra ...*memdb.IndexSchema) *memdb.TableSchema {
		t := &memdb.TableSchema{Name: name, Indexes: map[string]*memdb.IndexSchema{worldByID: byID}}
		for _, ix := range extra {
			t.Indexes[ix.Name] = ix
		}
		return t
	}
	placement := &memdb.IndexSchema{Name: worldPlacement, Indexer: &memdb.ConditionalIndex{
		Conditional: func(obj any) (bool, error) { return obj.(*worldEntry).Rec != nil, nil }}}
	return &memdb.DBSchema{Tables: map[string]*memdb.TableSchema{
		worldJobs:    table(worldJobs, placement),
		worldNodes:   table(worldNodes),
		worldPools:   table(worldPools),
		worldBundles: table(worldBundles),
	}}
}

// newWorld returns an empty World.
func newWorld() (*World, error) {
	db, err := memdb.NewMemDB(worldSchema())
	if err != nil {
		return nil, fmt.Errorf("world view schema: %w", err)
	}
	w := &World{}
	w.db.Store(db)
	return w, nil
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

// entryOf is the World entry of an applied write of kind.
func entryOf(kind, id string, seq Seq, rec proto.Message) *worldEntry {
	if kind == KindJob && !PlacementRelevant(rec.(*internalpb.JobRecord)) {
		rec = nil
	}
	return &worldEntry{ID: id, Seq: seq, Rec: rec}
}

// take applies the changes of one committed batch; if the World cannot
// take them (it never should: a schema fault), it is rebuilt from db, and
// if that fails too, reads fail with the error until a later rebuild.
func (w *World) take(db *badger.DB, changes []worldChange) {
	if len(changes) == 0 {
		return
	}
	err := w.apply(changes)
	if err == nil {
		return
	}
	if rerr := w.rebuild(db); rerr != nil {
		err = fmt.Errorf("%w: %w; rebuild from the store: %w", errWorldStale, err, rerr)
		w.broken.Store(&err)
	}
}

// apply takes the changes of one committed batch, in order, in one World
// transaction. Changes of kinds the World does not hold are skipped.
func (w *World) apply(changes []worldChange) error {
	txn := w.db.Load().Txn(true)
	defer txn.Abort()
	for _, c := range changes {
		kind := c.key.Kind()
		table, ok := worldTables[kind]
		if !ok {
			continue
		}
		if c.rec == nil {
			if _, err := txn.DeleteAll(table, worldByID, c.key.ID()); err != nil {
				return fmt.Errorf("world view: delete %s: %w", c.key, err)
			}
			continue
		}
		if err := txn.Insert(table, entryOf(kind, c.key.ID(), c.seq, c.rec)); err != nil {
			return fmt.Errorf("world view: insert %s: %w", c.key, err)
		}
	}
	txn.Commit()
	return nil
}

// rebuild replaces the World's content with the live records of db's
// kinds it holds, decoding each once (at open and after a restore).
func (w *World) rebuild(db *badger.DB) error {
	fresh, err := memdb.NewMemDB(worldSchema())
	if err != nil {
		return fmt.Errorf("world view schema: %w", err)
	}
	txn := fresh.Txn(true)
	defer txn.Abort()
	err = db.View(func(btxn *badger.Txn) error {
		for kind, table := range worldTables {
			prefix := []byte(prefixEnt + kind + "/")
			it := btxn.NewIterator(badger.IteratorOptions{Prefix: prefix, PrefetchValues: true, PrefetchSize: 64})
			err := func() error {
				defer it.Close()
				for it.Seek(prefix); it.ValidForPrefix(prefix); it.Next() {
					v, err := it.Item().ValueCopy(nil)
					if err != nil {
						return err
					}
					key := EntityKey(it.Item().Key()[len(prefixEnt):])
					e, err := decodeEntity(key, v)
					if err != nil {
						return err
					}
					if !e.live {
						continue
					}
					rec, err := decodeRecord(kind, e.record)
					if err != nil {
						return fmt.Errorf("%s: %w", key, err)
					}
					if err := txn.Insert(table, entryOf(kind, key.ID(), e.seq, rec)); err != nil {
						return fmt.Errorf("world view: insert %s: %w", key, err)
					}
				}
				return nil
			}()
			if err != nil {
				return fmt.Errorf("world view: read %s records: %w", kind, err)
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	txn.Commit()
	w.db.Store(fresh)
	w.broken.Store(nil)
	return nil
}

// Read returns a snapshot of the World: what every apply committed before
// it, and nothing committed after. It is cheap (no copy) and safe for
// concurrent use with applies and other reads. It fails (wrapping
// ErrCorrupt) only when the World could not take a committed batch nor
// be rebuilt from the store.
func (w *World) Read() (*WorldReader, error) {
	if err := w.broken.Load(); err != nil {
		return nil, fmt.Errorf("%w: %w", *err, ErrCorrupt)
	}
	return &WorldReader{txn: w.db.Load().Txn(false)}, nil
}

// WorldReader is one snapshot of the World (World.Read). Its methods
// return shared records that must not be modified.
type WorldReader struct {
	txn *memdb.Txn
}

// each calls fn for every entry of table's index (args its value), in id
// order, until fn returns an error (which each returns).
func (r *WorldReader) each(table, index string, fn func(*worldEntry) error, args ...any) error {
	it, err := r.txn.Get(table, index, args...)
	if err != nil {
		return fmt.Errorf("world view: %s: %w", table, err)
	}
	for obj := it.Next(); obj != nil; obj = it.Next() {
		if err := fn(obj.(*worldEntry)); err != nil {
			return err
		}
	}
	return nil
}

// Nodes calls fn for every node record and its sequence, in node-id
// order, until fn returns an error (which Nodes returns).
func (r *WorldReader) Nodes(fn func(*internalpb.NodeRecord, Seq) error) error {
	return r.each(worldNodes, worldByID, func(e *worldEntry) error { return fn(e.Rec.(*internalpb.NodeRecord), e.Seq) })
}

// PlacementPools calls fn for every placement pool record and its
// sequence, in pool-name order, until fn returns an error.
func (r *WorldReader) PlacementPools(fn func(*internalpb.PoolRecord, Seq) error) error {
	return r.each(worldPools, worldByID, func(e *worldEntry) error { return fn(e.Rec.(*internalpb.PoolRecord), e.Seq) })
}

// PlacementJobs calls fn for every job record PlacementRelevant keeps,
// with its sequence, in job-id order (the order of Reader.JobsSeq), until
// fn returns an error (which PlacementJobs returns).
func (r *WorldReader) PlacementJobs(fn func(*internalpb.JobRecord, Seq) error) error {
	return r.each(worldJobs, worldPlacement, func(e *worldEntry) error { return fn(e.Rec.(*internalpb.JobRecord), e.Seq) }, true)
}

// JobExists reports whether a live job record of id exists, relevant to
// placement or not.
func (r *WorldReader) JobExists(id string) bool {
	obj, err := r.txn.First(worldJobs, worldByID, id)
	return err == nil && obj != nil
}

// Bundle returns the bundle record of id and its sequence, or
// ErrNotFound.
func (r *WorldReader) Bundle(id string) (*internalpb.BundleRecord, Seq, error) {
	obj, err := r.txn.First(worldBundles, worldByID, id)
	switch {
	case err != nil:
		return nil, 0, fmt.Errorf("world view: bundle %s: %w", id, err)
	case obj == nil:
		return nil, 0, fmt.Errorf("bundle %s: %w", id, ErrNotFound)
	}
	e := obj.(*worldEntry)
	return e.Rec.(*internalpb.BundleRecord), e.Seq, nil
}

// errWorldStale is wrapped by the error reads return when the World could
// not take a committed batch and was rebuilt from the store.
var errWorldStale = errors.New("world view missed a committed batch")
