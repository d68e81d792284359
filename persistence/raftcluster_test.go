package persistence

import (
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/stretchr/testify/require"

	"github.com/norsk-oss/norsk-manager/proto/internalpb"
)

// Real raft clusters (3 nodes in one process) over raft's InmemTransport,
// each node with its own Store, RaftStore and FileSnapshotStore.

// recordingFSM wraps RaftFSM and records what raft hands it.
type recordingFSM struct {
	*RaftFSM
	mu       sync.Mutex
	applied  []uint64 // command logs applied
	skipped  []uint64 // command logs skipped as replays
	restores int
}

func (r *recordingFSM) ApplyBatch(logs []*raft.Log) []any {
	resp := r.RaftFSM.ApplyBatch(logs)
	r.mu.Lock()
	defer r.mu.Unlock()
	for i, l := range logs {
		switch {
		case l.Type != raft.LogCommand:
		case resp[i] == nil:
			r.skipped = append(r.skipped, l.Index)
		default:
			r.applied = append(r.applied, l.Index)
		}
	}
	return resp
}

func (r *recordingFSM) Apply(l *raft.Log) any { return r.ApplyBatch([]*raft.Log{l})[0] }

func (r *recordingFSM) Restore(rc io.ReadCloser) error {
	r.mu.Lock()
	r.restores++
	r.mu.Unlock()
	return r.RaftFSM.Restore(rc)
}

func (r *recordingFSM) record() (applied, skipped []uint64, restores int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.applied), slices.Clone(r.skipped), r.restores
}

type testNode struct {
	id    raft.ServerID
	dir   string
	store *Store
	logs  *RaftStore
	snaps *raft.FileSnapshotStore
	trans *raft.InmemTransport
	fsm   *recordingFSM
	raft  *raft.Raft
}

type testCluster struct {
	t     *testing.T
	nodes []*testNode
	conf  func(*raft.Config)
}

// newTestCluster starts n bootstrapped raft nodes, each with its own
// Store, RaftStore and file snapshot store, over connected in-memory
// transports, and waits for a leader. conf adjusts each node's config.
func newTestCluster(t *testing.T, n int, conf func(*raft.Config)) *testCluster {
	c := &testCluster{t: t, conf: conf}
	var servers []raft.Server
	for i := range n {
		node := &testNode{id: raft.ServerID(fmt.Sprint("m", i)), dir: t.TempDir()}
		_, node.trans = raft.NewInmemTransport(raft.ServerAddress(node.id))
		c.nodes = append(c.nodes, node)
		servers = append(servers, raft.Server{ID: node.id, Address: node.trans.LocalAddr()})
	}
	c.connectAll()
	for _, node := range c.nodes {
		c.start(node)
		t.Cleanup(func() { c.stop(node) })
	}
	require.NoError(t, c.nodes[0].raft.BootstrapCluster(raft.Configuration{Servers: servers}).Error())
	c.leader()
	return c
}

func (c *testCluster) connectAll() {
	for _, a := range c.nodes {
		for _, b := range c.nodes {
			if a != b {
				a.trans.Connect(b.trans.LocalAddr(), b.trans)
			}
		}
	}
}

// start opens the node's stores and starts raft the way the manager does:
// NoSnapshotRestoreOnStart unless the store is behind raft's snapshot.
func (c *testCluster) start(node *testNode) {
	t := c.t
	var err error
	cfg := DefaultConfig(node.dir + "/data")
	cfg.SyncWrites, cfg.GCInterval = false, 0
	node.store, err = Open(cfg)
	require.NoError(t, err)
	node.logs, err = OpenRaftStore(RaftStoreConfig{Dir: node.dir + "/raft"})
	require.NoError(t, err)
	node.snaps, err = raft.NewFileSnapshotStoreWithLogger(node.dir+"/snapshots", 2, testHCLogger(t))
	require.NoError(t, err)
	node.fsm = &recordingFSM{RaftFSM: NewRaftFSM(node.store)}
	need, err := node.fsm.NeedsSnapshotRestore(node.snaps)
	require.NoError(t, err)

	rc := raft.DefaultConfig()
	rc.LocalID = node.id
	// Short for a quick test, but not so short that a -race build on a
	// loaded 2-core box misses heartbeats: at 50 ms the cluster changed
	// leader under load in the middle of a test that needs one leader
	// ("leadership lost while committing log"; CI red once). These are
	// raft's liveness settings, not waits of the test.
	rc.HeartbeatTimeout = 250 * time.Millisecond
	rc.ElectionTimeout = 250 * time.Millisecond
	rc.LeaderLeaseTimeout = 125 * time.Millisecond
	rc.CommitTimeout = 5 * time.Millisecond
	rc.SnapshotInterval = time.Hour // snapshots only when a test asks
	rc.NoSnapshotRestoreOnStart = !need
	rc.Logger = testHCLogger(t)
	if c.conf != nil {
		c.conf(rc)
	}
	node.raft, err = raft.NewRaft(rc, node.fsm, node.logs, node.logs, node.snaps, node.trans)
	require.NoError(t, err)
}

// stop shuts the node's raft down and closes its stores. Idempotent.
func (c *testCluster) stop(node *testNode) {
	if node.raft == nil {
		return
	}
	require.NoError(c.t, node.raft.Shutdown().Error())
	require.NoError(c.t, node.logs.Close())
	require.NoError(c.t, node.store.Close())
	node.raft = nil
}

// restart stops the node and starts it again on the same directories with
// a new transport at the same address.
func (c *testCluster) restart(node *testNode) {
	c.stop(node)
	_, node.trans = raft.NewInmemTransport(node.trans.LocalAddr())
	c.connectAll()
	c.start(node)
}

// isolate cuts the node off from the others, both ways; heal reconnects.
func (c *testCluster) isolate(node *testNode) {
	for _, o := range c.nodes {
		if o != node {
			o.trans.Disconnect(node.trans.LocalAddr())
			node.trans.Disconnect(o.trans.LocalAddr())
		}
	}
}

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t *testing.T, timeout time.Duration, cond func() bool, format string, args ...any) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting until "+format, append([]any{timeout}, args...)...)
		}
		<-tick.C
	}
}

// leader waits for a node to lead and returns it.
func (c *testCluster) leader(among ...*testNode) *testNode {
	if len(among) == 0 {
		among = c.nodes
	}
	var l *testNode
	waitFor(c.t, 10*time.Second, func() bool {
		for _, n := range among {
			if n.raft != nil && n.raft.State() == raft.Leader {
				l = n
				return true
			}
		}
		return false
	}, "there is a leader")
	return l
}

func (c *testCluster) followers(leader *testNode) []*testNode {
	var out []*testNode
	for _, n := range c.nodes {
		if n != leader {
			out = append(out, n)
		}
	}
	return out
}

// append applies one append through raft on the leader and returns its
// outcome; any raft error fails the test.
func (c *testCluster) append(cmd *internalpb.AppendCommand) CommandOutcome {
	c.t.Helper()
	o, err := c.tryAppend(cmd)
	require.NoError(c.t, err, "raft.Apply")
	return o
}

// tryAppend applies one append through raft on whichever node leads,
// retrying while there is none or it answers ErrNotLeader (the log was not
// appended), for up to 10 s. Safe to call from several goroutines while
// no node restarts.
func (c *testCluster) tryAppend(cmd *internalpb.AppendCommand) (CommandOutcome, error) {
	data, err := EncodeAppend(cmd)
	if err != nil {
		return CommandOutcome{}, err
	}
	deadline := time.Now().Add(10 * time.Second)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for time.Now().Before(deadline) {
		var leader *raft.Raft
		for _, n := range c.nodes {
			if n.raft != nil && n.raft.State() == raft.Leader {
				leader = n.raft
			}
		}
		if leader == nil {
			<-tick.C
			continue
		}
		f := leader.Apply(data, 5*time.Second)
		err := f.Error()
		if errors.Is(err, raft.ErrNotLeader) {
			continue
		}
		if err != nil {
			return CommandOutcome{}, err
		}
		resp, ok := f.Response().(*RaftApplyResponse)
		if !ok || len(resp.Results) != 1 {
			return CommandOutcome{}, fmt.Errorf("unexpected response %#v", f.Response())
		}
		return resp.Results[0], nil
	}
	return CommandOutcome{}, errors.New("no leader took the append within 10s")
}

// waitConverged waits until every running node's FSM has applied as far
// as the leader's and checks that all stores hold the same bytes.
func (c *testCluster) waitConverged() {
	c.t.Helper()
	leader := c.leader()
	// A barrier makes the leader's FSM apply everything committed.
	require.NoError(c.t, leader.raft.Barrier(5*time.Second).Error())
	want := leader.store.FSM().AppliedIndex()
	for _, n := range c.nodes {
		waitFor(c.t, 10*time.Second, func() bool { return n.store.FSM().AppliedIndex() >= want },
			"%s applied %d (has %d)", n.id, want, n.store.FSM().AppliedIndex())
	}
	ref := dumpStore(c.t, leader.store)
	for _, n := range c.followers(leader) {
		require.Equal(c.t, ref, dumpStore(c.t, n.store), "store of %s differs from the leader's", n.id)
		require.Equal(c.t, storeMetaOf(leader.store), storeMetaOf(n.store), "meta of %s", n.id)
	}
}

func TestRaftFSM_Cluster_Replicates(t *testing.T) {
	c := newTestCluster(t, 3, nil)

	// Concurrent writers, so that raft batches logs.
	const writers, perWriter = 8, 10
	var wg sync.WaitGroup
	type outcome struct {
		o   CommandOutcome
		err error
	}
	outcomes := make(chan outcome, writers*perWriter)
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			id := fmt.Sprint("w", w)
			for i := range perWriter {
				o, err := c.tryAppend(appendCmd(id, Seq(i), fmt.Sprint(id, "-", i)))
				outcomes <- outcome{o, err}
			}
		}()
	}
	wg.Wait()
	close(outcomes)
	var lastEvents []Index
	for o := range outcomes {
		require.NoError(t, o.err)
		require.NoError(t, o.o.Err)
		lastEvents = append(lastEvents, o.o.Result.LastEvent)
	}
	slices.Sort(lastEvents)
	for i, e := range lastEvents {
		require.Equal(t, Index(i+1), e, "every append got its own event index")
	}

	// A failed expected-sequence check is an outcome, not a raft error.
	o := c.append(appendCmd("w0", 3, "stale"))
	var ce *ConflictError
	require.ErrorAs(t, o.Err, &ce)
	require.Equal(t, Seq(perWriter), ce.Actual)
	// A retried request is answered as a duplicate.
	o = c.append(appendCmd("w0", 0, fmt.Sprint("w0-", perWriter-1)))
	require.NoError(t, o.Err)
	require.True(t, o.Result.Duplicate)

	c.waitConverged()
	for _, n := range c.nodes {
		_, head := n.store.EventBounds()
		require.Equal(t, Index(writers*perWriter), head, "%s event head", n.id)
		evs, err := n.store.ReadEvents(1, 1000)
		require.NoError(t, err)
		for i, ev := range evs {
			require.Equal(t, uint64(i+1), ev.GetEvent().GetLogIndex())
		}
	}
}

// TestRaftFSM_Cluster_FollowerRestart: a follower restarted on its stores
// (NoSnapshotRestoreOnStart) catches up; raft replays the logs after its
// last snapshot, which the FSM skips instead of applying twice.
func TestRaftFSM_Cluster_FollowerRestart(t *testing.T) {
	c := newTestCluster(t, 3, nil)
	for i := range 10 {
		require.NoError(t, c.append(appendCmd(fmt.Sprint("j", i), 0, "")).Err)
	}
	c.waitConverged()
	f := c.followers(c.leader())[0]
	// A snapshot on the follower: raft replays only the logs after it.
	require.NoError(t, f.raft.Snapshot().Error())
	for i := 10; i < 15; i++ {
		require.NoError(t, c.append(appendCmd(fmt.Sprint("j", i), 0, "")).Err)
	}
	c.waitConverged()

	appliedAtStart := f.store.FSM().AppliedIndex()
	c.stop(f)
	for i := 15; i < 25; i++ {
		require.NoError(t, c.append(appendCmd(fmt.Sprint("j", i), 0, "")).Err)
	}
	// Reopen the follower's stores: its FSM is where it stopped.
	c.restart(f)
	c.waitConverged()
	applied, skipped, restores := f.fsm.record()
	require.Zero(t, restores, "no snapshot restore at start (NoSnapshotRestoreOnStart)")
	require.Len(t, skipped, 5, "raft replays the 5 command logs after its snapshot")
	for _, idx := range skipped {
		require.LessOrEqual(t, idx, appliedAtStart, "only logs the store had applied are skipped")
	}
	require.NotEmpty(t, applied)
	for _, idx := range applied {
		require.Greater(t, idx, appliedAtStart, "logs the store had applied are never applied again")
	}
	require.Len(t, applied, 10, "the 10 appends made while it was down")
	for i := range 25 {
		_, seq, err := f.store.Load(JobKey(fmt.Sprint("j", i)))
		require.NoError(t, err)
		require.Equal(t, Seq(1), seq)
	}
}

// TestRaftFSM_Cluster_InstallSnapshot: a follower that fell behind the
// leader's compacted log gets the leader's snapshot and ends with the same
// content; appends then continue on it.
func TestRaftFSM_Cluster_InstallSnapshot(t *testing.T) {
	c := newTestCluster(t, 3, func(rc *raft.Config) {
		rc.SnapshotThreshold = 4
		rc.TrailingLogs = 2
	})
	for i := range 5 {
		require.NoError(t, c.append(appendCmd(fmt.Sprint("j", i), 0, "")).Err)
	}
	c.waitConverged()
	leader := c.leader()
	f := c.followers(leader)[0]
	c.isolate(f)
	for i := 5; i < 30; i++ {
		require.NoError(t, c.append(appendCmd(fmt.Sprint("j", i), 0, "")).Err)
	}
	leader = c.leader()
	require.NotEqual(t, f, leader)
	// Every other member compacts, not only the leader: when f rejoins, its
	// higher term can make the cluster elect again, and a new leader that
	// still had the logs would replay them to f instead of sending a
	// snapshot (CI red once under load).
	for _, m := range c.followers(f) {
		if err := m.raft.Snapshot().Error(); !errors.Is(err, raft.ErrNothingNewToSnapshot) {
			require.NoError(t, err)
		}
		first, err := m.logs.FirstIndex()
		require.NoError(t, err)
		require.Greater(t, first, f.store.FSM().AppliedIndex()+1, "%s compacted the logs the follower needs", m.id)
	}

	c.connectAll()
	c.waitConverged()
	_, _, restores := f.fsm.record()
	require.Equal(t, 1, restores, "the follower caught up from a snapshot")
	need, err := f.fsm.NeedsSnapshotRestore(f.snaps)
	require.NoError(t, err)
	require.False(t, need, "the restored store is at the snapshot")

	for i := range 5 {
		require.NoError(t, c.append(appendCmd(fmt.Sprint("j", i), 1, "")).Err)
	}
	c.waitConverged()
	_, seq, err := f.store.Load(JobKey("j0"))
	require.NoError(t, err)
	require.Equal(t, Seq(2), seq)
}
