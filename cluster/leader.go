// Package cluster holds what runs on the Raft leader of an HA manager
// cluster: voter reconciliation from the memberlist membership, and the
// leader-only singletons (the job activator, the reviver). Sub-packages:
// gateway (the API), agent (wiring), membership, replication, grains.
package cluster

import (
	"context"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/hashicorp/raft"

	"github.com/norsk-oss/norsk-manager/cluster/membership"
	"github.com/norsk-oss/norsk-manager/cluster/replication"
)

// LeaderConfig configures RunLeadership.
type LeaderConfig struct {
	Replicator *replication.Replicator
	Membership *membership.Membership
	// DeadServerTimeout is how long a member may stay dead (failed, not
	// left) before the leader removes it from the Raft voters. Default 5m.
	DeadServerTimeout time.Duration
	// Reachable reports whether a Raft address answers (a new member is
	// added as a voter only then). Default: a TCP connect within 500 ms.
	Reachable func(addr raft.ServerAddress) bool
	// ReconcileInterval is how often the leader reconciles voters besides
	// on every membership change. Default 1 s.
	ReconcileInterval time.Duration
	// Singletons runs while this manager leads; its ctx ends when
	// leadership is lost.
	Singletons func(ctx context.Context)
	// OnMembershipChange runs on the leader after every membership change
	// (and once on gaining leadership), e.g. to revive grains.
	OnMembershipChange func(ctx context.Context)
	Logger             *slog.Logger
}

// RunLeadership watches Raft leadership until ctx ends: on gaining it, it
// starts the leader loop (voter reconciliation, singletons); on losing it,
// it stops the loop and waits for it (Nomad's monitorLeadership shape).
func RunLeadership(ctx context.Context, cfg LeaderConfig) {
	if cfg.DeadServerTimeout <= 0 {
		cfg.DeadServerTimeout = 5 * time.Minute
	}
	if cfg.ReconcileInterval <= 0 {
		cfg.ReconcileInterval = time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Reachable == nil {
		cfg.Reachable = dialable
	}
	obs := make(chan raft.Observation, 8)
	observer := raft.NewObserver(obs, false, func(o *raft.Observation) bool {
		_, ok := o.Data.(raft.LeaderObservation)
		return ok
	})
	r := cfg.Replicator.Raft()
	r.RegisterObserver(observer)
	defer r.DeregisterObserver(observer)

	var stop context.CancelFunc
	var wg sync.WaitGroup
	stopLeader := func() {
		if stop != nil {
			stop()
			wg.Wait()
			stop = nil
		}
	}
	defer stopLeader()
	check := time.NewTicker(250 * time.Millisecond)
	defer check.Stop()
	for {
		leading := cfg.Replicator.IsLeader()
		switch {
		case leading && stop == nil:
			lctx, cancel := context.WithCancel(ctx)
			stop = cancel
			wg.Add(1)
			go func() {
				defer wg.Done()
				leaderLoop(lctx, cfg)
			}()
		case !leading && stop != nil:
			cfg.Logger.Info("lost leadership: stopping leader duties")
			stopLeader()
		}
		select {
		case <-ctx.Done():
			return
		case <-obs:
		case <-check.C:
		}
	}
}

// leaderLoop runs while this manager leads.
func leaderLoop(ctx context.Context, cfg LeaderConfig) {
	log := cfg.Logger
	bctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	err := cfg.Replicator.Barrier(bctx)
	cancel()
	if err != nil {
		log.Warn("leader barrier failed; not taking up leader duties yet", "error", err)
		return
	}
	log.Info("leader duties started", "term", cfg.Replicator.Raft().CurrentTerm())
	var wg sync.WaitGroup
	defer wg.Wait()
	if cfg.Singletons != nil {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cfg.Singletons(ctx)
		}()
	}
	changes, unsubscribe := cfg.Membership.Subscribe()
	defer unsubscribe()
	tick := time.NewTicker(cfg.ReconcileInterval)
	defer tick.Stop()
	// OnMembershipChange runs on its own goroutine each time: a run may
	// wait out a lookup of a member that just died, and must neither hold
	// up voter reconciliation nor the next run.
	changed := func() {
		if cfg.OnMembershipChange == nil {
			return
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			cfg.OnMembershipChange(ctx)
		}()
	}
	// missing: when this leader first noticed each voter missing from
	// the alive gossip members (its term's view: a new leader starts
	// counting afresh).
	missing := map[raft.ServerID]time.Time{}
	reconcile(cfg, missing)
	changed()
	for {
		select {
		case <-ctx.Done():
			log.Info("leader duties stopped")
			return
		case <-changes:
			reconcile(cfg, missing)
			changed()
		case <-tick.C:
			reconcile(cfg, missing)
		}
	}
}

// reconcile makes the Raft voters follow the membership (planVoters):
// it adds reachable alive members and removes departed voters.
func reconcile(cfg LeaderConfig, missing map[raft.ServerID]time.Time) {
	r := cfg.Replicator.Raft()
	f := r.GetConfiguration()
	if err := f.Error(); err != nil {
		cfg.Logger.Warn("read raft configuration", "error", err)
		return
	}
	plan := planVoters(voterInputs{
		Self: raft.ServerID(cfg.Replicator.Name()), Servers: f.Configuration().Servers,
		Members: cfg.Membership.Members(), Left: cfg.Membership.Left(), Now: time.Now(),
		Missing: missing, DeadServerTimeout: cfg.DeadServerTimeout, Reachable: cfg.Reachable,
	})
	log := cfg.Logger
	for _, n := range plan.Notes {
		log.Log(context.Background(), n.Level, n.Msg, n.Args...)
	}
	for _, c := range plan.Add {
		if err := r.AddVoter(c.ID, c.Addr, 0, 10*time.Second).Error(); err != nil {
			log.Warn("add raft voter", "name", c.ID, "raft_addr", c.Addr, "error", err)
			continue
		}
		log.Info("raft voter added", "name", c.ID, "raft_addr", c.Addr, "reason", c.Reason)
	}
	for _, c := range plan.Remove {
		if err := r.RemoveServer(c.ID, 0, 10*time.Second).Error(); err != nil {
			log.Warn("remove raft voter", "name", c.ID, "raft_addr", c.Addr, "error", err)
			continue
		}
		delete(missing, c.ID)
		log.Info("raft voter removed", "name", c.ID, "raft_addr", c.Addr, "graceful", c.Graceful, "reason", c.Reason)
	}
}

// dialable reports whether a TCP connection to addr succeeds within
// 500 ms (Raft's transport drops a connection that sends nothing, without
// a log line).
func dialable(addr raft.ServerAddress) bool {
	conn, err := net.DialTimeout("tcp", string(addr), 500*time.Millisecond)
	if err != nil {
		return false
	}
	_ = conn.Close()
	return true
}
