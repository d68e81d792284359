package main

import (
	"context"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"sync"
	"time"
)

// op is one closed-loop request of client c (0-based); it returns when the
// request has completed.
type op func(ctx context.Context, c int) error

// runStats summarises one measured window.
type runStats struct {
	rate     float64 // successful requests per second of the window
	p50, p99 time.Duration
	max      time.Duration
	ok, errs int
	firstErr error
	// CPU used during the window, in cores: by the server process (0 when
	// the server is the bench itself) and by the bench process.
	serverCores, benchCores float64
}

// closedLoop runs n clients, each sending its next request as soon as the
// previous one returns, for warmup+window. Only requests that start and end
// inside the window count; latencies are pooled over clients.
func closedLoop(ctx context.Context, n int, warmup, window time.Duration, do op) runStats {
	start := time.Now()
	winStart, winEnd := start.Add(warmup), start.Add(warmup+window)
	lat := make([][]time.Duration, n)
	errs := make([]int, n)
	var errMu sync.Mutex
	var firstErr error
	var wg sync.WaitGroup
	for c := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				t0 := time.Now()
				if !t0.Before(winEnd) {
					return
				}
				err := do(ctx, c)
				t1 := time.Now()
				if t0.Before(winStart) || t1.After(winEnd) {
					continue
				}
				if err != nil {
					errs[c]++
					errMu.Lock()
					if firstErr == nil {
						firstErr = err
					}
					errMu.Unlock()
					continue
				}
				lat[c] = append(lat[c], t1.Sub(t0))
			}
		}()
	}
	wg.Wait()
	all := slices.Concat(lat...)
	st := summarize(all)
	st.rate = float64(len(all)) / window.Seconds()
	for _, e := range errs {
		st.errs += e
	}
	st.firstErr = firstErr
	return st
}

// summarize sorts lat and returns its nearest-rank p50, p99 and max.
func summarize(lat []time.Duration) runStats {
	slices.Sort(lat)
	st := runStats{ok: len(lat)}
	if len(lat) > 0 {
		st.p50, st.p99, st.max = nearestRank(lat, 50), nearestRank(lat, 99), lat[len(lat)-1]
	}
	return st
}

// nearestRank returns the p-th percentile of sorted (nearest-rank method:
// the smallest value with at least p% of the values at or below it).
func nearestRank(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	r := int(math.Ceil(p / 100 * float64(len(sorted))))
	return sorted[min(max(r, 1), len(sorted))-1]
}

// percentile returns the nearest-rank p-th percentile of lat (unsorted).
func percentile(lat []time.Duration, p float64) time.Duration {
	s := slices.Clone(lat)
	slices.Sort(s)
	return nearestRank(s, p)
}

// spread formats min / median / max of vs.
func spread(vs []float64, format func(float64) string) string {
	s := slices.Clone(vs)
	slices.Sort(s)
	if len(s) == 1 {
		return format(s[0])
	}
	return format(s[0]) + " / " + format(s[len(s)/2]) + " / " + format(s[len(s)-1])
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// fmtMs formats milliseconds with 3 significant digits (at least 2 decimals
// below 1 ms).
func fmtMs(v float64) string {
	switch {
	case v < 10:
		return fmt.Sprintf("%.2f", v)
	case v < 100:
		return fmt.Sprintf("%.1f", v)
	default:
		return fmt.Sprintf("%.0f", v)
	}
}

func fmtRate(v float64) string { return fmt.Sprintf("%.0f", v) }

// groupRow formats the runs of one client count as a table row:
// min / median / max of each column over the runs, then the median CPU use
// and the rate of each run.
func groupRow(label string, runs []runStats, withServer bool) string {
	var rate, p50, p99, mx, errs, server, bench []float64
	var perRun []string
	for _, r := range runs {
		rate = append(rate, r.rate)
		p50 = append(p50, ms(r.p50))
		p99 = append(p99, ms(r.p99))
		mx = append(mx, ms(r.max))
		errs = append(errs, float64(r.errs))
		server = append(server, r.serverCores)
		bench = append(bench, r.benchCores)
		perRun = append(perRun, fmtRate(r.rate))
	}
	cores := func(v float64) string { return fmt.Sprintf("%.2f", v) }
	cpu := cores(median(bench))
	if withServer {
		cpu = cores(median(server)) + " + " + cpu
	}
	return fmt.Sprintf("| %s | %s | %s | %s | %s | %s | %s | %s |", label, spread(rate, fmtRate), spread(p50, fmtMs),
		spread(p99, fmtMs), spread(mx, fmtMs), spread(errs, fmtRate), cpu, strings.Join(perRun, ", "))
}

func median(vs []float64) float64 {
	s := slices.Clone(vs)
	slices.Sort(s)
	return s[len(s)/2]
}

// medianRate returns the median rate of runs.
func medianRate(runs []runStats) float64 {
	var r []float64
	for _, x := range runs {
		r = append(r, x.rate)
	}
	slices.Sort(r)
	return r[len(r)/2]
}

// medianP99 returns the median p99 of runs.
func medianP99(runs []runStats) time.Duration {
	var r []time.Duration
	for _, x := range runs {
		r = append(r, x.p99)
	}
	slices.Sort(r)
	return r[len(r)/2]
}

// latencyRow prints one row of trial latencies (p50/p90/p99/max, ms).
func latencyRow(w io.Writer, label string, lat []time.Duration, errs int) {
	lat = slices.Clone(lat)
	st := summarize(lat)
	fmt.Fprintf(w, "| %s | %d | %s | %s | %s | %s | %s | %d |\n", label, len(lat), fmtMs(ms(nearestRank(lat, 0))),
		fmtMs(ms(st.p50)), fmtMs(ms(nearestRank(lat, 90))), fmtMs(ms(st.p99)), fmtMs(ms(st.max)), errs)
}

const latencyHeader = "| measurement | trials | min ms | p50 ms | p90 ms | p99 ms | max ms | errors |\n|---|---|---|---|---|---|---|---|"

// met formats a target verdict.
func met(ok bool) string {
	if ok {
		return "**met**"
	}
	return "**missed**"
}
