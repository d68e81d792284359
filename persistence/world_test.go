package persistence

import (
	"bytes"
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	"github.com/norsk-oss/norsk-manager/proto/commonpb"
	"github.com/norsk-oss/norsk-manager/proto/internalpb"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
)

// worldJob is a job record with the given state, auto placement, terminal
// verdict and instance count.
func worldJob(id string, state managerpb.Job_JobState, auto, terminal bool, instances int) *internalpb.JobRecord {
	j := &managerpb.Job{JobId: &commonpb.JobId{JobId: id}, State: state}
	if auto {
		j.AutoPlacement = &managerpb.AutoPlacement{}
	}
	if terminal {
		j.TerminalState = &managerpb.TerminalState{}
	}
	rec := &internalpb.JobRecord{Job: &managerpb.JobWithHistory{Job: j}}
	for i := range instances {
		rec.Instances = append(rec.Instances, &internalpb.Instance{Role: fmt.Sprintf("r%d", i), NodeId: "n1"})
	}
	return rec
}

// worldContent is what a World snapshot holds, by "kind/id" → seq and the
// record's bytes (deterministic marshalling).
func worldContent(t *testing.T, w *World) map[string]string {
	t.Helper()
	r, err := w.Read()
	require.NoError(t, err)
	out := map[string]string{}
	add := func(kind, id string, seq Seq, m proto.Message) error {
		b, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
		out[kind+"/"+id] = fmt.Sprintf("%d:%x", seq, b)
		return err
	}
	require.NoError(t, r.Nodes(func(n *internalpb.NodeRecord, seq Seq) error { return add(KindNode, n.GetNodeId(), seq, n) }))
	require.NoError(t, r.PlacementPools(func(p *internalpb.PoolRecord, seq Seq) error {
		return add(KindPlacementPool, p.GetPool().GetName(), seq, p)
	}))
	require.NoError(t, r.PlacementJobs(func(j *internalpb.JobRecord, seq Seq) error {
		return add(KindJob, j.GetJob().GetJob().GetJobId().GetJobId(), seq, j)
	}))
	return out
}

// storeContent is worldContent computed from the store's records (the
// truth the World mirrors).
func storeContent(t *testing.T, s *Store) map[string]string {
	t.Helper()
	out := map[string]string{}
	add := func(kind, id string, seq Seq, m proto.Message) error {
		b, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
		out[kind+"/"+id] = fmt.Sprintf("%d:%x", seq, b)
		return err
	}
	require.NoError(t, s.View(func(r *Reader) error {
		if err := r.entitiesSeq(KindNode, func() proto.Message { return &internalpb.NodeRecord{} }, func(m proto.Message, seq Seq) error {
			return add(KindNode, m.(*internalpb.NodeRecord).GetNodeId(), seq, m)
		}); err != nil {
			return err
		}
		if err := r.PlacementPools(func(p *internalpb.PoolRecord, seq Seq) error {
			return add(KindPlacementPool, p.GetPool().GetName(), seq, p)
		}); err != nil {
			return err
		}
		return r.JobsSeq(func(j *internalpb.JobRecord, seq Seq) error {
			if !PlacementRelevant(j) {
				return nil
			}
			return add(KindJob, j.GetJob().GetJob().GetJobId().GetJobId(), seq, j)
		})
	}))
	return out
}

// TestWorld_FollowsAppliesAndRebuilds: the World holds exactly the store's
// node and pool records and its placement-relevant job records, with
// their sequences, after creates, updates, deletes, a conflict and a
// duplicate; a snapshot taken before an apply does not see it; a reopened
// store and a restored snapshot rebuild the same content; JobExists and
// Bundle answer for records the job index leaves out.
func TestWorld_FollowsAppliesAndRebuilds(t *testing.T) {
	ctx := context.Background()
	cfg := DefaultConfig(t.TempDir())
	cfg.SyncWrites, cfg.GCInterval = false, 0
	s, err := Open(cfg)
	require.NoError(t, err)
	l := NewLocalLog(s)
	put := func(key EntityKey, expect Seq, m proto.Message, rid string) (AppendResult, error) {
		return l.Append(ctx, key, expect, Change{Record: mustMarshal(t, m), RequestID: rid})
	}
	jobs := []struct {
		id       string
		rec      *internalpb.JobRecord
		relevant bool
	}{
		{"a-pending", worldJob("a-pending", managerpb.Job_ACTIVE, true, false, 0), true},
		{"b-pre", worldJob("b-pre", managerpb.Job_PRE, true, false, 0), true},
		{"c-manual-running", worldJob("c-manual-running", managerpb.Job_ACTIVE, false, false, 1), true},
		{"d-manual-idle", worldJob("d-manual-idle", managerpb.Job_ACTIVE, false, false, 0), false},
		{"e-failed", worldJob("e-failed", managerpb.Job_ACTIVE, true, true, 0), false},
		{"f-completed", worldJob("f-completed", managerpb.Job_POST, true, false, 0), false},
		{"g-failed-still-running", worldJob("g-failed-still-running", managerpb.Job_ACTIVE, true, true, 1), true},
	}
	for _, j := range jobs {
		require.Equal(t, j.relevant, PlacementRelevant(j.rec), j.id)
		_, err := put(JobKey(j.id), 0, j.rec, "create-"+j.id)
		require.NoError(t, err)
	}
	_, err = put(NodeKey("n1"), 0, &internalpb.NodeRecord{NodeId: "n1"}, "")
	require.NoError(t, err)
	_, err = l.Append(ctx, PlacementPoolKey("live"), 0, Change{Record: poolRecord(t, "live", "cheap")})
	require.NoError(t, err)
	_, err = put(BundleKey("b1"), 0, &internalpb.BundleRecord{}, "")
	require.NoError(t, err)
	require.Equal(t, storeContent(t, s), worldContent(t, s.World()))

	before, err := s.World().Read()
	require.NoError(t, err)
	// The pending job is placed (still relevant), the completed one is
	// revived (now relevant), the running manual job stops (now not), a
	// node is deleted; a conflict and a duplicate change nothing.
	placed := worldJob("a-pending", managerpb.Job_ACTIVE, true, false, 1)
	placed.RecentRequests = []string{"place"}
	_, err = put(JobKey("a-pending"), 1, placed, "place")
	require.NoError(t, err)
	_, err = put(JobKey("f-completed"), 1, worldJob("f-completed", managerpb.Job_ACTIVE, true, false, 0), "revive")
	require.NoError(t, err)
	_, err = put(JobKey("c-manual-running"), 1, worldJob("c-manual-running", managerpb.Job_ACTIVE, false, false, 0), "stop")
	require.NoError(t, err)
	_, err = put(JobKey("b-pre"), 0, worldJob("b-pre", managerpb.Job_POST, true, false, 0), "stale")
	require.Error(t, err, "a write expecting an old sequence is a conflict")
	res, err := put(JobKey("a-pending"), 1, worldJob("a-pending", managerpb.Job_POST, true, false, 0), "place")
	require.NoError(t, err)
	require.True(t, res.Duplicate)
	_, err = l.Append(ctx, NodeKey("n1"), 1, Change{Delete: true})
	require.NoError(t, err)
	want := storeContent(t, s)
	require.Equal(t, want, worldContent(t, s.World()))
	require.NotContains(t, want, "node/n1")
	require.Contains(t, want, "job/f-completed")
	require.NotContains(t, want, "job/c-manual-running")

	var old []string
	require.NoError(t, before.PlacementJobs(func(j *internalpb.JobRecord, seq Seq) error {
		old = append(old, fmt.Sprintf("%s@%d", j.GetJob().GetJob().GetJobId().GetJobId(), seq))
		return nil
	}))
	require.Equal(t, []string{"a-pending@1", "b-pre@1", "c-manual-running@1", "g-failed-still-running@1"}, old,
		"a snapshot keeps what it saw, in job-id order")

	now, err := s.World().Read()
	require.NoError(t, err)
	require.True(t, now.JobExists("d-manual-idle"), "a job the placement index leaves out still exists")
	require.False(t, now.JobExists("nope"))
	_, seq, err := now.Bundle("b1")
	require.NoError(t, err)
	require.Equal(t, Seq(1), seq)
	_, _, err = now.Bundle("b2")
	require.ErrorIs(t, err, ErrNotFound)

	var snap bytes.Buffer
	require.NoError(t, s.WriteSnapshot(&snap))
	l.Close()
	require.NoError(t, s.Close())

	// Reopened: rebuilt from the records.
	s, err = Open(cfg)
	require.NoError(t, err)
	require.Equal(t, want, worldContent(t, s.World()))
	require.NoError(t, s.Close())

	// Restored into a store that held something else.
	other, ol := TestStore(t)
	_, err = ol.Append(ctx, JobKey("zzz"), 0, Change{Record: mustMarshal(t, worldJob("zzz", managerpb.Job_ACTIVE, true, false, 0))})
	require.NoError(t, err)
	require.NoError(t, other.RestoreSnapshot(&snap))
	require.Equal(t, want, worldContent(t, other.World()))
	r, err := other.World().Read()
	require.NoError(t, err)
	require.False(t, r.JobExists("zzz"), "the restore replaced the store's records, and so the World's")
}

// TestWorld_ReadSince: the change log gives a reader the keys changed
// since its count — relevant jobs, jobs that stopped being relevant, nodes
// — and not jobs that never mattered; a reader behind a rebuild, or
// further behind than the log keeps, is told to read everything.
func TestWorld_ReadSince(t *testing.T) {
	w, err := newWorld()
	require.NoError(t, err)
	put := func(key EntityKey, rec record) {
		w.take([]worldChange{{key: key, seq: 1, rec: rec}})
	}
	_, g0, _, all, err := w.ReadSince(0)
	require.NoError(t, err)
	require.False(t, all)
	gen0, _ := w.Changed()
	require.Equal(t, gen0, g0)

	put(JobKey("manual"), worldJob("manual", managerpb.Job_ACTIVE, false, false, 0)) // never mattered
	put(JobKey("auto"), worldJob("auto", managerpb.Job_ACTIVE, true, false, 0))
	put(NodeKey("n1"), &internalpb.NodeRecord{NodeId: "n1"})
	_, g1, keys, all, err := w.ReadSince(g0)
	require.NoError(t, err)
	require.False(t, all)
	require.Equal(t, []EntityKey{JobKey("auto"), NodeKey("n1")}, keys)

	put(JobKey("auto"), worldJob("auto", managerpb.Job_POST, true, false, 0)) // stopped mattering
	r, _, keys, _, err := w.ReadSince(g1)
	require.NoError(t, err)
	require.Equal(t, []EntityKey{JobKey("auto")}, keys)
	_, _, ok := r.PlacementJob("auto")
	require.False(t, ok)
	require.True(t, r.JobExists("auto"))

	for i := range worldLogMax + 10 {
		put(JobKey(fmt.Sprintf("j%d", i)), worldJob("x", managerpb.Job_ACTIVE, true, false, 0))
	}
	_, _, _, all, err = w.ReadSince(g1)
	require.NoError(t, err)
	require.True(t, all, "a reader further behind than the log keeps reads everything")
	_, g2, _, _, err := w.ReadSince(g1)
	require.NoError(t, err)
	_, _, keys, all, err = w.ReadSince(g2 - 1)
	require.NoError(t, err)
	require.False(t, all)
	require.Len(t, keys, 1)
}
