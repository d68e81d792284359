package main

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/norsk-oss/norsk-manager/proto/managerpb"
)

func TestMaxPerSecond(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(ms ...int) []time.Time {
		var out []time.Time
		for _, m := range ms {
			out = append(out, t0.Add(time.Duration(m)*time.Millisecond))
		}
		return out
	}
	for _, tc := range []struct {
		name  string
		times []time.Time
		want  int
	}{
		{"none", nil, 0},
		{"one", at(0), 1},
		{"the backoff: never two within a second", at(0, 1000, 3000, 7000, 15000), 1},
		{"a hot loop", at(0, 100, 200, 300, 999, 1500), 5},
		{"exactly a second apart is not within", at(0, 1000, 2000), 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := maxPerSecond(tc.times); got != tc.want {
				t.Fatalf("maxPerSecond = %d, want %d", got, tc.want)
			}
		})
	}
	if got := gaps(at(0, 1000, 3000)); !slices.Equal(got, []time.Duration{time.Second, 2 * time.Second}) {
		t.Fatalf("gaps = %v", got)
	}
}

// TestEndingJob_RecordCountsEachPlacementOnce: every job_updated carries
// the whole history, so a placement seen in several events counts once.
func TestEndingJob_RecordCountsEachPlacementOnce(t *testing.T) {
	prov := func(sec int64) *managerpb.JobHistoryEntry {
		return &managerpb.JobHistoryEntry{HistoryEntry: &managerpb.JobHistoryEntry_JobProvisioned{
			JobProvisioned: &managerpb.JobHistoryJobProvisioned{Role: "primary", Timestamp: timestamppb.New(time.Unix(sec, 0))}}}
	}
	j := &endingJob{seen: map[string]bool{}}
	at := time.Unix(100, 0)
	j.record(&managerpb.JobWithHistory{Job: &managerpb.Job{}, HistoryEntry: []*managerpb.JobHistoryEntry{prov(1)}}, at)
	j.record(&managerpb.JobWithHistory{Job: &managerpb.Job{}, HistoryEntry: []*managerpb.JobHistoryEntry{prov(1), prov(2)}}, at)
	if len(j.placed) != 2 || !j.terminal.IsZero() {
		t.Fatalf("placed %v, terminal %v: want 2 placements and no terminal state", j.placed, j.terminal)
	}
	j.record(&managerpb.JobWithHistory{Job: &managerpb.Job{TerminalState: &managerpb.TerminalState{FailureReason: "restart ceiling exceeded"}},
		HistoryEntry: []*managerpb.JobHistoryEntry{prov(1), prov(2)}}, at)
	if len(j.placed) != 2 || !j.terminal.Equal(at) || j.reason != "restart ceiling exceeded" {
		t.Fatalf("placed %v, terminal %v %q", j.placed, j.terminal, j.reason)
	}
}

func TestParseGauges(t *testing.T) {
	text := "# HELP go_memstats_heap_alloc_bytes x\n# TYPE go_memstats_heap_alloc_bytes gauge\n" +
		"go_memstats_heap_alloc_bytes 1.048576e+08\ngo_memstats_heap_alloc_bytes_total 7\n" +
		"norsk_manager_placements_total{result=\"placed\"} 3\nnorsk_manager_event_subscribers 64\n"
	got, err := parseGauges(strings.NewReader(text), []string{"norsk_manager_event_subscribers", "go_memstats_heap_alloc_bytes"})
	if err != nil || !slices.Equal(got, []float64{64, 100 << 20}) {
		t.Fatalf("parseGauges = %v, %v", got, err)
	}
	if _, err := parseGauges(strings.NewReader(text), []string{"norsk_manager_placements_total"}); !errors.Is(err, errNoGauge) {
		t.Fatalf("a labelled-only metric: err %v, want errNoGauge", err)
	}
}

func TestStable(t *testing.T) {
	same := func(n int, subs int64) []memSample {
		var out []memSample
		for range n {
			out = append(out, memSample{rss: 300 << 20, subs: subs})
		}
		return out
	}
	for _, tc := range []struct {
		name string
		s    []memSample
		want bool
	}{
		{"too few samples", same(floodStable-1, 10), false},
		{"unchanged", append(same(3, 64), same(floodStable, 10)...), true},
		{"a stream cut in the last samples", append(same(floodStable-1, 10), memSample{rss: 300 << 20, subs: 9}), false},
		{"a failed scrape", append(same(floodStable-1, 10), memSample{rss: 300 << 20, subs: 10, scrapeFail: true}), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := stable(tc.s); got != tc.want {
				t.Fatalf("stable = %t, want %t", got, tc.want)
			}
		})
	}
}
