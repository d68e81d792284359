package gateway

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/norsk-oss/norsk-manager/persistence"
	"github.com/norsk-oss/norsk-manager/proto/commonpb"
	"github.com/norsk-oss/norsk-manager/proto/internalpb"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
)

// poolServer is a gateway over a real store and LocalLog (pools need no
// grain).
func poolServer(t *testing.T) (*Server, *persistence.Store, *persistence.LocalLog) {
	t.Helper()
	store, log := persistence.TestStore(t)
	return New(Config{Store: store, Journal: log}), store, log
}

func testPool(name string, tiers ...string) *managerpb.Pool {
	p := &managerpb.Pool{Name: name}
	for _, tier := range tiers {
		p.Tiers = append(p.Tiers, &managerpb.PoolTier{Name: tier, NodeSelector: map[string]string{"tier": tier}})
	}
	return p
}

// poolEvents returns the pool events of the log as "updated:NAME@VERSION"
// and "deleted:NAME".
func poolEvents(t *testing.T, store *persistence.Store) []string {
	t.Helper()
	evs, err := store.ReadEvents(1, 1000)
	require.NoError(t, err)
	var out []string
	for _, e := range evs {
		switch x := e.GetEvent().GetEvent().(type) {
		case *managerpb.EventStreamEvent_PoolUpdated:
			out = append(out, fmt.Sprintf("%s@%d", x.PoolUpdated.GetPool().GetName(), x.PoolUpdated.GetPool().GetVersion()))
		case *managerpb.EventStreamEvent_PoolDeleted:
			out = append(out, "deleted:"+x.PoolDeleted.GetName().GetName())
		}
	}
	return out
}

func requireCode(t *testing.T, err error, code codes.Code, contains string) {
	t.Helper()
	require.Equal(t, code, status.Code(err), "%v", err)
	require.Contains(t, status.Convert(err).Message(), contains)
}

// TestServer_Pools_Lifecycle: create, get (with version and the default
// ceiling), list, update with the current version, a stale version
// refused naming the current one, a no-op update writing nothing, delete,
// and every refusal leaves the store as it was.
func TestServer_Pools_Lifecycle(t *testing.T) {
	ctx := context.Background()
	s, store, _ := poolServer(t)

	_, err := s.CreatePool(ctx, testPool("live", "cheap", "cloud"))
	require.NoError(t, err)
	_, err = s.CreatePool(ctx, testPool("live", "other"))
	requireCode(t, err, codes.AlreadyExists, `pool "live" already exists`)
	_, err = s.CreatePool(ctx, &managerpb.Pool{Name: "bad"})
	requireCode(t, err, codes.InvalidArgument, "pool.tiers:")

	got, err := s.GetPool(ctx, &managerpb.PoolName{Name: "live"})
	require.NoError(t, err)
	require.EqualValues(t, 1, got.GetVersion())
	require.Equal(t, []string{"cheap", "cloud"}, []string{got.GetTiers()[0].GetName(), got.GetTiers()[1].GetName()})
	require.True(t, proto.Equal(&managerpb.RestartCeiling{MaxFailures: 5, WindowSeconds: 600}, got.GetRestartCeiling()))

	upd := proto.Clone(got).(*managerpb.Pool)
	upd.Tiers[1].MaxNodes = 4
	_, err = s.UpdatePool(ctx, upd)
	require.NoError(t, err)
	_, err = s.UpdatePool(ctx, upd)
	requireCode(t, err, codes.FailedPrecondition, "is at version 2, not 1")
	upd.Version = 0
	_, err = s.UpdatePool(ctx, upd)
	requireCode(t, err, codes.InvalidArgument, "pool.version:")
	_, err = s.UpdatePool(ctx, testPool("nope", "a"))
	requireCode(t, err, codes.InvalidArgument, "pool.version:")
	missing := testPool("nope", "a")
	missing.Version = 1
	_, err = s.UpdatePool(ctx, missing)
	requireCode(t, err, codes.NotFound, `pool "nope" not found`)

	cur, err := s.GetPool(ctx, &managerpb.PoolName{Name: "live"})
	require.NoError(t, err)
	require.EqualValues(t, 2, cur.GetVersion())
	require.EqualValues(t, 4, cur.GetTiers()[1].GetMaxNodes())
	_, err = s.UpdatePool(ctx, cur)
	require.NoError(t, err, "an update that changes nothing")

	_, err = s.CreatePool(ctx, testPool("archive", "any"))
	require.NoError(t, err)
	list, err := s.ListPools(ctx, &managerpb.ListPoolsRequest{})
	require.NoError(t, err)
	require.Len(t, list.GetPools(), 2)
	require.Equal(t, "archive", list.GetPools()[0].GetName())
	require.EqualValues(t, 2, list.GetPools()[1].GetVersion(), "the no-op update kept the version")
	_, head := store.EventBounds()
	require.EqualValues(t, head, list.GetLogIndex())

	_, err = s.DeletePool(ctx, &managerpb.PoolName{Name: "live"})
	require.NoError(t, err)
	_, err = s.GetPool(ctx, &managerpb.PoolName{Name: "live"})
	requireCode(t, err, codes.NotFound, `pool "live" not found`)
	_, err = s.DeletePool(ctx, &managerpb.PoolName{Name: "live"})
	requireCode(t, err, codes.NotFound, `pool "live" not found`)
	_, err = s.DeletePool(ctx, &managerpb.PoolName{Name: "a b"})
	requireCode(t, err, codes.InvalidArgument, "name:")
	_, err = s.UpdatePool(ctx, cur)
	requireCode(t, err, codes.NotFound, "not found")

	// Re-created: a version of the deleted pool is never valid again.
	_, err = s.CreatePool(ctx, testPool("live", "cheap"))
	require.NoError(t, err)
	again, err := s.GetPool(ctx, &managerpb.PoolName{Name: "live"})
	require.NoError(t, err)
	require.EqualValues(t, 4, again.GetVersion())
	_, err = s.UpdatePool(ctx, cur)
	requireCode(t, err, codes.FailedPrecondition, "is at version 4, not 2")

	require.Equal(t, []string{"live@1", "live@2", "archive@1", "deleted:live", "live@4"}, poolEvents(t, store))
}

// TestServer_Pools_ConcurrentUpdates: of many updates carrying the same
// version, exactly one is applied; the others are refused as stale.
func TestServer_Pools_ConcurrentUpdates(t *testing.T) {
	ctx := context.Background()
	s, store, _ := poolServer(t)
	_, err := s.CreatePool(ctx, testPool("p", "a"))
	require.NoError(t, err)
	const n = 8
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p := testPool("p", "a")
			p.Version = 1
			p.Tiers[0].MaxNodes = uint32(i + 1)
			_, errs[i] = s.UpdatePool(ctx, p)
		}()
	}
	wg.Wait()
	ok := 0
	for _, err := range errs {
		if err == nil {
			ok++
			continue
		}
		requireCode(t, err, codes.FailedPrecondition, "is at version 2, not 1")
	}
	require.Equal(t, 1, ok, "%v", errs)
	require.Equal(t, []string{"p@1", "p@2"}, poolEvents(t, store))
}

// TestServer_DeletePool_InUse: a pool named by a live bundle (as its pool
// or its backup pool) or by the pool tag of an auto-placed job that is not
// completed cannot be deleted; a DELETING bundle, a job without
// auto_placement and a completed job do not hold it.
func TestServer_DeletePool_InUse(t *testing.T) {
	ctx := context.Background()
	s, store, log := poolServer(t)
	for _, name := range []string{"prim", "backup", "tagged", "free"} {
		_, err := s.CreatePool(ctx, testPool(name, "a"))
		require.NoError(t, err)
	}
	put := func(key persistence.EntityKey, m proto.Message) {
		b, err := proto.Marshal(m)
		require.NoError(t, err)
		_, err = log.Append(ctx, key, 0, persistence.Change{Record: b})
		require.NoError(t, err)
	}
	bundle := func(id, pool, backup string, state managerpb.BundleState) {
		b := &managerpb.Bundle{BundleId: &managerpb.BundleId{BundleId: id}, Pool: pool, State: state}
		if backup != "" {
			b.ResiliencePolicy = &managerpb.ResiliencePolicy{Pool: backup}
		}
		put(persistence.BundleKey(id), &internalpb.BundleRecord{Bundle: b})
	}
	job := func(id, pool string, auto bool, state managerpb.Job_JobState) {
		j := &managerpb.Job{JobId: &commonpb.JobId{JobId: id}, Tags: map[string]string{PoolTag: pool}, State: state}
		if auto {
			j.AutoPlacement = &managerpb.AutoPlacement{}
		}
		put(persistence.JobKey(id), &internalpb.JobRecord{Job: &managerpb.JobWithHistory{Job: j}})
	}
	bundle("b1", "prim", "backup", managerpb.BundleState_BUNDLE_STATE_LIVE)
	bundle("b2", "prim", "", managerpb.BundleState_BUNDLE_STATE_LIVE)
	bundle("gone", "free", "free", managerpb.BundleState_BUNDLE_STATE_DELETING)
	job("j1", "tagged", true, managerpb.Job_ACTIVE)
	job("manual", "free", false, managerpb.Job_ACTIVE)
	job("done", "free", true, managerpb.Job_POST)
	_, headBefore := store.EventBounds()

	_, err := s.DeletePool(ctx, &managerpb.PoolName{Name: "prim"})
	requireCode(t, err, codes.FailedPrecondition, `pool "prim" is in use by bundles b1, b2`)
	_, err = s.DeletePool(ctx, &managerpb.PoolName{Name: "backup"})
	requireCode(t, err, codes.FailedPrecondition, "bundles b1")
	_, err = s.DeletePool(ctx, &managerpb.PoolName{Name: "tagged"})
	requireCode(t, err, codes.FailedPrecondition, "auto-placed jobs j1 (tag pool=tagged)")
	_, headAfter := store.EventBounds()
	require.Equal(t, headBefore, headAfter, "a refused delete writes nothing")

	_, err = s.DeletePool(ctx, &managerpb.PoolName{Name: "free"})
	require.NoError(t, err)
	list, err := s.ListPools(ctx, &managerpb.ListPoolsRequest{})
	require.NoError(t, err)
	var names []string
	for _, p := range list.GetPools() {
		names = append(names, p.GetName())
	}
	require.Equal(t, "backup prim tagged", strings.Join(names, " "))
}

// TestServer_Pools_NoJournal: a gateway without a journal refuses pool
// writes instead of crashing.
func TestServer_Pools_NoJournal(t *testing.T) {
	store, _ := persistence.TestStore(t)
	s := New(Config{Store: store})
	_, err := s.CreatePool(context.Background(), testPool("p", "a"))
	require.Equal(t, codes.Unimplemented, status.Code(err), "%v", err)
}

func TestShortList(t *testing.T) {
	require.Equal(t, "a, b", shortList([]string{"a", "b"}))
	require.Equal(t, "1, 2, 3, 4, 5 and 2 more", shortList([]string{"1", "2", "3", "4", "5", "6", "7"}))
}
