package persistence

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/dgraph-io/badger/v4"
	"google.golang.org/protobuf/proto"

	"github.com/norsk-oss/norsk-manager/proto/internalpb"
)

// maxReportedDamage bounds the damage a store check lists one by one; the
// rest are counted.
const maxReportedDamage = 20

// VerifyReport is what Verify checked in a stopped data dir and found.
type VerifyReport struct {
	// DataDir is the data dir checked.
	DataDir string
	// Marker is the data dir's marker, as read.
	Marker MarkerInfo
	// Store is the check of the FSM store (always present).
	Store StoreCheck
	// Raft is the check of the Raft store of a cluster member; nil when the
	// data dir has none (a single manager's).
	Raft *RaftCheck
	// EmptyLogs lists the zero-length logs a crash left, which the next
	// start removes (removeEmptyLogs: they hold no data). Verify leaves
	// them in place.
	EmptyLogs []string
	// Damage lists what failed a check, in the order found; empty when the
	// data dir is sound. MoreDamage counts problems beyond those listed.
	Damage     []*DamageError
	MoreDamage int
}

// Sound reports whether nothing failed a check.
func (r *VerifyReport) Sound() bool { return len(r.Damage) == 0 }

// MarkerInfo is the content of a data dir's marker file.
type MarkerInfo struct {
	Format    int
	StoreID   string
	CreatedAt time.Time
	Mode      Mode
}

// StoreCheck is what Verify found in the FSM store.
type StoreCheck struct {
	// Dir is the store's badger directory.
	Dir string
	// Tables and TableBytes are the tables the MANIFEST lists (every block
	// checksum verified) and their size in bytes.
	Tables     int
	TableBytes int64
	// Keys is the number of keys read (every value read, value-log
	// checksums verified).
	Keys int
	// Entities counts the live entities by kind (job, node, …); Deleted
	// counts the tombstones of deleted ones.
	Entities map[string]int
	Deleted  int
	// Events is the number of stored events, EventFirst and EventHead the
	// oldest retained and newest index (0, 0 with none).
	Events                int
	EventFirst, EventHead Index
	// Applied is the log index of the last applied batch (meta/applied).
	Applied uint64
	// IndexEntries is the number of secondary-index entries, each checked
	// against the records it is derived from.
	IndexEntries int
	// AuditEntries is the number of stored audit entries (an anchor
	// included), AuditFirst and AuditHead the oldest and newest seq (0, 0
	// with none); the hash chain was recomputed over all of them
	// (audit_verify.go).
	AuditEntries          int
	AuditFirst, AuditHead uint64
}

// Verify checks a stopped manager's data dir offline: the marker; the FSM
// store's MANIFEST and every table checksum, then every key and value
// (value-log checksums), every entity record, event and secondary-index
// entry, and the meta keys; the Raft store likewise (raft.go: every log
// entry, the stable keys, the snapshots' checksums) when the data dir has
// one. It writes nothing into the data dir: it refuses a data dir in use
// (an error wrapping ErrInUse) without writing its lock file, reports the
// zero-length logs a crash left (VerifyReport.EmptyLogs) without removing
// them, and reads each store through a read-only view (openStoreView)
// holding copies of its write-ahead logs in a temporary directory (space
// up to the size of those logs). A store whose tables or logs fail the
// checks of a start is not opened at all.
//
// Damage is reported in the VerifyReport (Sound is false), with a nil
// error; an error means the data dir could not be checked at all (missing,
// not a norsk-manager data dir, in use, of another format version) or ctx
// ended (its error).
func Verify(ctx context.Context, dataDir string, logger *slog.Logger) (*VerifyReport, error) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	r := &VerifyReport{DataDir: dataDir}
	if err := r.readMarker(); err != nil {
		return nil, err
	}
	storeDir := filepath.Join(dataDir, storeSubdir)
	r.Store.Dir = storeDir
	if r.Sound() {
		if err := r.checkStore(ctx, storeDir, logger); err != nil {
			return nil, err
		}
	}
	raftDir := filepath.Join(dataDir, raftSubdir)
	if fi, err := os.Stat(raftDir); err == nil && fi.IsDir() {
		r.Raft = &RaftCheck{Dir: raftDir}
		if err := r.checkRaft(ctx, raftDir, logger); err != nil {
			return nil, err
		}
	}
	return r, nil
}

// damage records a problem, counting those beyond maxReportedDamage.
func (r *VerifyReport) damage(d *DamageError) {
	if len(r.Damage) < maxReportedDamage {
		r.Damage = append(r.Damage, d)
		return
	}
	r.MoreDamage++
}

// readMarker reads the marker without changing it. A missing dir or
// marker, or another format version, cannot be checked (an error); an
// unreadable marker is damage.
func (r *VerifyReport) readMarker() error {
	path := filepath.Join(r.DataDir, markerFile)
	b, err := os.ReadFile(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		if _, serr := os.Stat(r.DataDir); serr != nil {
			return fmt.Errorf("data dir %s: %w", r.DataDir, serr)
		}
		return fmt.Errorf("data dir %s has no %s marker: it is not a norsk-manager data dir, or it was never started", r.DataDir, markerFile)
	case err != nil:
		return fmt.Errorf("data dir %s: read marker: %w", r.DataDir, err)
	}
	var m marker
	if err := json.Unmarshal(b, &m); err != nil {
		r.damage(&DamageError{Path: path, Reason: "the marker file is unreadable", Err: err})
		return nil
	}
	r.Marker = MarkerInfo{Format: m.Format, StoreID: m.StoreID, CreatedAt: m.CreatedAt, Mode: m.Mode}
	if m.Format != FormatVersion {
		return fmt.Errorf("data dir %s has format version %d; this build reads %d", r.DataDir, m.Format, FormatVersion)
	}
	return nil
}

// checkStore opens the FSM store as a start would and checks its content.
func (r *VerifyReport) checkStore(ctx context.Context, dir string, logger *slog.Logger) error {
	if _, err := os.Stat(filepath.Join(dir, "MANIFEST")); err != nil {
		r.damage(&DamageError{Path: filepath.Join(dir, "MANIFEST"), Reason: "the store is missing or incomplete", Err: err})
		return nil
	}
	cfg := DefaultConfig(r.DataDir)
	opts := storeOptions(badger.DefaultOptions(dir), cfg, logger)
	od, err := r.open(opts, r.Marker.Mode, logger)
	if od == nil || err != nil {
		return err
	}
	defer closeView(od, logger)
	r.Store.Tables, r.Store.TableBytes = od.inspection.tables, od.inspection.tableBytes
	return od.db.View(func(txn *badger.Txn) error { return r.scanStore(ctx, txn) })
}

// open opens a store directory read-only for a check. Damage found before
// badger opens it is recorded and (nil, nil) returned; ErrInUse and other
// failures to open are returned.
func (r *VerifyReport) open(opts badger.Options, mode Mode, logger *slog.Logger) (*storeView, error) {
	od, err := openStoreView(opts, r.DataDir, mode, logger)
	var ref *refusal
	switch {
	case errors.As(err, &ref):
		for _, d := range ref.damage {
			r.damage(d)
		}
		return nil, nil
	case err != nil:
		return nil, err
	}
	r.EmptyLogs = append(r.EmptyLogs, od.inspection.emptyLogs...)
	return od, nil
}

// closeView closes a store view; a failure to close it or to remove its
// temporary directory is not damage, and only logged.
func closeView(v *storeView, logger *slog.Logger) {
	if err := v.close(); err != nil {
		logger.Warn("verify: closing a store view failed", "view", v.view, "error", err)
	}
}

// storeScan holds the cross-checks of one pass over the FSM store.
type storeScan struct {
	meta     map[string]uint64
	indexes  map[string][]byte // stored ix/ entries
	expected map[string][]byte // ix/ entries the live records imply
	evMin    Index
	evMax    Index
	audit    auditScan
}

// scanStore reads every key and value of the FSM store; it stops with
// ctx's error when ctx ends.
func (r *VerifyReport) scanStore(ctx context.Context, txn *badger.Txn) error {
	sc := storeScan{meta: map[string]uint64{}, indexes: map[string][]byte{}, expected: map[string][]byte{}}
	c := &r.Store
	c.Entities = map[string]int{}
	it := txn.NewIterator(badger.IteratorOptions{PrefetchValues: false})
	defer it.Close()
	for it.Rewind(); it.Valid(); it.Next() {
		if c.Keys%4096 == 0 && ctx.Err() != nil {
			return ctx.Err()
		}
		item := it.Item()
		key := item.KeyCopy(nil)
		v, err := item.ValueCopy(nil)
		if err != nil {
			r.damage(&DamageError{Path: c.Dir, Reason: fmt.Sprintf("the value of key %q cannot be read", printable(key)), Err: err})
			continue
		}
		c.Keys++
		r.checkKey(&sc, key, v)
	}
	r.crossCheck(&sc)
	return nil
}

// checkKey checks one key/value of the FSM store.
func (r *VerifyReport) checkKey(sc *storeScan, key, v []byte) {
	c := &r.Store
	bad := func(reason string, err error) {
		r.damage(&DamageError{Path: c.Dir, Reason: fmt.Sprintf("key %q: %s", printable(key), reason), Err: err})
	}
	k := string(key)
	switch {
	case strings.HasPrefix(k, prefixMeta):
		if len(v) != 8 {
			bad(fmt.Sprintf("a meta value of %d bytes, not 8", len(v)), nil)
			return
		}
		sc.meta[k] = binary.BigEndian.Uint64(v)
	case strings.HasPrefix(k, prefixEnt):
		ek := EntityKey(k[len(prefixEnt):])
		e, err := decodeEntity(ek, v)
		if err != nil {
			bad("the entity does not decode", err)
			return
		}
		if !e.live {
			c.Deleted++
			return
		}
		rec, err := decodeRecord(ek.Kind(), e.record)
		if err != nil {
			bad("the record does not decode", err)
			return
		}
		c.Entities[ek.Kind()]++
		for ik, iv := range indexEntries(ek, rec) {
			sc.expected[ik] = iv
		}
	case strings.HasPrefix(k, prefixEv):
		if len(key) != len(prefixEv)+8 {
			bad("an event key that is not 8 bytes of index", nil)
			return
		}
		var ev internalpb.StoredEvent
		if err := proto.Unmarshal(v, &ev); err != nil {
			bad("the event does not decode", err)
			return
		}
		i := Index(binary.BigEndian.Uint64(key[len(prefixEv):]))
		if sc.evMin == 0 || i < sc.evMin {
			sc.evMin = i
		}
		sc.evMax = max(sc.evMax, i)
		c.Events++
	case strings.HasPrefix(k, prefixIndex):
		sc.indexes[k] = v
		c.IndexEntries++
	case strings.HasPrefix(k, prefixAudit):
		r.checkAuditKey(&sc.audit, key, v)
	default:
		bad("a key of no known prefix", nil)
	}
}

// crossCheck compares the meta keys, events and indexes with each other.
func (r *VerifyReport) crossCheck(sc *storeScan) {
	c := &r.Store
	bad := func(reason string) { r.damage(&DamageError{Path: c.Dir, Reason: reason}) }
	if f := sc.meta[string(keyFormat)]; f != FormatVersion {
		bad(fmt.Sprintf("meta/format is %d, this build writes %d", f, FormatVersion))
	}
	if _, ok := sc.meta[string(keyRestoring)]; ok {
		bad("a snapshot restore was interrupted (meta/restoring is set): the content is incomplete")
	}
	r.crossCheckAudit(sc)
	c.Applied = sc.meta[string(keyApplied)]
	c.EventHead = Index(sc.meta[string(keyEvHead)])
	c.EventFirst = Index(max(sc.meta[string(keyEvFirst)], 1))
	switch {
	case c.EventHead == 0 && c.Events > 0:
		bad(fmt.Sprintf("%d events are stored but meta/ev_head is 0", c.Events))
	case c.EventHead > 0:
		// A restarted log (a restore, a recovery) retains nothing yet:
		// first is head + 1 and want is 0.
		want := int(c.EventHead - c.EventFirst + 1)
		if c.Events != want || want > 0 && (sc.evMin != c.EventFirst || sc.evMax != c.EventHead) {
			bad(fmt.Sprintf("the event log should hold events %d-%d (%d), it holds %d from %d to %d",
				c.EventFirst, c.EventHead, want, c.Events, sc.evMin, sc.evMax))
		}
	default:
		c.EventFirst = 0
	}
	var missing, wrong, extra []string
	for k, v := range sc.expected {
		sv, ok := sc.indexes[k]
		switch {
		case !ok:
			missing = append(missing, k)
		case !bytes.Equal(sv, v):
			wrong = append(wrong, k)
		}
	}
	for k := range sc.indexes {
		// A deregistered slot's revoked-token entry outlives its record
		// (updateIndexes).
		if _, ok := sc.expected[k]; !ok && !strings.HasPrefix(k, ixNodeRevoke) {
			extra = append(extra, k)
		}
	}
	for _, l := range []struct {
		keys []string
		what string
	}{{missing, "missing (a record implies them)"}, {wrong, "with the wrong value"}, {extra, "that no record implies"}} {
		if len(l.keys) > 0 {
			sort.Strings(l.keys)
			bad(fmt.Sprintf("%d secondary-index entries %s, e.g. %q", len(l.keys), l.what, printable([]byte(l.keys[0]))))
		}
	}
}

// printable renders a key for a message: control bytes as \xNN.
func printable(b []byte) string {
	var sb strings.Builder
	for _, c := range b {
		if c >= 0x20 && c < 0x7f {
			sb.WriteByte(c)
		} else {
			fmt.Fprintf(&sb, `\x%02x`, c)
		}
	}
	return sb.String()
}
