package persistence

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	"github.com/norsk-oss/norsk-manager/proto/internalpb"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
)

func bundleRecord(id string, pending bool) []byte {
	b, err := proto.Marshal(&internalpb.BundleRecord{Bundle: &managerpb.Bundle{BundleId: &managerpb.BundleId{BundleId: id}}, PendingWork: pending})
	if err != nil {
		panic(err)
	}
	return b
}

func pendingBundles(t *testing.T, s *Store) []string {
	t.Helper()
	var ids []string
	require.NoError(t, s.View(func(r *Reader) error {
		return r.PendingBundles(func(id string) error { ids = append(ids, id); return nil })
	}))
	return ids
}

func TestStore_Bundles_PendingIndex(t *testing.T) {
	ctx := context.Background()
	s, l := TestStore(t)
	_, err := l.Append(ctx, BundleKey("b2"), 0, Change{Record: bundleRecord("b2", true)})
	require.NoError(t, err)
	_, err = l.Append(ctx, BundleKey("b1"), 0, Change{Record: bundleRecord("b1", false)})
	require.NoError(t, err)
	require.Equal(t, []string{"b2"}, pendingBundles(t, s))

	_, err = l.Append(ctx, BundleKey("b1"), 1, Change{Record: bundleRecord("b1", true)})
	require.NoError(t, err)
	require.Equal(t, []string{"b1", "b2"}, pendingBundles(t, s))
	_, err = l.Append(ctx, BundleKey("b2"), 1, Change{Record: bundleRecord("b2", false)})
	require.NoError(t, err)
	require.Equal(t, []string{"b1"}, pendingBundles(t, s))
	// A deleted bundle leaves a tombstone and no index entry.
	_, err = l.Append(ctx, BundleKey("b1"), 2, Change{Delete: true})
	require.NoError(t, err)
	require.Empty(t, pendingBundles(t, s))

	var ids []string
	require.NoError(t, s.View(func(r *Reader) error {
		if _, _, err := r.Bundle("b1"); err != ErrNotFound {
			t.Errorf("deleted bundle: %v", err)
		}
		rec, seq, err := r.Bundle("b2")
		require.NoError(t, err)
		require.EqualValues(t, 2, seq)
		require.Equal(t, "b2", rec.GetBundle().GetBundleId().GetBundleId())
		return r.Bundles(func(rec *internalpb.BundleRecord) error {
			ids = append(ids, rec.GetBundle().GetBundleId().GetBundleId())
			return nil
		})
	}))
	require.Equal(t, []string{"b2"}, ids)
}
