package membership

import (
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/asynkron/protoactor-go/cluster"
)

// PublishInterval is how often a Provider re-publishes the topology to
// protoactor even without a membership change (protoactor only drops
// members whose gossip heartbeat expired when the provider publishes).
const PublishInterval = time.Second

// ProviderLeaveTimeout bounds Membership.Leave in Provider.Shutdown(true).
const ProviderLeaveTimeout = 5 * time.Second

// Provider is a protoactor cluster.ClusterProvider over a Membership. It
// advertises the local actor system (host, port, id, kinds) in the
// membership meta and publishes every member that hosts kinds to
// cluster.MemberList on every membership change and every PublishInterval.
//
// The protoactor member id is the member's actor-system id (Meta.ActorID),
// new at every process start: protoactor blocks the id of a member that
// left forever, so a restarted manager must come back under a new id.
//
// The Membership stays owned by the caller: Shutdown never shuts it down.
type Provider struct {
	ms     *Membership
	logger *slog.Logger

	mu struct {
		sync.Mutex
		started bool
		stopped bool
		cluster *cluster.Cluster // set by run, for Refresh
		kinds   []string
	}
	stopCh chan struct{} // closed by Shutdown; stops the publish loop
	wg     sync.WaitGroup
	// admit, if set, further selects the members published (WithAdmit).
	admit func(Member) bool
}

var _ cluster.ClusterProvider = (*Provider)(nil)

// ProviderOption configures NewProvider.
type ProviderOption func(*Provider)

// WithAdmit publishes to protoactor only the members for which admit
// returns true (besides the rules of clusterMembers); the local member is
// always published. admit is called on every publish (every change and
// every PublishInterval), from the publish loop and Refresh: it must be
// safe for concurrent use and must not block for long. The manager uses
// it with mutual TLS between managers, so that grains are placed only on
// managers that are Raft servers (whose Raft port passed the TLS check),
// never on a process that only has the gossip key.
func WithAdmit(admit func(Member) bool) ProviderOption {
	return func(p *Provider) { p.admit = admit }
}

// NewProvider returns a Provider over ms, which must outlive it.
func NewProvider(ms *Membership, opts ...ProviderOption) *Provider {
	p := &Provider{
		ms:     ms,
		logger: ms.logger.With("lib", "protoactor-provider"),
		stopCh: make(chan struct{}),
	}
	for _, o := range opts {
		o(p)
	}
	return p
}

// StartMember is called by cluster.StartMember after the remote is
// listening (which panics if this returns an error). It puts the actor
// system's address, id and kinds into the local meta, publishes the
// topology once synchronously and starts the publish loop. Errors:
// ErrAlreadyStarted, ErrShutdown, the actor system's address error, or
// SetMeta's error (a broadcast timeout is only logged).
func (p *Provider) StartMember(c *cluster.Cluster) error {
	if err := p.markStarted(); err != nil {
		return err
	}
	host, port, err := c.ActorSystem.GetHostPort()
	if err != nil {
		return fmt.Errorf("membership: actor system address: %w", err)
	}
	if port <= 0 {
		return fmt.Errorf("membership: actor system has no remote port (%s:%d): start remote first", host, port)
	}
	kinds := c.GetClusterKinds()
	slices.Sort(kinds)
	meta := p.ms.LocalMember().Meta
	meta.ActorHost, meta.ActorPort, meta.ActorID, meta.Kinds = host, port, c.ActorSystem.ID, kinds
	if err := p.ms.SetMeta(meta); err != nil {
		if !errors.Is(err, ErrBroadcastTimeout) {
			return fmt.Errorf("membership: advertise actor system: %w", err)
		}
		p.logger.Warn("actor system advertised locally, broadcast still in progress", "error", err)
	}
	p.logger.Info("cluster member started", "actor_addr", fmt.Sprintf("%s:%d", host, port), "actor_id", c.ActorSystem.ID, "kinds", kinds)
	p.run(c, kinds)
	return nil
}

// StartClient is called by cluster.StartClient: a client hosts no kinds, so
// the meta is left alone and every member hosting kinds is published.
// Errors: ErrAlreadyStarted, ErrShutdown.
func (p *Provider) StartClient(c *cluster.Cluster) error {
	if err := p.markStarted(); err != nil {
		return err
	}
	p.run(c, nil)
	return nil
}

func (p *Provider) markStarted() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case p.mu.stopped:
		return ErrShutdown
	case p.mu.started:
		return ErrAlreadyStarted
	}
	p.mu.started = true
	return nil
}

// run publishes once, then starts the publish loop goroutine.
func (p *Provider) run(c *cluster.Cluster, kinds []string) {
	p.mu.Lock()
	p.mu.cluster, p.mu.kinds = c, kinds
	p.mu.Unlock()
	ch, cancel := p.ms.Subscribe()
	p.publish(c, kinds)
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		defer cancel()
		p.publishLoop(c, kinds, ch)
	}()
}

// Refresh publishes the current members to the cluster now (it also
// happens on every change and every PublishInterval): callers that act on a
// membership change themselves (the leader's reviver) call it first, so
// that grain placement already excludes departed members. A no-op before
// StartMember/StartClient or after Shutdown.
func (p *Provider) Refresh() {
	p.mu.Lock()
	c, kinds, ok := p.mu.cluster, p.mu.kinds, p.mu.started && !p.mu.stopped
	p.mu.Unlock()
	if ok && c != nil {
		p.publish(c, kinds)
	}
}

// publishLoop re-publishes on every membership change and every
// PublishInterval until Shutdown.
func (p *Provider) publishLoop(c *cluster.Cluster, kinds []string, changed <-chan struct{}) {
	t := time.NewTicker(PublishInterval)
	defer t.Stop()
	for {
		select {
		case <-p.stopCh:
			return
		case _, ok := <-changed:
			if !ok { // Membership shut down: keep the last topology
				changed = nil
				continue
			}
			p.publish(c, kinds)
		case <-t.C:
			p.publish(c, kinds)
		}
	}
}

// publish hands protoactor the current set of actor-hosting members and,
// for a member, advertises which of them protoactor has blocked (fence).
func (p *Provider) publish(c *cluster.Cluster, kinds []string) {
	members := p.ms.Members()
	c.MemberList.UpdateClusterTopology(clusterMembers(p.admitted(members), kinds))
	if len(kinds) > 0 {
		p.fence(c, members)
	}
}

// admitted returns the members admit lets through, and the local member.
func (p *Provider) admitted(members []Member) []Member {
	if p.admit == nil {
		return members
	}
	self := p.ms.LocalMember().Name
	out := make([]Member, 0, len(members))
	for _, m := range members {
		if m.Name == self || p.admit(m) {
			out = append(out, m)
		}
	}
	return out
}

// fence advertises, in the local meta's Fenced, the actor ids of the
// members that are alive in the gossip but blocked by protoactor here
// (protoactor blocks every member that ever left its topology, and never
// lets the id back in): such a member was declared failed — it was frozen
// or cut off — and still believes it hosts the grains it hosted. Telling
// it is how it learns that it must rejoin under a new id.
func (p *Provider) fence(c *cluster.Cluster, members []Member) {
	local := p.ms.LocalMember().Meta
	blocked := c.Remote.BlockList()
	var fenced []string
	for _, m := range members {
		id := m.Meta.ActorID
		if m.State == MemberAlive && id != "" && id != local.ActorID && blocked.IsBlocked(id) && len(fenced) < MaxFenced {
			fenced = append(fenced, id)
		}
	}
	slices.Sort(fenced)
	if slices.Equal(fenced, local.Fenced) {
		return
	}
	if len(fenced) > 0 {
		p.logger.Warn("members alive in the gossip are blocked by the actor cluster (declared failed earlier); telling them to rejoin",
			"actor_ids", strings.Join(fenced, ","))
	}
	local.Fenced = fenced
	if err := p.ms.SetMeta(local); err != nil && !errors.Is(err, ErrBroadcastTimeout) {
		p.logger.Debug("advertise fenced actor ids", "error", err)
	}
}

// FencedBy reports which alive members other than self (by name) fence
// self's current actor id (Meta.Fenced), and how many alive members other
// than self host actors. A manager fenced by a strict majority of the
// others has been declared failed by the actor cluster and must rejoin it
// under a new actor id; a minority fencing it (the far side of a healed
// partition, which blocked the majority in turn) is not enough.
func FencedBy(members []Member, self Member) (fencers []string, others int) {
	id := self.Meta.ActorID
	for _, m := range members {
		if m.Name == self.Name || m.State != MemberAlive || m.Meta.ActorPort <= 0 {
			continue
		}
		others++
		if id != "" && slices.Contains(m.Meta.Fenced, id) {
			fencers = append(fencers, m.Name)
		}
	}
	return fencers, others
}

// clusterMembers selects the members that are alive (not leaving), have an
// actor endpoint and id, and host at least one kind in common with
// localKinds (any kind when localKinds is empty, i.e. for a client). The
// result is sorted by id.
func clusterMembers(members []Member, localKinds []string) cluster.Members {
	out := make(cluster.Members, 0, len(members))
	for _, mem := range members {
		md := mem.Meta
		if mem.State != MemberAlive || md.ActorPort <= 0 || md.ActorID == "" || len(md.Kinds) == 0 {
			continue
		}
		if len(localKinds) > 0 && !slices.ContainsFunc(md.Kinds, func(k string) bool { return slices.Contains(localKinds, k) }) {
			continue
		}
		out = append(out, &cluster.Member{Id: md.ActorID, Host: md.ActorHost, Port: int32(md.ActorPort), Kinds: slices.Clone(md.Kinds)})
	}
	slices.SortFunc(out, func(a, b *cluster.Member) int { return strings.Compare(a.Id, b.Id) })
	return out
}

// Shutdown stops the publish loop and waits for it; with graceful it then
// leaves the membership (Membership.Leave, ProviderLeaveTimeout) so that
// the others record a graceful departure. It never shuts the Membership
// down (its owner does) and is idempotent: later calls return nil. Note
// that cluster.Shutdown(false) does not call it: call it yourself on a hard
// stop. Errors: Leave's.
func (p *Provider) Shutdown(graceful bool) error {
	p.mu.Lock()
	if p.mu.stopped {
		p.mu.Unlock()
		return nil
	}
	p.mu.stopped = true
	p.mu.Unlock()
	close(p.stopCh)
	p.wg.Wait()
	if !graceful {
		return nil
	}
	if err := p.ms.Leave(ProviderLeaveTimeout); err != nil && !errors.Is(err, ErrShutdown) {
		return fmt.Errorf("membership: provider leave: %w", err)
	}
	return nil
}
