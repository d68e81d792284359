package placement

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
)

// gathered returns the value of the metric name (with label result=result
// when result is not empty) from reg.
func gathered(t *testing.T, reg *prometheus.Registry, name, result string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			if result == "" {
				return m.GetGauge().GetValue()
			}
			for _, l := range m.GetLabel() {
				if l.GetName() == "result" && l.GetValue() == result {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	t.Fatalf("metric %s{result=%q} not gathered", name, result)
	return 0
}

func TestMetrics_PlacementsAndUnplaced(t *testing.T) {
	f := newFixture(t)
	reg := prometheus.NewRegistry()
	m, err := NewMetrics(reg)
	require.NoError(t, err)
	f.eng.cfg.Metrics = m
	f.putNode("n1", 1, "z1", nil)
	f.putJob(autoJob("a", 1, nil))
	f.putJob(autoJob("b", 1, nil))
	f.pass()
	f.pass() // b still fits nowhere: counted once, not per pass
	require.Equal(t, 1.0, gathered(t, reg, "norsk_manager_placements_total", ResultPlaced))
	require.Equal(t, 1.0, gathered(t, reg, "norsk_manager_placements_total", ResultNoNode))
	require.Equal(t, 1.0, gathered(t, reg, "norsk_manager_unplaced_jobs", ""))
	f.putNode("n2", 1, "z1", nil)
	f.pass()
	f.pass()
	require.Equal(t, 2.0, gathered(t, reg, "norsk_manager_placements_total", ResultPlaced))
	require.Equal(t, 0.0, gathered(t, reg, "norsk_manager_unplaced_jobs", ""))
	// a, b (no node), b again (no node), b (placed): one observation per
	// decision, whatever its outcome.
	require.Equal(t, uint64(4), decisions(t, reg))

	_, err = NewMetrics(reg)
	require.Error(t, err, "registered twice")
}

// decisions returns the sample count of
// norsk_manager_placement_decision_seconds in reg.
func decisions(t *testing.T, reg *prometheus.Registry) uint64 {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() == "norsk_manager_placement_decision_seconds" {
			return mf.GetMetric()[0].GetHistogram().GetSampleCount()
		}
	}
	t.Fatal("norsk_manager_placement_decision_seconds not gathered")
	return 0
}
