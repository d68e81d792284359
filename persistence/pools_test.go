package persistence

import (
	"bytes"
	"context"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	"github.com/norsk-oss/norsk-manager/proto/internalpb"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
)

func poolRecord(t testing.TB, name string, tiers ...string) []byte {
	t.Helper()
	p := &managerpb.Pool{Name: name, RestartCeiling: &managerpb.RestartCeiling{MaxFailures: 5, WindowSeconds: 600}}
	for _, tier := range tiers {
		p.Tiers = append(p.Tiers, &managerpb.PoolTier{Name: tier, NodeSelector: map[string]string{"tier": tier}})
	}
	b, err := proto.Marshal(&internalpb.PoolRecord{Pool: p})
	require.NoError(t, err)
	return b
}

type poolSeen struct {
	Name  string
	Tiers int
	Seq   Seq
}

func listPools(t testing.TB, s *Store) []poolSeen {
	t.Helper()
	var out []poolSeen
	require.NoError(t, s.View(func(r *Reader) error {
		return r.PlacementPools(func(rec *internalpb.PoolRecord, seq Seq) error {
			out = append(out, poolSeen{rec.GetPool().GetName(), len(rec.GetPool().GetTiers()), seq})
			return nil
		})
	}))
	return out
}

// TestStore_PlacementPools_RoundTrip: pools are stored under their own
// kind (a pool named "mock" does not touch the mock provider's URL pool),
// listed in name order with their sequences, and a deleted pool leaves a
// tombstone whose sequence a re-creation must expect.
func TestStore_PlacementPools_RoundTrip(t *testing.T) {
	ctx := context.Background()
	s, l := TestStore(t)
	_, err := l.Append(ctx, MockPoolKey, 0, Change{Record: mustMarshal(t, &internalpb.MockPoolRecord{Next: 3})})
	require.NoError(t, err)
	_, err = l.Append(ctx, PlacementPoolKey("mock"), 0, Change{Record: poolRecord(t, "mock", "cheap")})
	require.NoError(t, err)
	_, err = l.Append(ctx, PlacementPoolKey("live"), 0, Change{Record: poolRecord(t, "live", "cheap", "cloud")})
	require.NoError(t, err)
	_, err = l.Append(ctx, PlacementPoolKey("live"), 1, Change{Record: poolRecord(t, "live", "cheap", "mid", "cloud")})
	require.NoError(t, err)
	require.Equal(t, []poolSeen{{"live", 3, 2}, {"mock", 1, 1}}, listPools(t, s))

	require.NoError(t, s.View(func(r *Reader) error {
		rec, seq, err := r.PlacementPool("live")
		require.NoError(t, err)
		require.EqualValues(t, 2, seq)
		require.Equal(t, "mid", rec.GetPool().GetTiers()[1].GetName())
		mp := &internalpb.MockPoolRecord{}
		_, err = r.entity(MockPoolKey, mp)
		require.NoError(t, err)
		require.EqualValues(t, 3, mp.GetNext(), "the mock URL pool is untouched")
		return nil
	}))

	_, err = l.Append(ctx, PlacementPoolKey("live"), 1, Change{Delete: true})
	require.ErrorIs(t, err, ErrSeqConflict, "a delete at a stale sequence is refused")
	_, err = l.Append(ctx, PlacementPoolKey("live"), 2, Change{Delete: true})
	require.NoError(t, err)
	require.Equal(t, []poolSeen{{"mock", 1, 1}}, listPools(t, s))
	require.NoError(t, s.View(func(r *Reader) error {
		_, seq, err := r.PlacementPool("live")
		require.ErrorIs(t, err, ErrNotFound)
		require.EqualValues(t, 3, seq, "the tombstone's sequence")
		return nil
	}))
	_, err = l.Append(ctx, PlacementPoolKey("live"), 0, Change{Record: poolRecord(t, "live", "cheap")})
	require.ErrorIs(t, err, ErrSeqConflict, "a re-creation must expect the tombstone")
	res, err := l.Append(ctx, PlacementPoolKey("live"), 3, Change{Record: poolRecord(t, "live", "cheap")})
	require.NoError(t, err)
	require.EqualValues(t, 4, res.Seq, "versions are never reused")
}

// TestStore_PlacementPools_BackupVerify: a backup holds the pools, a
// store restored from it lists them, and Verify counts them as sound
// entities of their kind.
func TestStore_PlacementPools_BackupVerify(t *testing.T) {
	ctx := context.Background()
	src, srcLog := TestStore(t)
	for _, name := range []string{"a", "b"} {
		_, err := srcLog.Append(ctx, PlacementPoolKey(name), 0, Change{Record: poolRecord(t, name, "t1", "t2")})
		require.NoError(t, err)
	}
	file, _ := backupBytes(t, src)
	_, err := VerifyBackup(bytes.NewReader(file))
	require.NoError(t, err)

	dir := filepath.Join(t.TempDir(), "restored")
	cfg := DefaultConfig(dir)
	cfg.SyncWrites = false
	dst, dstLog := TestStoreWithConfig(t, cfg)
	require.NoError(t, dstLog.Close())
	_, err = dst.RestoreBackup(writeTemp(t, file))
	require.NoError(t, err)
	require.Equal(t, []poolSeen{{"a", 2, 1}, {"b", 2, 1}}, listPools(t, dst))
	require.NoError(t, dst.Close())

	r, err := Verify(ctx, dir, nil)
	require.NoError(t, err)
	require.True(t, r.Sound(), "%v", r.Damage)
	require.Equal(t, 2, r.Store.Entities[KindPlacementPool])
}
