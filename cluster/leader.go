// Package cluster holds what runs on the Raft leader of an HA manager
// cluster: voter reconciliation from the memberlist membership, and the
// leader-only singletons (the job activator, the reviver). Sub-packages:
// gateway (the API), agent (wiring), membership, replication, grains.
package cluster

import (
	"context"
	"log/slog"
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
	reconcile(cfg)
	changed()
	for {
		select {
		case <-ctx.Done():
			log.Info("leader duties stopped")
			return
		case <-changes:
			reconcile(cfg)
			changed()
		case <-tick.C:
			reconcile(cfg)
		}
	}
}

// reconcile makes the Raft voters follow the membership: every alive
// member with a Raft address is a voter; a member that left gracefully, or
// has been dead longer than DeadServerTimeout, is removed. This manager is
// never removed by itself.
func reconcile(cfg LeaderConfig) {
	r := cfg.Replicator.Raft()
	f := r.GetConfiguration()
	if err := f.Error(); err != nil {
		cfg.Logger.Warn("read raft configuration", "error", err)
		return
	}
	voters := map[raft.ServerID]raft.ServerAddress{}
	for _, s := range f.Configuration().Servers {
		voters[s.ID] = s.Address
	}
	alive := map[string]bool{}
	for _, m := range cfg.Membership.Members() {
		if m.Meta.RaftAddr == "" || m.State != membership.MemberAlive {
			continue
		}
		alive[m.Name] = true
		id, addr := raft.ServerID(m.Name), raft.ServerAddress(m.Meta.RaftAddr)
		if cur, ok := voters[id]; ok && cur == addr {
			continue
		}
		if err := r.AddVoter(id, addr, 0, 10*time.Second).Error(); err != nil {
			cfg.Logger.Warn("add raft voter", "name", m.Name, "raft_addr", addr, "error", err)
			continue
		}
		cfg.Logger.Info("raft voter added", "name", m.Name, "raft_addr", addr)
	}
	for _, d := range cfg.Membership.Left() {
		id := raft.ServerID(d.Name)
		if alive[d.Name] || d.Name == cfg.Replicator.Name() {
			continue
		}
		if _, ok := voters[id]; !ok {
			continue
		}
		if !d.Graceful && time.Since(d.Since) < cfg.DeadServerTimeout {
			continue
		}
		if err := r.RemoveServer(id, 0, 10*time.Second).Error(); err != nil {
			cfg.Logger.Warn("remove raft voter", "name", d.Name, "error", err)
			continue
		}
		cfg.Logger.Info("raft voter removed", "name", d.Name, "graceful", d.Graceful, "departed", d.Since)
	}
}
