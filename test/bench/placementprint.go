package main

import (
	"bufio"
	"context"
	"fmt"
	"math"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"time"
)

// scrape holds the manager's metrics the placement bench reads: the
// decision histogram's cumulative buckets (upper bound → count), its sum
// and count, and the placements counter by result.
type scrape struct {
	buckets    map[float64]float64
	sum, count float64
	placements map[string]float64
	// passSum and passCount are the pass histogram's
	// (norsk_manager_placement_pass_seconds, absent on a manager from
	// before issue 22: 0), passBuckets its cumulative buckets.
	passSum, passCount float64
	passBuckets        map[float64]float64
}

const (
	decisionMetric = "norsk_manager_placement_decision_seconds"
	passMetric     = "norsk_manager_placement_pass_seconds"
)

// scrapeMetrics reads http://addr/metrics.
func scrapeMetrics(ctx context.Context, addr string) (scrape, error) {
	s := scrape{buckets: map[float64]float64{}, placements: map[string]float64{}, passBuckets: map[float64]float64{}}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/metrics", nil)
	if err != nil {
		return s, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return s, fmt.Errorf("scrape metrics: %w", err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		s.line(sc.Text())
	}
	if err := sc.Err(); err != nil {
		return s, fmt.Errorf("scrape metrics: %w", err)
	}
	if _, ok := s.buckets[math.Inf(1)]; !ok {
		return s, fmt.Errorf("scrape metrics: no %s (a manager without the decision histogram?)", decisionMetric)
	}
	return s, nil
}

// line takes one line of the text exposition format.
func (s *scrape) line(l string) {
	name, rest, ok := strings.Cut(l, " ")
	if !ok || strings.HasPrefix(l, "#") {
		return
	}
	v, err := strconv.ParseFloat(strings.TrimSpace(rest), 64)
	if err != nil {
		return
	}
	label := func(key string) string {
		_, after, ok := strings.Cut(name, key+`="`)
		if !ok {
			return ""
		}
		val, _, _ := strings.Cut(after, `"`)
		return val
	}
	switch {
	case strings.HasPrefix(name, decisionMetric+"_bucket{"):
		le, err := strconv.ParseFloat(label("le"), 64)
		if err == nil {
			s.buckets[le] = v
		}
	case name == decisionMetric+"_sum":
		s.sum = v
	case name == decisionMetric+"_count":
		s.count = v
	case strings.HasPrefix(name, passMetric+"_bucket{"):
		le, err := strconv.ParseFloat(label("le"), 64)
		if err == nil {
			s.passBuckets[le] = v
		}
	case name == passMetric+"_sum":
		s.passSum = v
	case name == passMetric+"_count":
		s.passCount = v
	case strings.HasPrefix(name, "norsk_manager_placements_total{"):
		s.placements[label("result")] = v
	}
}

// decisionQuantile returns the upper bound of the histogram bucket that
// holds quantile q of the decisions made between a and b (the bucket's
// bound, so "p99 ≤ this").
func decisionQuantile(a, b scrape, q float64) float64 {
	var les []float64
	for le := range b.buckets {
		les = append(les, le)
	}
	sort.Float64s(les)
	total := b.count - a.count
	for _, le := range les {
		if b.buckets[le]-a.buckets[le] >= q*total {
			return le
		}
	}
	return math.Inf(1)
}

// fmtMicros formats seconds as microseconds.
func fmtMicros(v float64) string {
	if math.IsInf(v, 1) {
		return "> 1.6 s"
	}
	return fmt.Sprintf("%.0f", v*1e6)
}

func printPlacement(e *env, rs []placementResult) {
	w := e.out
	fmt.Fprintln(w, "## placement")
	fmt.Fprintln(w)
	fmt.Fprintf(w, "A norsk-manager process (fsync on, --metrics-addr) and a simulated fleet in the bench process (test/simfleet: one real "+
		"worker agent per node — cluster slot registration, hello with capacity and zone, dial-back session, health every 2 s — "+
		"with a runtime that runs nothing), nodes in %d zones. Jobs of 1 unit with auto_placement, created by %d concurrent clients "+
		"once every node is STARTED; times are when the bench receives each job's first job_updated whose newest entry is job_running. "+
		"Decision times come from the manager's norsk_manager_placement_decision_seconds histogram (p99: the upper bound of its bucket). "+
		"Manager CPU is /proc/<pid>/stat from the first CreateJob to the last job_running: CreateJob, the engine, StartJob and the workers' "+
		"reports together, so per placement it is an upper bound of the engine's share. Manager RSS is /proc/<pid>/status once every job ran: "+
		"VmHWM (the peak since the manager started, the nodes' bring-up included) and VmRSS (then). "+
		"The manager runs with --register-rate 0: every simulated worker registers from 127.0.0.1, and the default limit per address "+
		"(1/s after a burst of 20) would let 1,000 of them in at one per second.\n\n", len(placementZones), placementCreators)
	fmt.Fprintln(w, "| nodes | jobs | units/node | nodes up s | CreateJobs acked s | all running s | placements/s | CreateJob → running p50 / p99 / max ms | decision mean / p99 µs | manager CPU s (ms per job) | manager RSS peak / end MiB | starts | double starts | not running | CreateJob errors |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
	for _, r := range rs {
		st := summarize(r.latencies)
		n := r.after.count - r.before.count
		mean := 0.0
		if n > 0 {
			mean = (r.after.sum - r.before.sum) / n
		}
		rate := 0.0
		if r.startWindow > 0 {
			rate = float64(r.fleet.Starts) / r.startWindow.Seconds()
		}
		fmt.Fprintf(w, "| %d | %d | %g | %.1f | %.1f | %.1f | %s | %s / %s / %s | %s / ≤ %s | %.1f (%.2f) | %s | %d | %d | %d | %d |\n",
			r.size.nodes, r.size.jobs, r.capacity, r.connect.Seconds(), r.created.Seconds(), r.allRunning.Seconds(), fmtRate(rate),
			fmtMs(ms(st.p50)), fmtMs(ms(st.p99)), fmtMs(ms(st.max)), fmtMicros(mean), fmtMicros(decisionQuantile(r.before, r.after, 0.99)),
			r.cpu.Seconds(), ms(r.cpu)/float64(max(1, r.fleet.Starts)), memCell(r.mem, r.memErr), r.fleet.Starts, r.fleet.Violations, r.missing, r.createErrs)
	}
	fmt.Fprintln(w)
	for _, r := range rs {
		d := func(k string) float64 { return r.after.placements[k] - r.before.placements[k] }
		fmt.Fprintf(w, "- %s: %g decisions; norsk_manager_placements_total placed %g, no_node %g, start_failed %g.\n",
			r.size, r.after.count-r.before.count, d("placed"), d("no_node"), d("start_failed"))
		for _, v := range r.fleet.ViolationLog {
			fmt.Fprintf(w, "  - double start: %s\n", v)
		}
	}
	fmt.Fprintln(w)
	printPlacementTargets(e, rs)
	for _, r := range rs {
		if r.profile != "" {
			printProfileTop(context.Background(), e, fmt.Sprintf("CPU profile of the manager, %s, the first 30 s after the first CreateJob", r.size), r.profile, "-top", "-cum")
		}
		if r.heap != "" {
			printProfileTop(context.Background(), e, fmt.Sprintf("Heap of the manager, %s, once every job ran (after a GC)", r.size), r.heap, "-top", "-sample_index=inuse_space")
		}
	}
}

func printPlacementTargets(e *env, rs []placementResult) {
	w := e.out
	fmt.Fprintln(w, "Targets (issue 11 §5, this 2-core box):")
	fmt.Fprintln(w)
	for _, r := range rs {
		switch {
		case r.size.nodes == 1000 && r.size.jobs == 10000:
			fmt.Fprintf(w, "- 10,000 jobs running on 1,000 simulated nodes in under 30 s: %.1f s, %s.\n", r.allRunning.Seconds(),
				met(r.missing == 0 && r.allRunning < 30*time.Second))
			fmt.Fprintf(w, "- Goal (issue 22): 10,000 jobs on 1,000 nodes under 300 MiB of manager RSS: peak %s MiB, at the end %s MiB, %s.\n",
				mib(r.mem.peak), mib(r.mem.now), met(r.memErr == nil && r.mem.peak < 300<<20))
		case r.size.nodes == 100:
			p99 := decisionQuantile(r.before, r.after, 0.99)
			fmt.Fprintf(w, "- p99 placement decision under 50 ms at 100 nodes (%d jobs): ≤ %s µs, %s.\n", r.size.jobs, fmtMicros(p99), met(p99 <= 0.05))
		}
	}
	fmt.Fprintln(w, "- For scale: Nomad's C1M run placed 1,000,000 containers at about 3,750 placements/s on 5 servers "+
		"(real clients on 5,000 hosts); here 1 manager, simulated workers on the same 2 cores.")
	fmt.Fprintln(w)
}

// memCell formats a procMem as "peak / now" MiB, or why it is missing.
func memCell(m procMem, err error) string {
	if err != nil {
		return "? (" + err.Error() + ")"
	}
	return mib(m.peak) + " / " + mib(m.now)
}
