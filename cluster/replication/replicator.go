package replication

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"

	"github.com/norsk-oss/norsk-manager/persistence"
)

// ErrNoLeader is returned when the cluster has no leader (no quorum, or an
// election in progress) for longer than the caller waited.
var ErrNoLeader = errors.New("replication: no leader")

// Config configures a Replicator.
type Config struct {
	// Name is this manager's Raft server id (its --name).
	Name string
	// BindAddr is the Raft transport's listen address (host:port).
	BindAddr string
	// Advertise is the Raft address other managers dial (host:port);
	// default BindAddr.
	Advertise string
	// Dir holds the Raft snapshots (file snapshot store).
	Dir string
	// Store is the manager's store; its FSM is the Raft FSM.
	Store *persistence.Store
	// LogStore is the Raft log and stable store.
	LogStore *persistence.RaftStore
	// Forward resolves a manager name to an internal Cluster client, for
	// appends and read indexes sent to the leader.
	Forward ForwardFunc
	// HeartbeatTimeout, ElectionTimeout and LeaderLeaseTimeout tune
	// failure detection (raft.Config). Defaults 500 ms, 500 ms, 250 ms.
	HeartbeatTimeout, ElectionTimeout, LeaderLeaseTimeout time.Duration
	// CommitTimeout is how long the leader lets a follower go without an
	// AppendEntries (raft.Config.CommitTimeout; raft waits 1-2x this).
	// Raft's heartbeats carry no commit index, so this bounds how late a
	// follower learns that an entry committed, and so how long a read
	// barrier or a forwarded append waits on a follower when no later
	// write comes by to carry the news. Default 5 ms (raft's 50 ms made
	// every write through a follower about 50-100 ms); idle, it costs each
	// follower ~130 small RPCs a second.
	CommitTimeout time.Duration
	// ApplyTimeout bounds how long a raft.Apply waits to be enqueued.
	// Default 10 s.
	ApplyTimeout time.Duration
	// SnapshotThreshold and TrailingLogs tune compaction (raft.Config).
	// Defaults 8192 and 10240.
	SnapshotThreshold, TrailingLogs uint64
	// TLS, if set, runs the Raft transport over mutual TLS (tls.go): a
	// process without a certificate it accepts can neither connect to
	// this manager's Raft port nor be dialled by it. Nil: plain TCP.
	TLS    *PeerTLS
	Logger *slog.Logger
}

// Replicator owns the Raft node of one manager.
type Replicator struct {
	cfg   Config
	log   *slog.Logger
	raft  *raft.Raft
	fsm   *persistence.RaftFSM
	trans *raft.NetworkTransport
	// tls is the transport's stream layer when Config.TLS is set.
	tls *tlsStreamLayer

	// leaderReady is set once this manager, as leader, has applied every
	// entry committed before its term (Barrier after election): only then
	// is its commit index a valid read index. Guarded by mu.
	mu          sync.Mutex
	leaderReady bool
	leaderTerm  uint64

	stopCh chan struct{}
	wg     sync.WaitGroup
	once   sync.Once
	// stopping is set by Shutdown: raft's errors about its own shutdown
	// are logged at debug from then on (hclogAdapter).
	stopping *atomic.Bool
}

// New starts the Raft node (it does not bootstrap: see Bootstrap).
func New(cfg Config) (*Replicator, error) {
	switch {
	case cfg.Name == "":
		return nil, errors.New("replication: Name is required")
	case cfg.BindAddr == "":
		return nil, errors.New("replication: BindAddr is required")
	case cfg.Store == nil || cfg.LogStore == nil:
		return nil, errors.New("replication: Store and LogStore are required")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&cfg.HeartbeatTimeout, 500*time.Millisecond)
	def(&cfg.ElectionTimeout, 500*time.Millisecond)
	def(&cfg.LeaderLeaseTimeout, 250*time.Millisecond)
	def(&cfg.ApplyTimeout, 10*time.Second)
	def(&cfg.CommitTimeout, 5*time.Millisecond)
	if cfg.SnapshotThreshold == 0 {
		cfg.SnapshotThreshold = 8192
	}
	if cfg.TrailingLogs == 0 {
		cfg.TrailingLogs = 10240
	}
	if cfg.Advertise == "" {
		cfg.Advertise = cfg.BindAddr
	}
	adv, err := net.ResolveTCPAddr("tcp", cfg.Advertise)
	if err != nil {
		return nil, fmt.Errorf("replication: advertise address %q: %w", cfg.Advertise, err)
	}
	stopping := new(atomic.Bool)
	hl := newHclogAdapter(cfg.Logger, stopping)
	trans, layer, err := newTransport(cfg, adv, hl)
	if err != nil {
		return nil, fmt.Errorf("replication: raft transport on %s: %w", cfg.BindAddr, err)
	}
	if err := os.MkdirAll(cfg.Dir, 0o700); err != nil {
		trans.Close()
		return nil, err
	}
	snaps, err := raft.NewFileSnapshotStoreWithLogger(filepath.Join(cfg.Dir, "snapshots"), 2, hl)
	if err != nil {
		trans.Close()
		return nil, fmt.Errorf("replication: snapshot store: %w", err)
	}
	rc := raft.DefaultConfig()
	rc.LocalID = raft.ServerID(cfg.Name)
	rc.HeartbeatTimeout, rc.ElectionTimeout, rc.LeaderLeaseTimeout = cfg.HeartbeatTimeout, cfg.ElectionTimeout, cfg.LeaderLeaseTimeout
	rc.SnapshotThreshold, rc.TrailingLogs = cfg.SnapshotThreshold, cfg.TrailingLogs
	rc.CommitTimeout = cfg.CommitTimeout
	rc.Logger = hl
	fsm := persistence.NewRaftFSM(cfg.Store)
	// The FSM is persistent and skips entries it already applied: no
	// snapshot restore at start, unless the store is behind raft's latest
	// snapshot (an interrupted or refused restore).
	needed, err := fsm.NeedsSnapshotRestore(snaps)
	if err != nil {
		trans.Close()
		return nil, fmt.Errorf("replication: check the raft snapshot against the store: %w", err)
	}
	rc.NoSnapshotRestoreOnStart = !needed
	r, err := raft.NewRaft(rc, fsm, cfg.LogStore, cfg.LogStore, snaps, trans)
	if err != nil {
		trans.Close()
		return nil, fmt.Errorf("replication: start raft: %w", err)
	}
	rep := &Replicator{cfg: cfg, log: cfg.Logger, raft: r, fsm: fsm, trans: trans, tls: layer, stopCh: make(chan struct{}), stopping: stopping}
	rep.wg.Add(1)
	go rep.watchLeadership()
	return rep, nil
}

// Name returns this manager's Raft server id.
func (r *Replicator) Name() string { return r.cfg.Name }

// Raft returns the Raft node (for the leader loop and status).
func (r *Replicator) Raft() *raft.Raft { return r.raft }

// HasState reports whether this node already belongs to a cluster (it has
// Raft state from an earlier run or was bootstrapped).
func (r *Replicator) HasState() bool {
	return r.raft.LastIndex() > 0
}

// Bootstrap forms a new cluster of servers (name → Raft address), this
// manager included. Every manager started with the same --bootstrap-expect
// calls it with the same set; it is a no-op on a node with state.
func (r *Replicator) Bootstrap(servers map[string]string) error {
	if r.HasState() {
		return nil
	}
	var conf raft.Configuration
	for name, addr := range servers {
		conf.Servers = append(conf.Servers, raft.Server{Suffrage: raft.Voter, ID: raft.ServerID(name), Address: raft.ServerAddress(addr)})
	}
	err := r.raft.BootstrapCluster(conf).Error()
	if errors.Is(err, raft.ErrCantBootstrap) {
		return nil
	}
	return err
}

// IsLeader reports whether this manager is the Raft leader.
func (r *Replicator) IsLeader() bool { return r.raft.State() == raft.Leader }

// Leader returns the leader's server id ("" if none is known).
func (r *Replicator) Leader() string {
	_, id := r.raft.LeaderWithID()
	return string(id)
}

// AppliedIndex returns the index of the last entry applied to the FSM.
func (r *Replicator) AppliedIndex() uint64 { return r.cfg.Store.FSM().AppliedIndex() }

// watchLeadership tracks whether, as leader, this node's commit index is
// usable as a read index: after winning an election it runs a Barrier.
func (r *Replicator) watchLeadership() {
	defer r.wg.Done()
	for {
		select {
		case <-r.stopCh:
			return
		case leader := <-r.raft.LeaderCh():
			r.mu.Lock()
			r.leaderReady = false
			r.mu.Unlock()
			if !leader {
				continue
			}
			term := r.raft.CurrentTerm()
			if err := r.raft.Barrier(30 * time.Second).Error(); err != nil {
				r.log.Warn("leader barrier failed", "error", err)
				continue
			}
			r.mu.Lock()
			r.leaderReady, r.leaderTerm = r.IsLeader(), term
			r.mu.Unlock()
			r.log.Info("leader ready", "term", term, "applied_index", r.AppliedIndex())
		}
	}
}

// WaitForLeader blocks until a leader is known or ctx ends (ErrNoLeader).
func (r *Replicator) WaitForLeader(ctx context.Context) error {
	for r.Leader() == "" {
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w: %v", ErrNoLeader, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
	return nil
}

// Shutdown stops the Raft node. Idempotent.
func (r *Replicator) Shutdown() error {
	var err error
	r.once.Do(func() {
		r.stopping.Store(true)
		close(r.stopCh)
		err = r.raft.Shutdown().Error()
		r.wg.Wait()
		r.trans.Close()
	})
	return err
}
