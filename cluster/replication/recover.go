package replication

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"

	"github.com/hashicorp/raft"

	"github.com/norsk-oss/norsk-manager/persistence"
)

// Offline Raft surgery for backups and disasters (docs/design/backup.md):
// Seed gives a restored store the Raft state of a new one-manager cluster,
// Recover turns a stopped surviving member of a cluster that lost its
// majority into one. Both run with the manager stopped, on its data dir,
// and touch the network not at all (an in-memory transport stands in).

// snapshotsSubdir is where a Replicator keeps Raft's snapshots, under
// Config.Dir.
const snapshotsSubdir = "snapshots"

// keyCurrentTerm is hashicorp/raft's StableStore key of the current term.
var keyCurrentTerm = []byte("CurrentTerm")

// SeedConfig configures Seed.
type SeedConfig struct {
	// Dir is the data dir's Raft directory (Config.Dir: <data-dir>/raft).
	Dir string
	// Name is the manager's Raft server id (its --name).
	Name string
	// Addr is the Raft address other managers will dial (host:port), the
	// one the manager advertises.
	Addr string
	// Store is the data dir's store; its content is the cluster's state.
	Store *persistence.Store
	// Logger receives raft's logs; nil logs nothing.
	Logger *slog.Logger
}

// Seed writes the Raft state of a new cluster of one manager whose state
// is the store's content (a restored backup): a Raft snapshot of the store
// at its applied index (1 if nothing was ever applied) and term 1, whose
// configuration is this manager alone as a voter. Started with its cluster
// flags, the manager elects itself without bootstrapping; other managers
// join it with --join and fresh data dirs and receive the snapshot. Seed
// refuses a Raft directory that already holds state.
func Seed(cfg SeedConfig) error {
	if cfg.Dir == "" || cfg.Name == "" || cfg.Addr == "" || cfg.Store == nil {
		return errors.New("replication: seed: Dir, Name, Addr and Store are required")
	}
	hl := newHclogAdapter(orDiscard(cfg.Logger), nil)
	logs, err := persistence.OpenRaftStore(persistence.DefaultRaftStoreConfig(cfg.Dir))
	if err != nil {
		return fmt.Errorf("replication: seed: %w", err)
	}
	defer logs.Close()
	snaps, err := raft.NewFileSnapshotStoreWithLogger(filepath.Join(cfg.Dir, snapshotsSubdir), 2, hl)
	if err != nil {
		return fmt.Errorf("replication: seed: snapshot store: %w", err)
	}
	has, err := raft.HasExistingState(logs, logs, snaps)
	if err != nil {
		return fmt.Errorf("replication: seed: %w", err)
	}
	if has {
		return fmt.Errorf("replication: seed: %s already holds Raft state", cfg.Dir)
	}
	index := max(cfg.Store.FSM().AppliedIndex(), 1)
	_, trans := raft.NewInmemTransport(raft.ServerAddress(cfg.Addr))
	defer trans.Close()
	conf := raft.Configuration{Servers: []raft.Server{{Suffrage: raft.Voter, ID: raft.ServerID(cfg.Name), Address: raft.ServerAddress(cfg.Addr)}}}
	sink, err := snaps.Create(1, index, 1, conf, 1, trans)
	if err != nil {
		return fmt.Errorf("replication: seed: create snapshot: %w", err)
	}
	snap, err := persistence.NewRaftFSM(cfg.Store).Snapshot()
	if err != nil {
		sink.Cancel()
		return fmt.Errorf("replication: seed: %w", err)
	}
	defer snap.Release()
	if err := snap.Persist(sink); err != nil {
		return fmt.Errorf("replication: seed: write snapshot: %w", err)
	}
	if err := logs.SetUint64(keyCurrentTerm, 1); err != nil {
		return fmt.Errorf("replication: seed: %w", err)
	}
	return nil
}

// RecoverConfig configures Recover.
type RecoverConfig struct {
	// Dir is the data dir's Raft directory (<data-dir>/raft).
	Dir string
	// Name is this manager's Raft server id (its --name); it must be a
	// server of the cluster's last configuration.
	Name string
	// Addr is its Raft address in the new configuration; "" keeps its
	// address in the last configuration.
	Addr string
	// Store and LogStore are the data dir's stores, opened (the manager
	// stopped).
	Store    *persistence.Store
	LogStore *persistence.RaftStore
	// EventSkip is how far the event head moves (Store.RestartEventLog);
	// 0 means persistence.RandomEventSkip().
	EventSkip uint64
	// Logger receives raft's logs; nil logs nothing.
	Logger *slog.Logger
}

// RecoverResult describes a recovery.
type RecoverResult struct {
	// Addr is the manager's Raft address in the new configuration.
	Addr string
	// Previous is the cluster's configuration before.
	Previous []raft.Server
	// AppliedBefore and AppliedAfter are the store's applied index before
	// and after: the entries in between were in this manager's log but not
	// yet applied (committed or not: they are kept).
	AppliedBefore, AppliedAfter uint64
	// EventBase is the event index the restarted event log continues
	// after.
	EventBase persistence.Index
}

// ReadConfiguration returns the last Raft configuration recorded in a
// stopped manager's Raft state (snapshots and log), without starting Raft
// or touching the store.
func ReadConfiguration(dir, name string, store *persistence.Store, logs *persistence.RaftStore, logger *slog.Logger) (raft.Configuration, error) {
	hl := newHclogAdapter(orDiscard(logger), nil)
	snaps, err := raft.NewFileSnapshotStoreWithLogger(filepath.Join(dir, snapshotsSubdir), 2, hl)
	if err != nil {
		return raft.Configuration{}, fmt.Errorf("replication: snapshot store: %w", err)
	}
	_, trans := raft.NewInmemTransport("")
	defer trans.Close()
	conf := offlineConfig(name, hl)
	c, err := raft.GetConfiguration(conf, persistence.NewRaftFSM(store), logs, logs, snaps, trans)
	if err != nil {
		return raft.Configuration{}, fmt.Errorf("replication: read the raft configuration: %w", err)
	}
	return c, nil
}

// Recover rewrites the Raft state of a stopped member of a cluster that
// lost its majority for good so that it is a cluster of one, keeping all
// its data: raft.RecoverCluster applies every entry of its log (including
// those committed, or not, but not yet applied) to the store, restarts the
// event log (Store.RestartEventLog: clients of the old cluster get a
// stream_reset), and writes a snapshot whose configuration is this manager
// alone, deleting the log. Writes the lost majority had committed but this
// member never received are lost. Never restart the lost managers on
// their old data dirs afterwards: they still hold the old configuration.
//
// Name must be a server of the last configuration. A store failure while
// applying is returned as an error (the data dir should then be restored
// from a backup).
func Recover(cfg RecoverConfig) (res RecoverResult, err error) {
	if cfg.Dir == "" || cfg.Name == "" || cfg.Store == nil || cfg.LogStore == nil {
		return res, errors.New("replication: recover: Dir, Name, Store and LogStore are required")
	}
	defer func() {
		// RaftFSM panics on a store failure (continuing would diverge a
		// live replica); here it is an operator's tool that must say why.
		if r := recover(); r != nil {
			err = fmt.Errorf("replication: recover: %v", r)
		}
	}()
	prev, err := ReadConfiguration(cfg.Dir, cfg.Name, cfg.Store, cfg.LogStore, cfg.Logger)
	if err != nil {
		return res, err
	}
	res.Previous = prev.Servers
	res.Addr = cfg.Addr
	found := false
	for _, s := range prev.Servers {
		if s.ID == raft.ServerID(cfg.Name) {
			found = true
			if res.Addr == "" {
				res.Addr = string(s.Address)
			}
		}
	}
	if !found {
		return res, fmt.Errorf("replication: recover: %q is not a server of the cluster's last configuration (%s): check --name",
			cfg.Name, serverList(prev.Servers))
	}
	hl := newHclogAdapter(orDiscard(cfg.Logger), nil)
	snaps, err := raft.NewFileSnapshotStoreWithLogger(filepath.Join(cfg.Dir, snapshotsSubdir), 2, hl)
	if err != nil {
		return res, fmt.Errorf("replication: snapshot store: %w", err)
	}
	_, trans := raft.NewInmemTransport(raft.ServerAddress(res.Addr))
	defer trans.Close()
	skip := cfg.EventSkip
	if skip == 0 {
		skip = persistence.RandomEventSkip()
	}
	fsm := &recoverFSM{store: cfg.Store, fsm: persistence.NewRaftFSM(cfg.Store), skip: skip}
	res.AppliedBefore = cfg.Store.FSM().AppliedIndex()
	one := raft.Configuration{Servers: []raft.Server{{Suffrage: raft.Voter, ID: raft.ServerID(cfg.Name), Address: raft.ServerAddress(res.Addr)}}}
	if err := raft.RecoverCluster(offlineConfig(cfg.Name, hl), fsm, cfg.LogStore, cfg.LogStore, snaps, trans, one); err != nil {
		return res, fmt.Errorf("replication: recover: %w", err)
	}
	res.AppliedAfter = cfg.Store.FSM().AppliedIndex()
	res.EventBase = fsm.base
	return res, nil
}

// offlineConfig is the raft.Config of the offline operations: raft never
// restores a snapshot into the (persistent) store on its own.
func offlineConfig(name string, hl *hclogAdapter) *raft.Config {
	rc := raft.DefaultConfig()
	rc.LocalID = raft.ServerID(name)
	rc.Logger = hl
	rc.NoSnapshotRestoreOnStart = true
	return rc
}

func orDiscard(l *slog.Logger) *slog.Logger {
	if l == nil {
		return slog.New(slog.DiscardHandler)
	}
	return l
}

func serverList(servers []raft.Server) string {
	var b bytes.Buffer
	for i, s := range servers {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%s at %s", s.ID, s.Address)
	}
	if b.Len() == 0 {
		return "none"
	}
	return b.String()
}

// recoverFSM is the FSM raft.RecoverCluster drives: the store's RaftFSM,
// except that it skips restoring a snapshot the store is already past,
// and restarts the event log before the final snapshot is taken (so the
// snapshot new members receive has it too).
type recoverFSM struct {
	store *persistence.Store
	fsm   *persistence.RaftFSM
	skip  uint64
	base  persistence.Index // set by Snapshot
}

func (f *recoverFSM) Apply(l *raft.Log) any { return f.fsm.Apply(l) }

// Restore restores the snapshot only if the store is behind it (or holds
// an interrupted restore): the store applies every committed entry, so it
// is normally at or past raft's latest snapshot, and restoring that older
// state would only be undone by replaying the log after it.
func (f *recoverFSM) Restore(rc io.ReadCloser) error {
	head := make([]byte, 64)
	n, err := io.ReadFull(rc, head)
	if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, io.EOF) {
		return err
	}
	head = head[:n]
	hdr, err := persistence.ReadSnapshotHeader(bytes.NewReader(head))
	if err != nil {
		return err
	}
	if !f.store.RestoreInterrupted() && hdr.Applied <= f.store.FSM().AppliedIndex() {
		return nil
	}
	return f.fsm.Restore(io.NopCloser(io.MultiReader(bytes.NewReader(head), rc)))
}

func (f *recoverFSM) Snapshot() (raft.FSMSnapshot, error) {
	base, err := f.store.RestartEventLog(f.skip)
	if err != nil {
		return nil, err
	}
	f.base = base
	s, err := f.fsm.Snapshot()
	if err != nil {
		return nil, err
	}
	return releasingSnapshot{s}, nil
}

// releasingSnapshot releases its read view once persisted:
// raft.RecoverCluster never calls Release.
type releasingSnapshot struct{ raft.FSMSnapshot }

func (s releasingSnapshot) Persist(sink raft.SnapshotSink) error {
	defer s.Release()
	return s.FSMSnapshot.Persist(sink)
}
