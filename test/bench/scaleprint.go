package main

import (
	"context"
	"fmt"
	"math"
	"sort"

	"github.com/norsk-oss/norsk-manager/test/simfleet"
)

// bucketQuantile returns the upper bound of the bucket of cumulative
// histogram buckets (between scrapes a and b) that holds quantile q of
// total observations.
func bucketQuantile(a, b map[float64]float64, total, q float64) float64 {
	les := make([]float64, 0, len(b))
	for le := range b {
		les = append(les, le)
	}
	sort.Float64s(les)
	for _, le := range les {
		if b[le]-a[le] >= q*total {
			return le
		}
	}
	return math.Inf(1)
}

// passCell formats the engine passes between scrapes a and b: how many,
// their mean and the bucket bound of their p99, in ms.
func passCell(a, b scrape) string {
	n := b.passCount - a.passCount
	if _, ok := b.passBuckets[math.Inf(1)]; !ok {
		return "n/a (no " + passMetric + ")"
	}
	if n == 0 {
		return "0 passes (nothing woke the engine: it wakes on changes it can act on, and every 500 ms)"
	}
	p99 := bucketQuantile(a.passBuckets, b.passBuckets, n, 0.99)
	bound := "> 13 s"
	if !math.IsInf(p99, 1) {
		bound = "≤ " + fmtMs(p99*1000)
	}
	return fmt.Sprintf("%.0f: %s / %s", n, fmtMs((b.passSum-a.passSum)/n*1000), bound)
}

func printScale(e *env, rows []scaleRow, nodes int, capacity float64, fleet simfleet.Stats) {
	w := e.out
	fmt.Fprintln(w, "## scale")
	fmt.Fprintln(w)
	fmt.Fprintf(w, "One norsk-manager process (fsync on, --metrics-addr, --register-rate 0 for the simulated workers on 127.0.0.1) grows through "+
		"the sizes. Preload, %d clients: 9 jobs in 10 are the createjob bench's ~1 KB job created then completed (CompleteJob: POST, "+
		"a job_completed entry), 1 in 10 an auto-placed job of 1 unit, placed and running on a simulated fleet of %d nodes of %g units "+
		"(test/simfleet, in the bench process) before anything is measured. Then, on the quiet manager, the engine's passes for %s "+
		"(it passes every 500 ms when nothing changes), or longer until %d passes ended (at most %s: a pass over many records takes seconds "+
		"and the engine then waits 3 times as long); then %d window(s) of %d closed-loop CreateJob clients (one connection each) "+
		"sending the createjob bench's job: %d CreateJobs of warm-up, then a tenth of the store (200 to 3,000) measured. These jobs stay: "+
		"the next size counts them, and \"stored\" gives the count at the start and at the end of the windows. "+
		"CPU per write: the manager's user+system CPU (/proc/<pid>/stat) over a window divided by the CreateJobs acknowledged in it. "+
		"Passes: the manager's %s histogram (count: mean / p99 bucket bound, ms). RSS: /proc/<pid>/status after the windows, "+
		"VmHWM (peak since the start) / VmRSS. Cells with three figures: min / median / max over the windows.\n\n",
		scalePreloadClients, nodes, capacity, scaleIdle, scaleIdlePasses, scaleIdleMax, e.runs, scaleClients, scaleWarmup, passMetric)
	fmt.Fprintln(w, "| stored (start → end) | preloaded: completed / placed | preload s (jobs/s) | CreateJob/s | p99 ms | manager CPU ms per write | "+
		"idle passes: n: mean / p99 ms | idle manager CPU cores | passes while writing: n: mean / p99 ms | manager RSS peak / end MiB | errors |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|---|---|---|")
	for _, r := range rows {
		var rate, p99, cpw []float64
		errs := 0
		for _, run := range r.runs {
			rate = append(rate, run.st.rate)
			p99 = append(p99, ms(run.st.p99))
			cpw = append(cpw, run.cpuMsPW)
			errs += run.st.errs
		}
		pre := "—"
		if r.preload > 0 {
			pre = fmt.Sprintf("%.0f (%.0f)", r.preload.Seconds(), float64(r.preloaded)/r.preload.Seconds())
		}
		fmt.Fprintf(w, "| %d → %d | %d / %d | %s | %s | %s | %s | %s | %.2f | %s | %s | %d |\n", r.stored, r.storedEnd, r.completed, r.placed, pre,
			spread(rate, fmtRate), spread(p99, fmtMs), spread(cpw, func(v float64) string { return fmt.Sprintf("%.2f", v) }),
			passCell(r.idleBefore, r.idleAfter), r.idleCPU.Seconds()/r.idleFor.Seconds(), passCell(r.writesBefore, r.writesAfter),
			memCell(r.mem, r.memErr), errs)
	}
	fmt.Fprintln(w)
	for _, r := range rows {
		for i, run := range r.runs {
			if run.st.firstErr != nil {
				fmt.Fprintf(w, "- %d stored, window %d: %d errors, first: %v\n", r.stored, i+1, run.st.errs, run.st.firstErr)
			}
		}
		if r.preloadRetries > 0 {
			fmt.Fprintf(w, "- %d stored: %d preload calls retried\n", r.stored, r.preloadRetries)
		}
	}
	fmt.Fprintf(w, "- The simulated fleet received %d starts (%d double starts).\n\n", fleet.Starts, fleet.Violations)
	if len(rows) >= 2 {
		a, b := rows[0], rows[len(rows)-1]
		ca, cb := medianCPUPerWriteRow(a), medianCPUPerWriteRow(b)
		fmt.Fprintf(w, "Goal (issue 22 §1): a CreateJob costs the same CPU with 100,000 stored jobs as with 100, within 10 %%: "+
			"here %.2f ms per write at %d stored, %.2f ms at %d (%+.0f %%), %s.\n\n",
			ca, a.stored, cb, b.stored, (cb/ca-1)*100, met(b.stored >= 100_000 && cb <= 1.1*ca))
	}
	for _, r := range rows {
		if r.heap != "" {
			printProfileTop(context.Background(), e, fmt.Sprintf("Heap of the manager at %d stored jobs, after the windows (after a GC)", r.storedEnd),
				r.heap, "-top", "-sample_index=inuse_space")
		}
	}
}

// medianCPUPerWriteRow returns the median CPU per write of a row's windows.
func medianCPUPerWriteRow(r scaleRow) float64 {
	var vs []float64
	for _, run := range r.runs {
		vs = append(vs, run.cpuMsPW)
	}
	if len(vs) == 0 {
		return 0
	}
	return median(vs)
}
