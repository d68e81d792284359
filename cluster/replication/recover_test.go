package replication_test

import (
	"bytes"
	"fmt"
	"net"
	"path/filepath"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"

	"github.com/norsk-oss/norsk-manager/cluster/replication"
	"github.com/norsk-oss/norsk-manager/persistence"
	"github.com/norsk-oss/norsk-manager/proto/internalpb"
)

// dirNode is a manager's replication on a data dir that survives a stop,
// laid out as the agent lays it out (<dir>/store, <dir>/raft).
type dirNode struct {
	node
	dir   string
	rs    *persistence.RaftStore
	extra func() // stops what start started
}

func (c *testCluster) startDir(nd *dirNode) {
	t := c.t
	cfg := persistence.DefaultConfig(nd.dir)
	cfg.SyncWrites, cfg.GCInterval = false, 0
	store, err := persistence.Open(cfg)
	require.NoError(t, err)
	rs, err := persistence.OpenRaftStore(persistence.RaftStoreConfig{Dir: filepath.Join(nd.dir, "raft")})
	require.NoError(t, err)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	nd.api, nd.store, nd.rs = lis.Addr().String(), store, rs
	nd.rep, err = replication.New(replication.Config{
		Name: nd.name, BindAddr: nd.raft, Dir: filepath.Join(nd.dir, "raft"), Store: store, LogStore: rs, Forward: c.forward,
		HeartbeatTimeout: 300 * time.Millisecond, ElectionTimeout: 300 * time.Millisecond, LeaderLeaseTimeout: 200 * time.Millisecond,
	})
	require.NoError(t, err)
	nd.gs = grpc.NewServer()
	internalpb.RegisterClusterServer(nd.gs, &replication.Service{R: nd.rep})
	go nd.gs.Serve(lis)
	stopped := false
	nd.extra = func() {
		if stopped {
			return
		}
		stopped = true
		nd.gs.Stop()
		nd.rep.Shutdown()
		rs.Close()
		store.Close()
	}
	t.Cleanup(nd.extra)
	c.nodes = append(c.nodes, &nd.node)
}

// openOffline opens a stopped node's stores for an offline operation.
func openOffline(t *testing.T, dir string) (*persistence.Store, *persistence.RaftStore) {
	t.Helper()
	cfg := persistence.DefaultConfig(dir)
	cfg.GCInterval, cfg.Mode = 0, persistence.ModeUnchecked
	s, err := persistence.Open(cfg)
	require.NoError(t, err)
	rs, err := persistence.OpenRaftStore(persistence.DefaultRaftStoreConfig(filepath.Join(dir, "raft")))
	require.NoError(t, err)
	return s, rs
}

func raftServers(t *testing.T, r *raft.Raft) []raft.Server {
	t.Helper()
	f := r.GetConfiguration()
	require.NoError(t, f.Error())
	return f.Configuration().Servers
}

// TestRecover_SurvivorServesAloneWithAllData: of three managers two are
// lost for good; the third, whose store had fallen behind its own log
// (the entries were committed and in its log, not yet applied), is
// recovered offline into a cluster of one. It elects itself, holds every
// acknowledged write, restarted its event log, takes writes, and a fresh
// manager joins it and receives the data.
func TestRecover_SurvivorServesAloneWithAllData(t *testing.T) {
	c := &testCluster{t: t, conns: map[string]*grpc.ClientConn{}}
	t.Cleanup(func() {
		for _, cc := range c.conns {
			cc.Close()
		}
	})
	var nodes []*dirNode
	servers := map[string]string{}
	for i := range 3 {
		nd := &dirNode{node: node{name: fmt.Sprintf("m%d", i+1), raft: freeAddr(t)}, dir: t.TempDir()}
		servers[nd.name] = nd.raft
		nodes = append(nodes, nd)
		c.startDir(nd)
	}
	for _, nd := range nodes {
		require.NoError(t, nd.rep.Bootstrap(servers))
	}
	l := c.leader()
	const n = 60
	var behind []byte // a snapshot of the survivor's store halfway
	survivor := nodes[0]
	if &survivor.node == l {
		survivor = nodes[1]
	}
	for i := range n {
		_, err := l.rep.Journal().Append(ctx(t), persistence.JobKey(fmt.Sprintf("j%03d", i)), 0, change(fmt.Sprintf("v%d", i)))
		require.NoError(t, err)
		if i == n/2 {
			require.NoError(t, survivor.rep.Barrier(ctx(t)))
			var buf bytes.Buffer
			require.NoError(t, survivor.store.WriteSnapshot(&buf))
			behind = buf.Bytes()
		}
	}
	require.NoError(t, survivor.rep.Barrier(ctx(t)), "the survivor has every write in its log")
	for _, nd := range nodes {
		if nd != survivor {
			nd.extra()
		}
	}
	survivor.extra()

	store, rs := openOffline(t, survivor.dir)
	// Roll the store back to the halfway state: its log still holds the
	// rest, which recovery must apply.
	require.NoError(t, store.RestoreSnapshot(bytes.NewReader(behind)))
	_, err := replication.Recover(replication.RecoverConfig{Dir: filepath.Join(survivor.dir, "raft"), Name: "nobody", Store: store, LogStore: rs})
	require.ErrorContains(t, err, `"nobody" is not a server of the cluster's last configuration (`)
	res, err := replication.Recover(replication.RecoverConfig{Dir: filepath.Join(survivor.dir, "raft"), Name: survivor.name, Store: store, LogStore: rs, EventSkip: 5000})
	require.NoError(t, err)
	require.Len(t, res.Previous, 3)
	require.Equal(t, survivor.raft, res.Addr, "the address of the last configuration is kept")
	require.Greater(t, res.AppliedAfter, res.AppliedBefore, "the unapplied entries of its log were applied")
	require.NotZero(t, res.EventBase)
	require.NoError(t, rs.Close())
	require.NoError(t, store.Close())

	c.nodes = nil
	again := &dirNode{node: node{name: survivor.name, raft: survivor.raft}, dir: survivor.dir}
	c.startDir(again)
	l = c.leader()
	require.Equal(t, again.name, l.name)
	require.Equal(t, []raft.Server{{Suffrage: raft.Voter, ID: raft.ServerID(again.name), Address: raft.ServerAddress(again.raft)}}, raftServers(t, again.rep.Raft()))
	for i := range n {
		b, _, err := again.rep.Journal().Load(ctx(t), persistence.JobKey(fmt.Sprintf("j%03d", i)))
		require.NoError(t, err, "j%03d", i)
		require.Equal(t, fmt.Sprintf("v%d", i), desc(t, b))
	}
	first, head := again.store.EventBounds()
	require.Equal(t, res.EventBase, head)
	require.Equal(t, res.EventBase+1, first)
	_, err = again.rep.Journal().Append(ctx(t), persistence.JobKey("after"), 0, change("after"))
	require.NoError(t, err)

	joiner := &dirNode{node: node{name: "m4", raft: freeAddr(t)}, dir: t.TempDir()}
	c.startDir(joiner)
	require.NoError(t, again.rep.Raft().AddVoter("m4", raft.ServerAddress(joiner.raft), 0, 10*time.Second).Error())
	for _, key := range []string{"j000", fmt.Sprintf("j%03d", n-1), "after"} {
		_, _, err := joiner.rep.Journal().Load(ctx(t), persistence.JobKey(key))
		require.NoError(t, err, "%s on the joiner", key)
	}
	base, err := joiner.store.EventLogBase()
	require.NoError(t, err)
	require.Equal(t, res.EventBase, base, "the joiner received the restarted event log")
}

// TestSeed_RestoredStoreStartsAOneManagerCluster: a store seeded with the
// Raft state of a new cluster starts as its leader at the store's applied
// index (no bootstrap), applies new writes above it, and a joiner
// receives its state.
func TestSeed_RestoredStoreStartsAOneManagerCluster(t *testing.T) {
	dir := t.TempDir()
	cfg := persistence.DefaultConfig(dir)
	cfg.SyncWrites, cfg.GCInterval = false, 0
	s, err := persistence.Open(cfg)
	require.NoError(t, err)
	log := persistence.NewLocalLog(s)
	for i := range 5 {
		_, err := log.Append(ctx(t), persistence.JobKey(fmt.Sprintf("j%d", i)), 0, change("seeded"))
		require.NoError(t, err)
	}
	require.NoError(t, log.Close())
	applied := s.FSM().AppliedIndex()
	raftAddr := freeAddr(t)
	seed := replication.SeedConfig{Dir: filepath.Join(dir, "raft"), Name: "r1", Addr: raftAddr, Store: s}
	require.NoError(t, replication.Seed(seed))
	require.ErrorContains(t, replication.Seed(seed), "already holds Raft state")
	require.NoError(t, s.Close())

	c := &testCluster{t: t, conns: map[string]*grpc.ClientConn{}}
	t.Cleanup(func() {
		for _, cc := range c.conns {
			cc.Close()
		}
	})
	r1 := &dirNode{node: node{name: "r1", raft: raftAddr}, dir: dir}
	c.startDir(r1)
	require.True(t, r1.rep.HasState(), "no bootstrap needed")
	require.Equal(t, "r1", c.leader().name)
	require.Equal(t, applied, r1.rep.AppliedIndex())
	res, err := r1.rep.Journal().Append(ctx(t), persistence.JobKey("j0"), 1, change("after"))
	require.NoError(t, err)
	require.Equal(t, persistence.Seq(2), res.Seq)
	require.Greater(t, r1.rep.AppliedIndex(), applied)

	joiner := &dirNode{node: node{name: "r2", raft: freeAddr(t)}, dir: t.TempDir()}
	c.startDir(joiner)
	require.NoError(t, r1.rep.Raft().AddVoter("r2", raft.ServerAddress(joiner.raft), 0, 10*time.Second).Error())
	b, _, err := joiner.rep.Journal().Load(ctx(t), persistence.JobKey("j4"))
	require.NoError(t, err)
	require.Equal(t, "seeded", desc(t, b))
}
