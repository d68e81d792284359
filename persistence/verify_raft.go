package persistence

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc64"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
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
	defer closeView(od, logger)
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
// based at dir (raft keeps them in dir/snapshots/<id>/, meta.json and
// state.bin) whole, without raft's FileSnapshotStore: creating one writes
// into the directory (it tests that it can). A snapshot raft is still
// writing (an id ending in .tmp) is skipped as raft skips it; one whose
// meta.json cannot be read is damage (raft would skip it and fall back to
// an older one).
func (r *VerifyReport) checkSnapshots(dir string) error {
	base := filepath.Join(dir, "snapshots")
	entries, err := os.ReadDir(base)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("raft snapshots in %s: %w", base, err)
	}
	var metas []*raftSnapshotMeta
	for _, e := range entries {
		if !e.IsDir() || strings.HasSuffix(e.Name(), ".tmp") {
			continue
		}
		path := filepath.Join(base, e.Name(), "meta.json")
		m, err := readRaftSnapshotMeta(path)
		if err != nil {
			r.damage(&DamageError{Path: path, Reason: "the snapshot's metadata cannot be read", Err: err})
			continue
		}
		metas = append(metas, m)
	}
	// Newest first, as raft orders them (term, index, id).
	sort.Slice(metas, func(i, j int) bool {
		a, b := metas[i], metas[j]
		if a.Term != b.Term {
			return a.Term > b.Term
		}
		if a.Index != b.Index {
			return a.Index > b.Index
		}
		return a.ID > b.ID
	})
	for _, m := range metas {
		sc := SnapshotCheck{ID: m.ID, Index: m.Index, Term: m.Term, Size: m.Size}
		path := filepath.Join(base, m.ID, "state.bin")
		records, derr := verifyRaftSnapshot(path, m.CRC)
		if derr != nil {
			r.damage(derr)
			continue
		}
		sc.Records = records
		r.Raft.Snapshots = append(r.Raft.Snapshots, sc)
	}
	return nil
}

// raftSnapshotMeta is raft's meta.json of a file snapshot
// (hashicorp/raft file_snapshot.go, fileSnapshotMeta): the snapshot's
// metadata and the CRC-64 (ECMA) of its state.bin.
type raftSnapshotMeta struct {
	raft.SnapshotMeta
	CRC []byte
}

// readRaftSnapshotMeta reads a snapshot's meta.json.
func readRaftSnapshotMeta(path string) (*raftSnapshotMeta, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var m raftSnapshotMeta
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, err
	}
	return &m, nil
}

// verifyRaftSnapshot reads the state.bin at path whole: raft's CRC-64
// (want, from meta.json), then the snapshot's own format and SHA-256
// (snapshotReader.verify). It returns the number of records it holds.
func verifyRaftSnapshot(path string, want []byte) (uint64, *DamageError) {
	f, err := os.Open(path)
	if err != nil {
		return 0, &DamageError{Path: path, Reason: "the snapshot cannot be read", Err: err}
	}
	defer f.Close()
	h := crc64.New(crc64.MakeTable(crc64.ECMA))
	if _, err := io.Copy(h, bufio.NewReaderSize(f, 256<<10)); err != nil {
		return 0, &DamageError{Path: path, Reason: "the snapshot cannot be read", Err: err}
	}
	if !bytes.Equal(h.Sum(nil), want) {
		return 0, &DamageError{Path: path, Reason: "the snapshot fails raft's checksum", Err: errors.New("CRC mismatch")}
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return 0, &DamageError{Path: path, Reason: "the snapshot cannot be read", Err: err}
	}
	sr := &snapshotReader{r: bufio.NewReaderSize(f, 256<<10), h: sha256.New(), spool: io.Discard}
	hdr, err := sr.verify()
	if err != nil {
		return 0, &DamageError{Path: path, Reason: "the snapshot's content is damaged", Err: err}
	}
	return hdr.Count, nil
}
