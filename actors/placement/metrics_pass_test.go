package placement

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
)

// TestMetrics_ObservePass: each ObservePass is one sample of
// norsk_manager_placement_pass_seconds, in seconds; a nil *Metrics (an
// engine built without metrics, as in tests) records nothing and does not
// panic.
func TestMetrics_ObservePass(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := NewMetrics(reg)
	require.NoError(t, err)
	m.ObservePass(250 * time.Millisecond)
	m.ObservePass(1500 * time.Millisecond)
	mfs, err := reg.Gather()
	require.NoError(t, err)
	var h *float64
	var n uint64
	for _, mf := range mfs {
		if mf.GetName() == "norsk_manager_placement_pass_seconds" {
			hist := mf.GetMetric()[0].GetHistogram()
			sum := hist.GetSampleSum()
			h, n = &sum, hist.GetSampleCount()
		}
	}
	require.NotNil(t, h, "norsk_manager_placement_pass_seconds not gathered")
	require.Equal(t, uint64(2), n)
	require.InDelta(t, 1.75, *h, 1e-9)

	var none *Metrics
	require.NotPanics(t, func() { none.ObservePass(time.Second) })
}
