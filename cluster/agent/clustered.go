package agent

import (
	"context"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/cluster"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/norsk-oss/norsk-manager/actors"
	"github.com/norsk-oss/norsk-manager/actors/reconcile"
	ncluster "github.com/norsk-oss/norsk-manager/cluster"
	"github.com/norsk-oss/norsk-manager/cluster/grains"
	"github.com/norsk-oss/norsk-manager/cluster/membership"
	"github.com/norsk-oss/norsk-manager/cluster/replication"
	"github.com/norsk-oss/norsk-manager/persistence"
	"github.com/norsk-oss/norsk-manager/proto/internalpb"
)

// ClusterConfig configures the HA cluster of a manager (docs/design/ha.md).
// A manager is part of a cluster when Join or BootstrapExpect is set.
type ClusterConfig struct {
	// Name is this manager's unique name in the cluster (Raft server id,
	// gossip name). Required in a cluster.
	Name string
	// GossipAddr is the memberlist bind address (host:port).
	GossipAddr string
	// ClusterAddr is the protoactor remote (grain traffic) bind address.
	ClusterAddr string
	// RaftAddr is the Raft transport bind address.
	RaftAddr string
	// Advertise is the host other managers use to reach this one (default:
	// the host of each bind address).
	Advertise string
	// Join lists gossip addresses of other managers, retried until one
	// answers.
	Join []string
	// BootstrapExpect forms a new cluster once this many managers (this one
	// included) see each other. 0: join an existing cluster only.
	BootstrapExpect int
	// GossipKey encrypts gossip (16, 24 or 32 bytes); nil: plaintext.
	GossipKey []byte
	// DeadServerTimeout: a manager dead (not left) this long is removed
	// from the Raft voters. Default 5 minutes.
	DeadServerTimeout time.Duration
	// LocalTimings uses loopback/LAN-test timings for gossip and Raft
	// (faster failure detection; tests and --dev clusters).
	LocalTimings bool
}

// Enabled reports whether the manager is part of a cluster.
func (c ClusterConfig) Enabled() bool { return len(c.Join) > 0 || c.BootstrapExpect > 0 }

func (c ClusterConfig) validate() error {
	if !c.Enabled() {
		return nil
	}
	switch {
	case c.Name == "":
		return errors.New("cluster: --name is required in a cluster")
	case c.GossipAddr == "" || c.ClusterAddr == "" || c.RaftAddr == "":
		return errors.New("cluster: --gossip-addr, --cluster-addr and --raft-addr are required in a cluster")
	case c.BootstrapExpect < 0:
		return fmt.Errorf("cluster: --bootstrap-expect %d must be 0 or more", c.BootstrapExpect)
	}
	for flag, addr := range map[string]string{"--gossip-addr": c.GossipAddr, "--cluster-addr": c.ClusterAddr, "--raft-addr": c.RaftAddr} {
		if _, _, err := net.SplitHostPort(addr); err != nil {
			return fmt.Errorf("cluster: %s %q: want host:port: %w", flag, addr, err)
		}
	}
	if k := len(c.GossipKey); k != 0 && k != 16 && k != 24 && k != 32 {
		return fmt.Errorf("cluster: --gossip-key is %d bytes; it must be 16, 24 or 32", k)
	}
	return nil
}

// advertised returns addr with its host replaced by Advertise (if set).
func (c ClusterConfig) advertised(addr string) string {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return addr
	}
	if c.Advertise != "" {
		host = c.Advertise
	}
	return net.JoinHostPort(host, port)
}

// clustered is the HA part of an agent.
type clustered struct {
	a         *Agent
	raftStore *persistence.RaftStore
	members   *membership.Membership
	rep       *replication.Replicator
	// kinds are the grain kinds every actor layer hosts.
	kinds []actors.Kind
	// router is what the rest of the manager holds: the current actor
	// layer's router, replaced on a rejoin.
	router *grains.Switch

	mu      sync.Mutex
	clients map[string]*grpc.ClientConn // API address → connection; guarded by mu
	actor   *actorLayer                 // the current actor layer; guarded by mu

	// fatal receives at most one error that must stop the manager (Err).
	fatal chan error
	// stopConflicts stops watchNameConflicts, which closes conflictsDone.
	stopConflicts chan struct{}
	conflictsDone chan struct{}
	// conflicted is set when another live manager holds this one's name:
	// shutdown then skips the gossip leave.
	conflicted atomic.Bool
}

// initCluster builds membership, Raft and the protoactor cluster.
func (a *Agent) initCluster(router *lateRouter) error {
	cc := a.cfg.Cluster
	c := &clustered{a: a, clients: map[string]*grpc.ClientConn{}}
	var err error
	c.raftStore, err = persistence.OpenRaftStore(persistence.RaftStoreConfig{
		Dir: filepath.Join(a.cfg.Store.Dir, "raft"), SyncWrites: a.cfg.Store.SyncWrites, Logger: a.log.With("component", "raft-store")})
	if err != nil {
		return err
	}
	mcfg := membership.DefaultConfig()
	if cc.LocalTimings {
		mcfg = membership.LocalConfig()
		// One host or a fast test network: detect a dead manager in about
		// a second and a half rather than several.
		mcfg.ProbeInterval, mcfg.ProbeTimeout, mcfg.SuspicionMult = 500*time.Millisecond, 200*time.Millisecond, 2
	} else {
		// memberlist's LAN profile is tuned for thousands of Consul agents;
		// managers are a handful on one network. Probing every 500 ms
		// (250 ms timeout; LAN round trips are well under a millisecond)
		// with the LAN suspicion multiplier 4 declares a dead manager
		// after about 2.5-3.5 s instead of 5-6 s, and that is when its
		// grains and worker sessions move (the session-failover target
		// is 5 s). Each member sends two probes a second.
		mcfg.ProbeInterval, mcfg.ProbeTimeout = 500*time.Millisecond, 250*time.Millisecond
	}
	mcfg.Name, mcfg.BindAddr, mcfg.Join, mcfg.GossipKey = cc.Name, cc.GossipAddr, cc.Join, cc.GossipKey
	if cc.Advertise != "" {
		mcfg.Advertise = cc.advertised(cc.GossipAddr)
	}
	mcfg.Meta = membership.Meta{Name: cc.Name, APIAddr: cc.advertised(a.lis.Addr().String()), RaftAddr: cc.advertised(cc.RaftAddr), Version: a.cfg.Version}
	// Gossip's and Raft's errors about their sockets closing during a
	// graceful stop are debug (quietOnStop).
	mcfg.Logger = newQuietOnStop(a.log.With("component", "gossip"), &a.stopping)
	// Bind the gossip port but join only once every other listener (API
	// and metrics in New, Raft and the actor remote below) is bound: a
	// manager that cannot start must never appear to the others, or the
	// leader could take it for a new voter.
	mcfg.DeferJoin = true
	if c.members, err = membership.New(mcfg); err != nil {
		c.raftStore.Close()
		return err
	}
	rcfg := replication.Config{
		Name: cc.Name, BindAddr: cc.RaftAddr, Advertise: cc.advertised(cc.RaftAddr), Dir: filepath.Join(a.cfg.Store.Dir, "raft"),
		Store: a.store, LogStore: c.raftStore, Forward: c.forward, TLS: a.cfg.TLS.raftTLS(), Logger: newQuietOnStop(a.log.With("component", "replication"), &a.stopping),
	}
	if cc.LocalTimings {
		rcfg.HeartbeatTimeout, rcfg.ElectionTimeout, rcfg.LeaderLeaseTimeout = 300*time.Millisecond, 300*time.Millisecond, 200*time.Millisecond
	}
	if c.rep, err = replication.New(rcfg); err != nil {
		c.members.Shutdown()
		c.raftStore.Close()
		return err
	}
	a.journal = timedJournal{Journal: c.rep.Journal(), hist: a.metrics.applySecs}
	c.router = grains.NewSwitch()
	router.Router = c.router
	c.kinds = a.kinds(router, c.rep.Barrier)
	if c.actor, err = c.startActorLayer(a.system); err != nil {
		c.abort()
		return err
	}
	c.router.Set(c.actor.router)
	a.router = c.router
	a.cl = c
	c.fatal = make(chan error, 1)
	c.stopConflicts = make(chan struct{})
	c.conflictsDone = make(chan struct{})
	go c.watchNameConflicts()
	c.members.StartJoin()
	return nil
}

// Err returns a channel that receives an error when the manager cannot go
// on and must stop (exit non-zero): another manager already uses its
// --name. Nil (never ready) for a single manager.
func (a *Agent) Err() <-chan error {
	if a.cl == nil {
		return nil
	}
	return a.cl.fatal
}

// watchNameConflicts handles memberlist's name conflicts about this
// manager: another live member with its --name at another address. A
// manager that has not joined yet (it is not a Raft voter at its own Raft
// address) is the newcomer and stops with an error; an established voter
// keeps its place and only logs.
func (c *clustered) watchNameConflicts() {
	defer close(c.conflictsDone)
	for {
		var nc membership.NameConflict
		select {
		case <-c.stopConflicts:
			return
		case nc = <-c.members.NameConflicts():
		}
		// Probe its Raft address (Raft's transport drops an empty
		// connection silently; memberlist would log an error).
		probe := nc.TheirMeta.RaftAddr
		if probe == "" {
			probe = nc.Theirs
		}
		if !answers(probe) {
			// A crashed incarnation of this manager that the others have
			// not declared dead yet: memberlist accepts the new address
			// once it is (DeadNodeReclaimTime); the join loop retries.
			c.a.log.Warn("this manager's name is still held by an address that does not answer (an earlier incarnation?); waiting for the others to release it",
				"name", nc.Name, "addr", nc.Mine, "other_addr", nc.Theirs)
			continue
		}
		if c.isVoterHere() {
			c.a.log.Error("another manager uses this manager's name; this one is the Raft voter of that name and stays: --name must be unique",
				"name", nc.Name, "addr", nc.Mine, "other_addr", nc.Theirs, "other_raft_addr", nc.TheirMeta.RaftAddr)
			continue
		}
		err := fmt.Errorf("cluster: a live manager at %s already uses --name %q (this manager: %s): --name must be unique", nc.Theirs, nc.Name, nc.Mine)
		c.a.log.Error("another live manager uses this manager's name; stopping: --name must be unique",
			"name", nc.Name, "addr", nc.Mine, "other_addr", nc.Theirs, "other_raft_addr", nc.TheirMeta.RaftAddr)
		// Leaving the gossip would announce that a manager of this name
		// left: the others hold the live one under it.
		c.conflicted.Store(true)
		select {
		case c.fatal <- err:
		default:
		}
		return
	}
}

// answers reports whether addr accepts a TCP connection within a second.
func answers(addr string) bool {
	conn, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return false
	}
	_ = conn.Close()
	return true
}

// isVoterHere reports whether the Raft configuration this manager knows
// has it as a server at its own advertised Raft address.
func (c *clustered) isVoterHere() bool {
	cc := c.a.cfg.Cluster
	f := c.rep.Raft().GetConfiguration()
	if f.Error() != nil {
		return false
	}
	for _, s := range f.Configuration().Servers {
		if string(s.ID) == cc.Name && string(s.Address) == cc.advertised(cc.RaftAddr) {
			return true
		}
	}
	return false
}

// startMember runs protoactor's StartMember, which panics on errors.
func startMember(c *cluster.Cluster) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("cluster: start actor cluster member: %v", r)
		}
	}()
	c.StartMember()
	return nil
}

func splitPort(addr string) (string, int, error) {
	host, p, err := net.SplitHostPort(addr)
	if err != nil {
		return "", 0, err
	}
	port, err := strconv.Atoi(p)
	return host, port, err
}

// abort releases what initCluster built before failing.
func (c *clustered) abort() {
	if c.rep != nil {
		_ = c.rep.Shutdown()
	}
	if c.members != nil {
		_ = c.members.Shutdown()
	}
	if c.raftStore != nil {
		_ = c.raftStore.Close()
	}
}

// registerServices adds the internal Cluster service to the API server.
func (c *clustered) registerServices(gs *grpc.Server) {
	internalpb.RegisterClusterServer(gs, &replication.Service{R: c.rep, StatusFunc: c.status, LivenessFunc: c.localLiveness})
}

// startCluster runs bootstrap, leadership duties and health tracking.
func (a *Agent) startCluster(ctx context.Context) {
	c := a.cl
	cc := a.cfg.Cluster
	if cc.BootstrapExpect > 0 && !c.rep.HasState() {
		a.wg.Add(1)
		go func() {
			defer a.wg.Done()
			c.bootstrap(ctx, cc.BootstrapExpect)
		}()
	}
	rc := reconcile.Config{Store: a.store, Router: a.router, Logger: a.log}
	a.wg.Add(1)
	go func() {
		defer a.wg.Done()
		ncluster.RunLeadership(ctx, ncluster.LeaderConfig{
			Replicator: c.rep, Membership: c.members, DeadServerTimeout: cc.DeadServerTimeout, Logger: a.log.With("component", "leader"),
			Reachable: c.peerReachable(),
			Singletons: func(ctx context.Context) {
				var wg sync.WaitGroup
				wg.Add(1)
				go func() {
					defer wg.Done()
					a.runPlacement(ctx)
				}()
				_ = reconcile.RunActivator(ctx, rc)
				wg.Wait()
			},
			OnMembershipChange: func(ctx context.Context) {
				// Place grains on the new topology before waking them: a
				// request to a departed owner waits out protoactor's 5 s
				// activation timeout.
				c.layer().provider.Refresh()
				if err := reconcile.Revive(ctx, rc); err != nil {
					a.log.Warn("revive grains", "error", err)
				}
				// Once more after the topology settled: when a manager
				// joins, the grains it now owns are stopped on their old
				// owners only when those publish the new topology, after
				// the wake above reached the old activations; nothing else
				// would wake them on the new owner until their workers
				// register again.
				select {
				case <-ctx.Done():
					return
				case <-time.After(reviveSettle):
				}
				c.layer().provider.Refresh()
				if err := reconcile.Revive(ctx, rc); err != nil {
					a.log.Warn("revive grains after the topology settled", "error", err)
				}
			},
		})
	}()
	a.setServing(false)
	a.wg.Add(1)
	go func() {
		defer a.wg.Done()
		c.trackHealth(ctx)
	}()
	a.wg.Add(1)
	go func() {
		defer a.wg.Done()
		c.watchFencing(ctx)
	}()
}

// reviveSettle is how long after a membership change the leader revives
// the grains a second time: every manager has published the new topology
// to protoactor by then (membership.PublishInterval) and stopped the
// activations it no longer owns.
const reviveSettle = 3 * membership.PublishInterval

// bootstrap waits until expect managers see each other and forms the
// cluster with them (the same set on each: the first expect by name).
func (c *clustered) bootstrap(ctx context.Context, expect int) {
	log := c.a.log.With("component", "bootstrap")
	log.Info("waiting for managers to bootstrap the cluster", "expect", expect)
	every := 10 * time.Second
	if c.a.cfg.Cluster.LocalTimings {
		every = 2 * time.Second
	}
	for {
		wctx, cancel := context.WithTimeout(ctx, every)
		err := c.members.WaitForMembers(wctx, expect)
		cancel()
		if err == nil {
			break
		}
		if ctx.Err() != nil || errors.Is(err, membership.ErrShutdown) {
			return
		}
		var have []string
		for _, m := range c.members.Members() {
			if m.State == membership.MemberAlive {
				have = append(have, m.Name)
			}
		}
		log.Info(fmt.Sprintf("waiting for managers to bootstrap: have %d of %d: %s", len(have), expect, strings.Join(have, ", ")),
			"have", len(have), "expect", expect)
	}
	servers := c.bootstrapServers(expect)
	for c.rep.TLS() && !c.peersAnswer(servers) {
		// A member in the set whose Raft port refuses mutual TLS (a
		// process without a certificate of the CA that has the gossip
		// key) must not become a founding voter; leaving it out here
		// could make managers bootstrap different sets. Wait instead.
		log.Warn("a manager among the first by name refuses mutual tls on its raft port: not bootstrapping with it; retrying", "servers", servers)
		select {
		case <-ctx.Done():
			return
		case <-time.After(every):
		}
		servers = c.bootstrapServers(expect)
	}
	if _, ok := servers[c.a.cfg.Cluster.Name]; !ok {
		log.Info("not among the first managers by name; waiting to be added by the leader")
		return
	}
	if err := c.rep.Bootstrap(servers); err != nil {
		log.Error("bootstrap the cluster", "error", err)
		return
	}
	log.Info("cluster bootstrapped", "servers", len(servers))
}

// bootstrapServers returns the first expect members by name that have a
// Raft address (name → address).
func (c *clustered) bootstrapServers(expect int) map[string]string {
	ms := c.members.Members()
	sort.Slice(ms, func(i, j int) bool { return ms[i].Name < ms[j].Name })
	servers := map[string]string{}
	for _, m := range ms {
		if m.Meta.RaftAddr != "" && len(servers) < expect {
			servers[m.Name] = m.Meta.RaftAddr
		}
	}
	return servers
}

// trackHealth keeps the health service in step with leadership: SERVING
// while a leader is known.
func (c *clustered) trackHealth(ctx context.Context) {
	t := time.NewTicker(250 * time.Millisecond)
	defer t.Stop()
	serving := false
	for {
		ok := c.rep.Leader() != ""
		if ok != serving {
			serving = ok
			c.a.setServing(ok)
			c.a.log.Info("cluster leadership", "leader", c.rep.Leader(), "serving", ok)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// forward returns the internal Cluster client of the named manager.
func (c *clustered) forward(ctx context.Context, name string) (internalpb.ClusterClient, error) {
	for _, m := range c.members.Members() {
		if m.Name == name && m.Meta.APIAddr != "" {
			conn, err := c.conn(m.Meta.APIAddr)
			if err != nil {
				return nil, err
			}
			return internalpb.NewClusterClient(conn), nil
		}
	}
	return nil, fmt.Errorf("cluster: manager %q is not in the membership", name)
}

func (c *clustered) conn(addr string) (*grpc.ClientConn, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if cc, ok := c.clients[addr]; ok {
		return cc, nil
	}
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(c.a.cfg.TLS.managerCreds()))
	if err != nil {
		return nil, err
	}
	c.clients[addr] = cc
	return cc, nil
}

// status answers Cluster/Status: this manager's own view.
func (c *clustered) status(context.Context) (*internalpb.ManagerStatus, error) {
	r := c.rep.Raft()
	cc := c.a.cfg.Cluster
	st := &internalpb.ManagerStatus{
		Name: cc.Name, ApiAddr: cc.advertised(c.a.lis.Addr().String()), RaftAddr: cc.advertised(cc.RaftAddr), GossipAddr: cc.advertised(cc.GossipAddr),
		RaftState: lower(r.State().String()), Term: r.CurrentTerm(), AppliedIndex: c.rep.AppliedIndex(), CommitIndex: r.CommitIndex(),
		LastLogIndex: r.LastIndex(), Leader: c.rep.Leader(), Version: c.a.cfg.Version,
	}
	if lc := r.LastContact(); !lc.IsZero() && !c.rep.IsLeader() {
		st.LastContact = timestamppb.New(lc)
	}
	if f := r.GetConfiguration(); f.Error() == nil {
		for _, s := range f.Configuration().Servers {
			if string(s.ID) == cc.Name {
				st.Voter = s.Suffrage.String() == "Voter"
			}
		}
	}
	return st, nil
}

// localLiveness answers Cluster/Liveness: the sessions of the node grains
// this manager hosts.
func (c *clustered) localLiveness(context.Context) *internalpb.LivenessReply {
	reply := &internalpb.LivenessReply{}
	for id, l := range c.a.live.Snapshot() {
		nl := &internalpb.NodeLive{NodeId: id, Connected: l.Connected, CpuBusy: l.CPUBusy, MemoryUsedMib: l.MemoryUsedMiB,
			RuntimeConditions: l.RuntimeConditions}
		if !l.LastSeen.IsZero() {
			nl.LastSeen = timestamppb.New(l.LastSeen)
		}
		reply.Nodes = append(reply.Nodes, nl)
	}
	return reply
}

// liveView merges the liveness of every manager's node grains: a node is
// connected if any manager has its session up; last seen is the latest.
// Managers that do not answer within a second are left out.
func (a *Agent) liveView(ctx context.Context) map[string]actors.NodeLiveness {
	c := a.cl
	out := a.live.Snapshot()
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, m := range c.members.Members() {
		if m.Name == a.cfg.Cluster.Name {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			lctx, cancel := context.WithTimeout(ctx, time.Second)
			defer cancel()
			cl, err := c.forward(lctx, m.Name)
			if err != nil {
				return
			}
			reply, err := cl.Liveness(lctx, &internalpb.LivenessRequest{})
			if err != nil {
				return
			}
			mu.Lock()
			defer mu.Unlock()
			for _, n := range reply.GetNodes() {
				cur := out[n.GetNodeId()]
				seen := n.GetLastSeen().AsTime()
				if n.GetLastSeen() == nil {
					seen = time.Time{}
				}
				if n.GetConnected() || seen.After(cur.LastSeen) {
					conds := n.GetRuntimeConditions()
					if !n.GetConnected() && cur.Connected {
						conds = cur.RuntimeConditions // the session's, not a closed one's
					}
					out[n.GetNodeId()] = actors.NodeLiveness{Connected: n.GetConnected() || cur.Connected,
						LastSeen: latest(seen, cur.LastSeen), CPUBusy: n.GetCpuBusy(), MemoryUsedMiB: n.GetMemoryUsedMib(),
						RuntimeConditions: conds}
				}
			}
		}()
	}
	wg.Wait()
	return out
}

func latest(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// handOff transfers Raft leadership to another voter if this manager
// leads (a graceful stop). Best effort: a failure only means the others
// elect a leader after their election timeout.
func (c *clustered) handOff() {
	if !c.rep.IsLeader() {
		return
	}
	start := time.Now()
	if err := c.rep.Raft().LeadershipTransfer().Error(); err != nil {
		c.a.log.Warn("leadership transfer before stopping failed; the others will elect a leader", "error", err)
		return
	}
	// The new leader's name may not be known here yet (its first
	// heartbeat is still on the way).
	c.a.log.Info("leadership transferred before stopping", "took", time.Since(start).Round(time.Millisecond))
}

// shutdown leaves the cluster: the actor cluster member, Raft, gossip.
func (c *clustered) shutdown() {
	close(c.stopConflicts)
	<-c.conflictsDone
	l := c.layer()
	c.router.Suspend()
	l.router.Stop()
	l.cluster.Shutdown(false)
	logErr := func(what string, err error) {
		if err != nil {
			c.a.log.Warn(what+" failed while stopping", "error", err)
		}
	}
	logErr("stopping the cluster provider", l.provider.Shutdown(false))
	logErr("stopping raft", c.rep.Shutdown())
	if !c.conflicted.Load() {
		// A failed leave is not an error worth more than a line: the
		// others declare this manager failed instead, and the leader
		// removes it after --dead-server-timeout.
		logErr("leaving the gossip", c.members.Leave(2*time.Second))
	}
	logErr("stopping the gossip", c.members.Shutdown())
	c.mu.Lock()
	for _, cc := range c.clients {
		cc.Close()
	}
	c.mu.Unlock()
	// The Raft log is synced on every write; a close error still means
	// badger could not finish its own bookkeeping, which an operator
	// should see.
	if err := c.raftStore.Close(); err != nil {
		c.a.log.Error("closing the raft store failed", "error", err)
	}
}

func lower(s string) string {
	b := []byte(s)
	for i, ch := range b {
		if 'A' <= ch && ch <= 'Z' {
			b[i] = ch + 'a' - 'A'
		}
	}
	return string(b)
}
