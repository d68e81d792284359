package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// errNoGauge is a metric missing from a scrape.
var errNoGauge = errors.New("metric not found")

// scrapeGauges reads the unlabelled metrics names from http://addr/metrics,
// in the order given (2 s at most).
func scrapeGauges(ctx context.Context, addr string, names ...string) ([]float64, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("scrape metrics: %w", err)
	}
	defer resp.Body.Close()
	vals, err := parseGauges(resp.Body, names)
	if err != nil {
		return nil, fmt.Errorf("scrape metrics: %w", err)
	}
	return vals, nil
}

// parseGauges takes the values of the unlabelled metrics names from a text
// exposition, in the order given; a name missing is an error.
func parseGauges(r io.Reader, names []string) ([]float64, error) {
	want := map[string]int{}
	for i, n := range names {
		want[n] = i
	}
	vals, found := make([]float64, len(names)), make([]bool, len(names))
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		name, rest, ok := strings.Cut(sc.Text(), " ")
		i, wanted := want[name]
		if !ok || !wanted {
			continue
		}
		v, err := strconv.ParseFloat(strings.TrimSpace(rest), 64)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		vals[i], found[i] = v, true
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	for i, ok := range found {
		if !ok {
			return nil, fmt.Errorf("%s: %w", names[i], errNoGauge)
		}
	}
	return vals, nil
}

// printPlacements prints the placements table of runHardening.
func printPlacements(w io.Writer, window, watched time.Duration, jobs []*endingJob) {
	fmt.Fprintln(w, "## hardening: placements of a job that ends at once (issue 21 §1)")
	fmt.Fprintln(w)
	fmt.Fprintf(w, "A norsk-manager process (fsync on) and one norsk-ctl --mode=worker process (process runtime) on a cluster slot; a pool "+
		"\"bench\" with one catch-all tier and the default restart ceiling (5 failures in 10 min). Two auto-placed jobs of the pool, "+
		"created together, each with one service (restart NEVER) that ends at once. Placements are the job_provisioned entries the "+
		"manager stamped within %s of CreateJob, read from every job_updated on an EventStream subscription", window)
	if watched < window {
		fmt.Fprintf(w, "; --quick stopped watching after %.1f s, once both jobs had their terminal_state", watched.Seconds())
	}
	fmt.Fprint(w, ".\n\n")
	fmt.Fprintln(w, "| service command | placements in window | most in any 1 s | gaps between placements, s | terminal_state after | reason |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|")
	for _, j := range jobs {
		var gs []string
		for _, g := range gaps(j.placed) {
			gs = append(gs, fmt.Sprintf("%.2f", g.Seconds()))
		}
		if len(gs) > 12 {
			gs = append(gs[:12], "…")
		}
		term, reason := "none in the window", "—"
		if !j.terminal.IsZero() {
			term, reason = fmt.Sprintf("%.1f s", j.terminal.Sub(j.created).Seconds()), j.reason
		}
		fmt.Fprintf(w, "| `%s` | %d | %d | %s | %s | %s |\n", j.command, len(j.placed), maxPerSecond(j.placed),
			strings.Join(gs, ", "), term, strings.ReplaceAll(reason, "|", "\\|"))
	}
	fmt.Fprintln(w)
}

// printFlood prints the stalled-streams figures of runHardening.
func printFlood(w io.Writer, r *floodResult) {
	fmt.Fprintln(w, "## hardening: manager memory under stalled event streams (issue 21 §4)")
	fmt.Fprintln(w)
	fmt.Fprintf(w, "A norsk-manager process (fsync on, --event-stream-memory at its default 256 MiB, --metrics-addr). %d EventStream "+
		"subscriptions on %d connections (64 KiB flow-control windows) receive their first message and stop reading; then one "+
		"client creates %d jobs of %d KiB (manager_configuration), one after the other, while another times JobById of a small job "+
		"every %s. The manager's VmRSS and go_memstats_heap_alloc_bytes are sampled every %s from the first CreateJob until the "+
		"streams settle (streams served and RSS unchanged for %d samples), then while every stream is read out.\n\n",
		floodStreams, floodConns, floodJobs, floodJobBytes>>10, floodProbeEvery, floodSampleEvery, floodStable)
	mib := func(b int64) string {
		if b < 0 {
			return "?"
		}
		return fmt.Sprintf("%.0f", float64(b)/(1<<20))
	}
	// peak is the largest of each figure over the samples of phase.
	peak := func(phase string) (p memSample, n int) {
		p = memSample{rss: -1, heap: -1, goal: -1}
		for _, s := range r.samples {
			if s.phase == phase {
				p.rss, p.heap, p.goal, n = max(p.rss, s.rss), max(p.heap, s.heap), max(p.goal, s.goal), n+1
			}
		}
		return p, n
	}
	end := memSample{rss: -1, heap: -1, goal: -1}
	for _, s := range r.samples {
		if s.phase == "flood" {
			end = s
		}
	}
	flood, fn := peak("flood")
	read, rn := peak("read")
	settled := "settled"
	if !r.settled {
		settled = "not settled within the bound; the last sample"
	}
	row := func(label string, s memSample, n string) {
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s |\n", label, mib(s.rss), mib(s.heap), mib(s.goal), n)
	}
	fmt.Fprintln(w, "| when | RSS MiB | Go heap MiB (heap_alloc) | GC heap goal MiB (next_gc) | samples |")
	fmt.Fprintln(w, "|---|---|---|---|---|")
	row("streams connected, before the flood", r.base, "1")
	row("peak, flood until settled", flood, strconv.Itoa(fn))
	row("at the end ("+settled+")", end, "—")
	row("peak while the streams were read out", read, strconv.Itoa(rn))
	fmt.Fprintln(w)
	open := "?"
	if r.openAtSettle >= 0 {
		open = strconv.FormatInt(r.openAtSettle, 10)
	}
	fmt.Fprintf(w, "The %d CreateJob calls took %s (p50 %s ms, max %s ms). Streams still served when settled: %s of %d. Read out: "+
		"%d ended with ResourceExhausted (EVENT_STREAM_MEMORY, with a resume_from_index), %d delivered every job, %d ended otherwise%s.\n\n",
		floodJobs, r.floodTook.Round(time.Millisecond), fmtMs(ms(percentile(r.createLat, 50))), fmtMs(ms(percentile(r.createLat, 100))),
		open, floodStreams, r.cutBudget, r.complete, r.cutOther, otherNote(r.otherErr))
	if len(r.probeLat) > 0 {
		fmt.Fprintln(w, latencyHeader)
		latencyRow(w, "JobById of a small job during the flood (another connection)", r.probeLat, r.probeErrs)
	} else {
		fmt.Fprintf(w, "No JobById answered during the flood (%d errors).\n", r.probeErrs)
	}
	fmt.Fprintln(w)
}

func otherNote(msg string) string {
	if msg == "" {
		return ""
	}
	return fmt.Sprintf(" (first: %q)", msg)
}
