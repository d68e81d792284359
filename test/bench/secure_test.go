package main

import (
	"slices"
	"testing"
)

func TestPairRatios(t *testing.T) {
	rs := func(rates ...float64) []runStats {
		var out []runStats
		for _, r := range rates {
			out = append(out, runStats{rate: r})
		}
		return out
	}
	for _, tc := range []struct {
		name    string
		off, on []runStats
		want    []float64
	}{
		{"paired by run", rs(100, 200, 400), rs(80, 200, 100), []float64{0.8, 1, 0.25}},
		{"unequal lengths: only the pairs", rs(100, 100), rs(50), []float64{0.5}},
		{"an off run without successes is skipped", rs(0, 100), rs(10, 90), []float64{0.9}},
		{"nothing measured", nil, rs(10), nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := pairRatios(tc.off, tc.on); !slices.Equal(got, tc.want) {
				t.Fatalf("pairRatios = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestCPUPerOp(t *testing.T) {
	for _, tc := range []struct {
		name string
		runs []runStats
		want float64 // µs
	}{
		{"median over runs", []runStats{{rate: 1000, serverCores: 0.5}, {rate: 1000, serverCores: 0.9}, {rate: 500, serverCores: 0.5}}, 900},
		{"runs without successes are left out", []runStats{{rate: 0, serverCores: 1}, {rate: 2000, serverCores: 1}}, 500},
		{"none", nil, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := cpuPerOp(tc.runs); got != tc.want {
				t.Fatalf("cpuPerOp = %v µs, want %v", got, tc.want)
			}
		})
	}
}
