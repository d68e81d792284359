package persistence

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	"github.com/dgraph-io/badger/v4"
	"github.com/hashicorp/raft"
)

// RaftCheck is what Verify found in a cluster member's Raft store.
type RaftCheck struct {
	// Dir is the Raft store's badger directory (<data-dir>/raft).
	Dir string
	// Tables and TableBytes are the tables the MANIFEST lists (every block
	// checksum verified) and their size in bytes.
	Tables     int
	TableBytes int64
	// Entries is the number of log entries (each decoded), First and Last
	// the oldest and newest index (0, 0 when the log is empty).
	Entries     int
	First, Last uint64
	// CurrentTerm and LastVoteTerm are raft's stable terms, LastVoteCand
	// the server it last voted for.
	CurrentTerm, LastVoteTerm uint64
	LastVoteCand              string
	// Snapshots are raft's snapshots (<data-dir>/raft/snapshots/snapshots/
	// <id>), newest first, each read whole (raft's CRC and the snapshot's own SHA-256
	// verified).
	Snapshots []SnapshotCheck
}

// SnapshotCheck is one raft snapshot Verify read.
type SnapshotCheck struct {
	// ID is raft's snapshot id (its directory name).
	ID string
	// Index and Term are the last log entry the snapshot covers.
	Index, Term uint64
	// Size is the snapshot's size in bytes, Records the store keys it holds.
	Size    int64
	Records uint64
}

// raft's StableStore keys (hashicorp/raft api.go).
const (
	raftKeyCurrentTerm  = "CurrentTerm"
	raftKeyLastVoteTerm = "LastVoteTerm"
	raftKeyLastVoteCand = "LastVoteCand"
)

// checkRaft opens the Raft store as a start would and checks its log,
// stable keys and snapshots, and that the FSM store applied nothing the
// Raft state does not hold.
func (r *VerifyReport) checkRaft(ctx context.Context, dir string, logger *slog.Logger) error {
	c := r.Raft
	if err := r.checkSnapshots(filepath.Join(dir, "snapshots")); err != nil {
		return err
	}
	od, err := r.open(raftStoreOptions(DefaultRaftStoreConfig(dir), logger), ModeCluster, logger)
	if od == nil || err != nil {
		return err
	}
	defer od.close()
	c.Tables, c.TableBytes = od.inspection.tables, od.inspection.tableBytes
	if err := od.db.View(func(txn *badger.Txn) error { return r.scanRaft(ctx, txn) }); err != nil {
		return err
	}
	bad := func(reason string) { r.damage(&DamageError{Path: dir, Reason: reason}) }
	if c.Entries > 0 && uint64(c.Entries) != c.Last-c.First+1 {
		bad(fmt.Sprintf("the log holds %d entries between %d and %d: some are missing", c.Entries, c.First, c.Last))
	}
	var snapIndex uint64
	if len(c.Snapshots) > 0 {
		snapIndex = c.Snapshots[0].Index
	}
	if c.First > 1 && snapIndex+1 < c.First {
		bad(fmt.Sprintf("the log starts at %d but the newest snapshot covers only up to %d: entries %d-%d are gone", c.First, snapIndex, snapIndex+1, c.First-1))
	}
	if applied, known := r.Store.Applied, max(c.Last, snapIndex); r.Store.Keys > 0 && applied > known {
		bad(fmt.Sprintf("the FSM store applied up to index %d, beyond the Raft log and snapshots (%d): the Raft store lost entries", applied, known))
	}
	return nil
}

// scanRaft reads every log entry and stable key; it stops with ctx's
// error when ctx ends.
func (r *VerifyReport) scanRaft(ctx context.Context, txn *badger.Txn) error {
	c := r.Raft
	bad := func(key []byte, reason string, err error) {
		r.damage(&DamageError{Path: c.Dir, Reason: fmt.Sprintf("key %q: %s", printable(key), reason), Err: err})
	}
	var lastTerm uint64
	it := txn.NewIterator(badger.IteratorOptions{})
	defer it.Close()
	n := 0
	for it.Rewind(); it.Valid(); it.Next() {
		if n++; n%4096 == 0 && ctx.Err() != nil {
			return ctx.Err()
		}
		item := it.Item()
		key := item.KeyCopy(nil)
		v, err := item.ValueCopy(nil)
		if err != nil {
			bad(key, "the value cannot be read", err)
			continue
		}
		k := string(key)
		switch {
		case strings.HasPrefix(k, prefixRaftLog):
			if len(key) != len(prefixRaftLog)+8 {
				bad(key, "a log key that is not 8 bytes of index", nil)
				continue
			}
			i := raftLogIndex(key)
			var l raft.Log
			if err := decodeRaftLog(i, v, &l); err != nil {
				bad(key, "the log entry does not decode", err)
				continue
			}
			if c.First == 0 {
				c.First = i
			}
			c.Last, lastTerm = i, l.Term
			c.Entries++
		case strings.HasPrefix(k, prefixRaftStable):
			r.stableKey(k[len(prefixRaftStable):], v)
		default:
			bad(key, "a key of no known prefix", nil)
		}
	}
	if lastTerm > c.CurrentTerm {
		r.damage(&DamageError{Path: c.Dir, Reason: fmt.Sprintf("the last log entry has term %d, beyond CurrentTerm %d", lastTerm, c.CurrentTerm)})
	}
	return nil
}

// stableKey records one of raft's stable keys.
func (r *VerifyReport) stableKey(name string, v []byte) {
	c := r.Raft
	u64 := func() uint64 {
		if len(v) != 8 {
			r.damage(&DamageError{Path: c.Dir, Reason: fmt.Sprintf("stable key %s holds %d bytes, not 8", name, len(v))})
			return 0
		}
		return binary.BigEndian.Uint64(v)
	}
	switch name {
	case raftKeyCurrentTerm:
		c.CurrentTerm = u64()
	case raftKeyLastVoteTerm:
		c.LastVoteTerm = u64()
	case raftKeyLastVoteCand:
		c.LastVoteCand = string(v)
	}
}

// checkSnapshots reads every raft snapshot of the file snapshot store
// based at dir (raft keeps them in dir/snapshots/<id>) whole.
func (r *VerifyReport) checkSnapshots(dir string) error {
	if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
		return nil
	}
	store, err := raft.NewFileSnapshotStore(dir, 2, io.Discard)
	if err != nil {
		return fmt.Errorf("raft snapshots in %s: %w", dir, err)
	}
	metas, err := store.List()
	if err != nil {
		return fmt.Errorf("list raft snapshots in %s: %w", dir, err)
	}
	for _, m := range metas {
		sc := SnapshotCheck{ID: m.ID, Index: m.Index, Term: m.Term, Size: m.Size}
		path := filepath.Join(dir, "snapshots", m.ID, "state.bin")
		_, rc, err := store.Open(m.ID)
		if err != nil {
			r.damage(&DamageError{Path: path, Reason: "the snapshot fails raft's checksum", Err: err})
			continue
		}
		sr := &snapshotReader{r: bufio.NewReaderSize(rc, 256<<10), h: sha256.New(), spool: io.Discard}
		hdr, err := sr.verify()
		rc.Close()
		if err != nil {
			r.damage(&DamageError{Path: path, Reason: "the snapshot's content is damaged", Err: err})
			continue
		}
		sc.Records = hdr.Count
		r.Raft.Snapshots = append(r.Raft.Snapshots, sc)
	}
	return nil
}
