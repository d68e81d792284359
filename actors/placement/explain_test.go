package placement

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/norsk-oss/norsk-manager/proto/managerpb"
)

func TestEngine_Explain(t *testing.T) {
	f := newFixture(t)
	f.putNode("n1", 2, "z1", map[string]string{"tier": "cheap"})
	f.putPool("p", 5, 600, &managerpb.PoolTier{Name: "cheap", NodeSelector: map[string]string{"tier": "cheap"}})
	placed := autoJob("placed", 2, map[string]string{"pool": "p"})
	f.putJob(placed)
	f.pass()
	require.Equal(t, "n1", f.nodeOf("placed", "primary"))

	// n1 is full now: the next job fits nowhere.
	f.putJob(autoJob("big", 1, nil))
	f.pass()

	got := f.eng.Explain("placed")
	require.Len(t, got, 1)
	require.Equal(t, "primary", got[0].Role)
	require.Nil(t, got[0].Failure)
	require.Equal(t, &Decided{Node: "n1", Tier: "cheap"}, got[0].Decided)

	got = f.eng.Explain("big")
	require.Len(t, got, 1)
	require.Nil(t, got[0].Decided)
	require.NotNil(t, got[0].Failure)
	require.Contains(t, got[0].Failure.Reason, "capacity exhausted on 1 node")
	require.NotNil(t, got[0].Failure.Metrics)
	require.Equal(t, 1, got[0].Failure.Metrics.NodesEvaluated)
	require.Len(t, got[0].Failure.Metrics.Filtered, 1)
	require.Equal(t, "capacity", got[0].Failure.Metrics.Filtered[0].Filter)
	require.Equal(t, f.now, got[0].Failure.Since)

	require.Empty(t, f.eng.Explain("unknown"), "a job the engine never saw")
}
