package main

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"time"

	"github.com/norsk-oss/norsk-manager/proto/commonpb"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
)

// Hardening (issue 21) windows: how long the bench watches the auto-placed
// jobs that end at once, and how long at most it waits for the event
// streams to settle after the flood (--quick: the shorter of each; the
// quick run also stops watching once both jobs have their terminal state).
const (
	hardenWindow      = 30 * time.Second
	hardenWindowQuick = 25 * time.Second
	hardenSettle      = 20 * time.Second
	hardenSettleQuick = 10 * time.Second
)

// runHardening measures two figures of issue 21 on real processes:
// how often the engine places a job that ends as soon as it starts
// (§1: before the fix a "true" job was placed 5–12 times a second; now the
// failure backoff paces it and the restart ceiling ends it), and the
// manager's memory while 64 event streams stop reading and 20 jobs of
// 900 KiB are created (§4: before the fix the heap went from 90 MiB to
// several GiB; now the streams share --event-stream-memory, 256 MiB by
// default, and the slowest are cut with a resume index).
func runHardening(ctx context.Context, e *env) error {
	window, settle := hardenWindow, hardenSettle
	if e.quick {
		window, settle = hardenWindowQuick, hardenSettleQuick
	}
	pl, watched, err := hardeningPlacements(ctx, e, window)
	if err != nil {
		return fmt.Errorf("placements: %w", err)
	}
	printPlacements(e.out, window, watched, pl)
	fl, err := hardeningFlood(ctx, e, settle)
	if err != nil {
		return fmt.Errorf("stalled streams: %w", err)
	}
	printFlood(e.out, fl)
	return nil
}

// endingJob is one auto-placed job of hardeningPlacements and what the
// event stream showed of it.
type endingJob struct {
	id, command string
	created     time.Time
	// placed are the manager's job_provisioned timestamps, without repeats
	// (every job_updated carries the whole history).
	placed []time.Time
	seen   map[string]bool // role and timestamp of each job_provisioned counted
	// terminal: when the bench received the job_updated carrying the
	// terminal_state, and its failure reason; zero if none in the window.
	terminal time.Time
	reason   string
}

// hardeningPlacements runs a manager, one worker (process runtime) and a
// pool with one catch-all tier (the default restart ceiling), creates two
// auto-placed jobs of the pool whose only service ends at once — "true"
// (exit 0) and "exit 1", restart NEVER — and follows the event stream for
// window, counting the job_provisioned entries of each. It returns the
// jobs and how long it watched (less than window with --quick, which stops
// at both terminal states).
func hardeningPlacements(ctx context.Context, e *env, window time.Duration) ([]*endingJob, time.Duration, error) {
	dir := e.dir("hardening-placement")
	m, err := e.startManager(ctx, filepath.Join(dir, "data"), "")
	if err != nil {
		return nil, 0, err
	}
	defer m.stop()
	conn, api, err := dial(m.addr)
	if err != nil {
		return nil, 0, err
	}
	defer conn.Close()
	ev, err := watchEvents(ctx, m.addr)
	if err != nil {
		return nil, 0, err
	}
	defer ev.close()
	_, w, err := startWorker(ctx, e, api, ev, dir, m.addr)
	if err != nil {
		return nil, 0, err
	}
	defer w.stop()
	if _, err := api.CreatePool(ctx, &managerpb.Pool{Name: "bench", Tiers: []*managerpb.PoolTier{{Name: "all"}}}); err != nil {
		return nil, 0, fmt.Errorf("CreatePool: %w", err)
	}
	jobs := []*endingJob{{id: "ends-true", command: "true"}, {id: "ends-exit1", command: "exit 1"}}
	byID := map[string]*endingJob{}
	for _, j := range jobs {
		j.seen = map[string]bool{}
		byID[j.id] = j
		j.created = time.Now()
		if _, err := api.CreateJob(ctx, &managerpb.Job{JobId: &commonpb.JobId{JobId: j.id}, Tags: map[string]string{"pool": "bench"},
			AutoPlacement: &managerpb.AutoPlacement{Requirements: &managerpb.JobRequirements{}},
			Services:      []*commonpb.Service{{Name: "ends", Command: j.command, Restart: commonpb.Service_NEVER}}}); err != nil {
			return nil, 0, fmt.Errorf("CreateJob %s: %w", j.id, err)
		}
	}
	end := jobs[0].created.Add(window)
	err = ev.until(ctx, end, func(te timedEvent) bool {
		jwh := te.ev.GetJobUpdated().GetJobWithHistory()
		if j := byID[jwh.GetJob().GetJobId().GetJobId()]; j != nil {
			j.record(jwh, te.at)
		}
		// --quick stops once both jobs have their terminal state (the
		// engine never places them again); a full run watches the whole
		// window to show that nothing comes after it.
		return e.quick && !jobs[0].terminal.IsZero() && !jobs[1].terminal.IsZero()
	})
	if err != nil {
		return nil, 0, fmt.Errorf("%w\nworker log:\n%s", err, w.tail())
	}
	watched := min(time.Since(jobs[0].created), window)
	for _, j := range jobs {
		// Only what the manager stamped within the window: a placement
		// the stream delivered late still counts, one after it does not.
		j.placed = slices.DeleteFunc(j.placed, func(t time.Time) bool { return t.After(j.created.Add(window)) })
		slices.SortFunc(j.placed, func(a, b time.Time) int { return a.Compare(b) })
	}
	return jobs, watched, nil
}

// record takes one job_updated of j received at at: its job_provisioned
// entries not counted yet, and its terminal_state.
func (j *endingJob) record(jwh *managerpb.JobWithHistory, at time.Time) {
	for _, h := range jwh.GetHistoryEntry() {
		p := h.GetJobProvisioned()
		if p == nil {
			continue
		}
		key := fmt.Sprintf("%s@%d", p.GetRole(), p.GetTimestamp().AsTime().UnixNano())
		if !j.seen[key] {
			j.seen[key] = true
			j.placed = append(j.placed, p.GetTimestamp().AsTime())
		}
	}
	if r := jwh.GetJob().GetTerminalState().GetFailureReason(); r != "" && j.terminal.IsZero() {
		j.terminal, j.reason = at, r
	}
}

// until hands every event received before deadline to fn, and returns
// early when fn returns true. It fails if the stream ends first.
func (w *eventWatch) until(ctx context.Context, deadline time.Time, fn func(timedEvent) bool) error {
	t := time.NewTimer(time.Until(deadline))
	defer t.Stop()
	for {
		select {
		case te := <-w.ch:
			if fn(te) {
				return nil
			}
		case err := <-w.errCh:
			return fmt.Errorf("event stream ended: %w", err)
		case <-t.C:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// maxPerSecond is the largest number of times (sorted) within any
// interval shorter than a second.
func maxPerSecond(times []time.Time) int {
	best, i := 0, 0
	for j := range times {
		for times[j].Sub(times[i]) >= time.Second {
			i++
		}
		best = max(best, j-i+1)
	}
	return best
}

// gaps returns the intervals between consecutive times (sorted).
func gaps(times []time.Time) []time.Duration {
	var out []time.Duration
	for i := 1; i < len(times); i++ {
		out = append(out, times[i].Sub(times[i-1]))
	}
	return out
}
