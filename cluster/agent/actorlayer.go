package agent

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/cluster"
	"github.com/asynkron/protoactor-go/cluster/identitylookup/disthash"
	"github.com/asynkron/protoactor-go/remote"

	"github.com/norsk-oss/norsk-manager/actors"
	"github.com/norsk-oss/norsk-manager/cluster/grains"
	"github.com/norsk-oss/norsk-manager/cluster/membership"
)

// actorLayer is one incarnation of this manager in the actor cluster: an
// actor system (whose id is protoactor's member id), the protoactor
// cluster over the gossip membership with the grain kinds, and the grain
// router. protoactor blocks the id of a member once it has left the
// topology, forever; a manager that was declared failed (frozen, cut off)
// and runs again therefore replaces its layer with a new one under a new
// id (rejoin), dropping every grain the old one hosted.
type actorLayer struct {
	system   *actor.ActorSystem
	cluster  *cluster.Cluster
	provider *membership.Provider
	router   *grains.Router
}

// rejoinMinInterval bounds how often a manager rejoins the actor cluster.
const rejoinMinInterval = 5 * time.Second

// startActorLayer builds and starts an actor layer on system over the
// manager's cluster address and grain kinds. The remote port may still be
// held for a moment by the layer it replaces: binding is retried for a few
// seconds.
func (c *clustered) startActorLayer(system *actor.ActorSystem) (*actorLayer, error) {
	cc := c.a.cfg.Cluster
	host, port, err := splitPort(cc.ClusterAddr)
	if err != nil {
		return nil, err
	}
	ckinds := make([]*cluster.Kind, len(c.kinds))
	for i, k := range c.kinds {
		ckinds[i] = actors.ClusterKind(k)
	}
	var last error
	for attempt := 0; attempt < 20; attempt++ {
		if attempt > 0 {
			time.Sleep(250 * time.Millisecond)
		}
		l := &actorLayer{system: system, provider: membership.NewProvider(c.members, c.providerOptions()...)}
		rem := remote.Configure(host, port, append(c.a.cfg.TLS.actorRemoteOptions(), remote.WithAdvertisedHost(cc.advertised(cc.ClusterAddr)))...)
		ccfg := cluster.Configure("norsk-manager", l.provider, disthash.New(), rem, cluster.WithKinds(ckinds...), cluster.WithRequestTimeout(10*time.Second))
		l.cluster = cluster.New(system, ccfg)
		if last = startMember(l.cluster); last != nil {
			_ = l.provider.Shutdown(false)
			if !strings.Contains(last.Error(), "address already in use") {
				return nil, last
			}
			system = c.a.newActorSystem()
			continue
		}
		l.router = grains.NewRouter(l.cluster, grains.Config{Logger: c.a.log.With("component", "router")})
		return l, nil
	}
	return nil, fmt.Errorf("cluster: actor port %s still in use: %w", cc.ClusterAddr, last)
}

// stop ends the layer: its router, every grain it hosts (their
// supervisors stop them; worker sessions close; the jobs keep running on
// the workers), the actor system and remote, and the provider.
func (l *actorLayer) stop() {
	l.router.Stop()
	// Poisons every activation and waits for each (disthash's placement
	// actor); Cluster.Shutdown(false) would leave them running.
	l.cluster.IdentityLookup.Shutdown()
	l.cluster.Shutdown(false)
	_ = l.provider.Shutdown(false)
}

// layer returns the current actor layer.
func (c *clustered) layer() *actorLayer {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.actor
}

// watchFencing rejoins the actor cluster under a new actor id when a
// strict majority of the other members fence this manager's current id
// (membership.FencedBy): they declared it failed, and protoactor on them
// will never route to it or accept its connections again, while its own
// grains still believe they own their identities.
func (c *clustered) watchFencing(ctx context.Context) {
	changed, cancel := c.members.Subscribe()
	defer cancel()
	t := time.NewTicker(time.Second)
	defer t.Stop()
	var lastRejoin time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-changed:
		case <-t.C:
		}
		self := c.members.LocalMember()
		fencers, others := membership.FencedBy(c.members.Members(), self)
		if 2*len(fencers) <= others || time.Since(lastRejoin) < rejoinMinInterval {
			continue
		}
		lastRejoin = time.Now()
		c.a.log.Warn("the other managers declared this one failed (it was frozen or cut off): rejoining the actor cluster under a new id; the grains it hosted are re-activated on their owners",
			"actor_id", self.Meta.ActorID, "fenced_by", strings.Join(fencers, ","), "members", others)
		if err := c.rejoin(); err != nil {
			c.a.log.Error("rejoining the actor cluster failed; this manager serves no grains until it is restarted", "error", err)
			select {
			case c.fatal <- fmt.Errorf("cluster: rejoin the actor cluster: %w", err):
			default:
			}
			return
		}
	}
}

// rejoin replaces the actor layer: requests wait (Switch) while the old
// layer's grains stop and a new actor system joins under a new id.
func (c *clustered) rejoin() error {
	start := time.Now()
	old := c.layer()
	c.router.Suspend()
	old.stop()
	l, err := c.startActorLayer(c.a.newActorSystem())
	if err != nil {
		return err
	}
	c.mu.Lock()
	c.actor = l
	c.mu.Unlock()
	c.router.Set(l.router)
	c.a.metrics.rejoins.Inc()
	c.a.log.Info("rejoined the actor cluster", "actor_id", l.system.ID, "old_actor_id", old.system.ID, "took", time.Since(start).Round(time.Millisecond))
	return nil
}
