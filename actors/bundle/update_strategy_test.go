package bundle_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/norsk-oss/norsk-manager/proto/errorpb"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
)

// TestGrain_UpdateStrategyForwarded: a bundle's update_strategy is stamped
// into every derived job (replicas alike), and an
// UpdateBundle that changes it updates the derived jobs.
func TestGrain_UpdateStrategyForwarded(t *testing.T) {
	const migrate = managerpb.UpdateStrategy_UPDATE_STRATEGY_MIGRATE
	e := newEnv(t)
	b := testBundle("b", true, spec("enc", "", "e"), spec("pkg", "", "p"))
	b.UpdateStrategy = migrate
	require.Equal(t, errorpb.Code_OK, e.create(t, "c1", b).GetCode())
	jobs := e.jobs(t)
	require.Len(t, jobs, 4)
	for id, rec := range jobs {
		require.Equal(t, migrate, rec.GetJob().GetJob().GetUpdateStrategy(), id)
	}

	b = testBundle("b", true, spec("enc", "", "e"), spec("pkg", "", "p"))
	r := e.update(t, "u1", b)
	require.Equal(t, errorpb.Code_OK, r.GetCode(), r.GetMessage())
	for id, rec := range e.jobs(t) {
		require.Equal(t, managerpb.UpdateStrategy_UPDATE_STRATEGY_IN_PLACE, rec.GetJob().GetJob().GetUpdateStrategy(), id)
		require.Len(t, rec.GetJob().GetHistoryEntry(), 2, "%s: created, then updated", id)
	}
}
