package replication_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"

	"github.com/norsk-oss/norsk-manager/cluster/replication"
	"github.com/norsk-oss/norsk-manager/persistence"
	"github.com/norsk-oss/norsk-manager/proto/commonpb"
	"github.com/norsk-oss/norsk-manager/proto/internalpb"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
	"github.com/norsk-oss/norsk-manager/test/testproc"
)

// node is one in-process manager's replication: store, Raft node and the
// internal Cluster service on a loopback gRPC server.
type node struct {
	name  string
	raft  string
	api   string
	rep   *replication.Replicator
	store *persistence.Store
	gs    *grpc.Server
}

// testCluster is three Replicators on loopback that forward to each other
// through their internal services.
type testCluster struct {
	t     *testing.T
	nodes []*node
	mu    sync.Mutex
	conns map[string]*grpc.ClientConn
	// tls, if set, gives each manager (by name) its Raft TLS (tls_test.go).
	tls func(name string) *replication.PeerTLS
	// frozen names the managers whose internal service never answers a
	// read index (frozen_test.go); guarded by mu.
	frozen map[string]chan<- struct{}
}

// freeAddr returns a loopback address free a moment ago, outside the
// kernel's ephemeral port range (testproc.FreePort says why).
func freeAddr(t *testing.T) string { return testproc.Addr(testproc.FreePort(t)) }

func newTestCluster(t *testing.T, n int) *testCluster { return newTestClusterTLS(t, n, nil) }

// newTestClusterTLS is newTestCluster with the Raft TLS of tlsFor (nil:
// plain TCP).
func newTestClusterTLS(t *testing.T, n int, tlsFor func(name string) *replication.PeerTLS) *testCluster {
	c := &testCluster{t: t, conns: map[string]*grpc.ClientConn{}, tls: tlsFor}
	t.Cleanup(func() {
		for _, cc := range c.conns {
			cc.Close()
		}
	})
	servers := map[string]string{}
	for i := range n {
		nd := &node{name: fmt.Sprintf("m%d", i+1), raft: freeAddr(t)}
		servers[nd.name] = nd.raft
		c.nodes = append(c.nodes, nd)
	}
	for _, nd := range c.nodes {
		c.start(nd)
	}
	for _, nd := range c.nodes {
		require.NoError(t, nd.rep.Bootstrap(servers))
	}
	c.leader()
	return c
}

// start opens nd's stores and starts its Raft node and internal service
// (no bootstrap). Small snapshot settings make compaction happen in tests.
func (c *testCluster) start(nd *node) {
	t := c.t
	cfg := persistence.DefaultConfig(t.TempDir())
	cfg.SyncWrites, cfg.GCInterval = false, 0
	store, err := persistence.Open(cfg)
	require.NoError(t, err)
	rs, err := persistence.OpenRaftStore(persistence.RaftStoreConfig{Dir: t.TempDir()})
	require.NoError(t, err)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	nd.api, nd.store = lis.Addr().String(), store
	nd.rep, err = replication.New(replication.Config{
		Name: nd.name, BindAddr: nd.raft, Dir: t.TempDir(), Store: store, LogStore: rs, Forward: c.forward,
		HeartbeatTimeout: 300 * time.Millisecond, ElectionTimeout: 300 * time.Millisecond, LeaderLeaseTimeout: 200 * time.Millisecond,
		SnapshotThreshold: 64, TrailingLogs: 16, TLS: c.peerTLS(nd.name),
	})
	require.NoError(t, err)
	nd.gs = grpc.NewServer()
	internalpb.RegisterClusterServer(nd.gs, &replication.Service{R: nd.rep})
	go nd.gs.Serve(lis)
	t.Cleanup(func() {
		nd.gs.Stop()
		nd.rep.Shutdown()
		rs.Close()
		store.Close()
	})
}

func (c *testCluster) peerTLS(name string) *replication.PeerTLS {
	if c.tls == nil {
		return nil
	}
	return c.tls(name)
}

func (c *testCluster) forward(_ context.Context, name string) (internalpb.ClusterClient, error) {
	for _, nd := range c.nodes {
		if nd.name != name {
			continue
		}
		c.mu.Lock()
		defer c.mu.Unlock()
		if entered, ok := c.frozen[name]; ok {
			return frozenClient{entered: entered}, nil
		}
		cc, ok := c.conns[nd.api]
		if !ok {
			var err error
			if cc, err = grpc.NewClient(nd.api, grpc.WithTransportCredentials(insecure.NewCredentials())); err != nil {
				return nil, err
			}
			c.conns[nd.api] = cc
		}
		return internalpb.NewClusterClient(cc), nil
	}
	return nil, fmt.Errorf("no manager %q", name)
}

// leader waits for a leader that can serve read indexes and returns it.
func (c *testCluster) leader() *node {
	c.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		for _, nd := range c.nodes {
			if _, err := nd.rep.LocalReadIndex(ctx(c.t)); err == nil {
				return nd
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	c.t.Fatal("no ready leader within 20s")
	return nil
}

func (c *testCluster) followers() []*node {
	l := c.leader()
	var out []*node
	for _, nd := range c.nodes {
		if nd != l {
			out = append(out, nd)
		}
	}
	return out
}

// change is an append of a job record whose description is desc.
func change(desc string) persistence.Change {
	b, err := proto.Marshal(&internalpb.JobRecord{Job: &managerpb.JobWithHistory{Job: &managerpb.Job{
		JobId: &commonpb.JobId{JobId: "j"}, Description: desc}}})
	if err != nil {
		panic(err)
	}
	return persistence.Change{Record: b, At: time.Unix(1_800_000_000, 0)}
}

// desc decodes the description of a stored job record.
func desc(t *testing.T, b []byte) string {
	t.Helper()
	rec := &internalpb.JobRecord{}
	require.NoError(t, proto.Unmarshal(b, rec))
	return rec.GetJob().GetJob().GetDescription()
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return c
}

// TestReplication_FollowerAppendIsReadEverywhere: an append through a
// follower is forwarded to the leader, acknowledged only once applied on
// that follower, and readable on every manager after a Barrier.
func TestReplication_FollowerAppendIsReadEverywhere(t *testing.T) {
	c := newTestCluster(t, 3)
	f := c.followers()[0]
	res, err := f.rep.Journal().Append(ctx(t), persistence.JobKey("j"), 0, change("v1"))
	require.NoError(t, err)
	require.Equal(t, persistence.Seq(1), res.Seq)
	// Acknowledged means applied here, without a barrier.
	b, seq, err := f.store.Load(persistence.JobKey("j"))
	require.NoError(t, err)
	require.Equal(t, "v1", desc(t, b))
	require.Equal(t, persistence.Seq(1), seq)
	for _, nd := range c.nodes {
		b, seq, err := nd.rep.Journal().Load(ctx(t), persistence.JobKey("j"))
		require.NoError(t, err, nd.name)
		require.Equal(t, "v1", desc(t, b), nd.name)
		require.Equal(t, persistence.Seq(1), seq, nd.name)
	}
}

// TestReplication_TwoWritersOnOneSeq: two activations of one entity on two
// different managers that both loaded seq 1 race their appends. Exactly one
// commits; the other gets a conflict, and every manager ends with the
// winner's record.
func TestReplication_TwoWritersOnOneSeq(t *testing.T) {
	c := newTestCluster(t, 3)
	key := persistence.JobKey("j")
	_, err := c.nodes[0].rep.Journal().Append(ctx(t), key, 0, change("v1"))
	require.NoError(t, err)
	for round := range 20 {
		expected := persistence.Seq(round + 1)
		var wg sync.WaitGroup
		errs := make([]error, 2)
		writers := []*node{c.nodes[1], c.nodes[2]}
		if round%2 == 1 {
			writers = []*node{c.leader(), c.followers()[0]}
		}
		for i, w := range writers {
			wg.Go(func() {
				_, errs[i] = w.rep.Journal().Append(ctx(t), key, expected, change(fmt.Sprintf("r%d-%s", round, w.name)))
			})
		}
		wg.Wait()
		var ok, conflicts int
		winner := ""
		for i, err := range errs {
			switch {
			case err == nil:
				ok++
				winner = fmt.Sprintf("r%d-%s", round, writers[i].name)
			case errors.Is(err, persistence.ErrSeqConflict):
				conflicts++
			default:
				t.Fatalf("round %d: %s: unexpected error %v", round, writers[i].name, err)
			}
		}
		require.Equal(t, 1, ok, "round %d: exactly one writer commits", round)
		require.Equal(t, 1, conflicts, "round %d: the other gets a conflict", round)
		for _, nd := range c.nodes {
			b, seq, err := nd.rep.Journal().Load(ctx(t), key)
			require.NoError(t, err)
			require.Equal(t, winner, desc(t, b), "round %d on %s", round, nd.name)
			require.Equal(t, expected+1, seq)
		}
	}
}

// TestReplication_RetriedRequestIsAnsweredOnce: an append retried with the
// same request id (a client retry after an unknown outcome) is answered as
// a duplicate, not applied twice.
func TestReplication_RetriedRequestIsAnsweredOnce(t *testing.T) {
	c := newTestCluster(t, 3)
	f := c.followers()[0]
	key := persistence.JobKey("j")
	// As a grain does, the record remembers the request ids it carries.
	b, err := proto.Marshal(&internalpb.JobRecord{RecentRequests: []string{"req-1"},
		Job: &managerpb.JobWithHistory{Job: &managerpb.Job{JobId: &commonpb.JobId{JobId: "j"}, Description: "v1"}}})
	require.NoError(t, err)
	ch := persistence.Change{RequestID: "req-1", Record: b, At: time.Unix(1_800_000_000, 0)}
	r1, err := f.rep.Journal().Append(ctx(t), key, 0, ch)
	require.NoError(t, err)
	r2, err := c.leader().rep.Journal().Append(ctx(t), key, 0, ch)
	require.NoError(t, err)
	require.True(t, r2.Duplicate)
	require.Equal(t, r1.Seq, r2.Seq)
	_, seq, err := c.leader().rep.Journal().Load(ctx(t), key)
	require.NoError(t, err)
	require.Equal(t, persistence.Seq(1), seq)
}

// TestReplication_NoQuorumNoCommit: with two of three Raft nodes shut
// down, the survivor cannot commit or serve a read: both fail with
// ErrNoLeader within the caller's deadline instead of succeeding.
func TestReplication_NoQuorumNoCommit(t *testing.T) {
	c := newTestCluster(t, 3)
	survivor := c.followers()[0]
	for _, nd := range c.nodes {
		if nd != survivor {
			require.NoError(t, nd.rep.Shutdown())
		}
	}
	short, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	_, err := survivor.rep.Journal().Append(short, persistence.JobKey("j"), 0, change("v1"))
	require.Error(t, err, "a lone manager must not acknowledge a write")
	require.ErrorIs(t, survivor.rep.Barrier(short), replication.ErrNoLeader)
	_, _, err = survivor.store.Load(persistence.JobKey("j"))
	require.ErrorIs(t, err, persistence.ErrNotFound, "nothing was applied")
}

// TestReplication_LeaderLoss: after the leader stops, the two survivors
// elect a new leader, keep every acknowledged write and accept new ones
// through either of them.
func TestReplication_LeaderLoss(t *testing.T) {
	c := newTestCluster(t, 3)
	key := persistence.JobKey("j")
	_, err := c.followers()[0].rep.Journal().Append(ctx(t), key, 0, change("v1"))
	require.NoError(t, err)
	old := c.leader()
	old.gs.Stop()
	require.NoError(t, old.rep.Shutdown())
	var survivors []*node
	for _, nd := range c.nodes {
		if nd != old {
			survivors = append(survivors, nd)
		}
	}
	c.nodes = survivors
	nl := c.leader()
	require.NotEqual(t, old.name, nl.name)
	for i, nd := range survivors {
		b, seq, err := nd.rep.Journal().Load(ctx(t), key)
		require.NoError(t, err)
		require.Equal(t, "v1", desc(t, b), "an acknowledged write survives the leader")
		_, err = nd.rep.Journal().Append(ctx(t), persistence.JobKey(fmt.Sprintf("k%d", i)), 0, change("after"))
		require.NoError(t, err, "write through %s after failover", nd.name)
		require.Equal(t, persistence.Seq(1), seq)
	}
}

// TestReplication_JoinerCatchesUpFromSnapshot: a manager added after the
// log was compacted receives the leader's snapshot (the store's keys) and
// then the log; it ends with every record and the same applied state.
func TestReplication_JoinerCatchesUpFromSnapshot(t *testing.T) {
	c := newTestCluster(t, 3)
	l := c.leader()
	const n = 200
	for i := range n {
		_, err := l.rep.Journal().Append(ctx(t), persistence.JobKey(fmt.Sprintf("j%03d", i)), 0, change(fmt.Sprintf("v%d", i)))
		require.NoError(t, err)
	}
	require.NoError(t, l.rep.Raft().Snapshot().Error())

	joiner := &node{name: "m4", raft: freeAddr(t)}
	c.start(joiner)
	c.nodes = append(c.nodes, joiner)
	// Under load the leader may change during the writes (an election
	// timeout on a starved CPU): add the voter through whoever leads now.
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := c.leader().rep.Raft().AddVoter("m4", raft.ServerAddress(joiner.raft), 0, 10*time.Second).Error()
		if err == nil {
			break
		}
		if !errors.Is(err, raft.ErrNotLeader) && !errors.Is(err, raft.ErrLeadershipLost) || time.Now().After(deadline) {
			require.NoError(t, err, "AddVoter m4")
		}
	}
	// Its first read (a barrier through the leader) sees everything.
	for i := range n {
		b, _, err := joiner.rep.Journal().Load(ctx(t), persistence.JobKey(fmt.Sprintf("j%03d", i)))
		require.NoError(t, err, "j%03d on the joiner", i)
		require.Equal(t, fmt.Sprintf("v%d", i), desc(t, b))
	}
	// No write since: the same applied index, once the joiner has applied
	// the leader's last entry (a new leader's no-op, if there was an
	// election, may still be on its way).
	require.Eventually(t, func() bool { return c.leader().rep.AppliedIndex() == joiner.rep.AppliedIndex() }, 20*time.Second, 10*time.Millisecond,
		"the joiner reaches the leader's applied index")
	require.NotEqual(t, "0", joiner.rep.Raft().Stats()["last_snapshot_index"], "the joiner was sent a snapshot, not the whole log")
	// And it takes part in writes.
	_, err := joiner.rep.Journal().Append(ctx(t), persistence.JobKey("late"), 0, change("late"))
	require.NoError(t, err)
}
