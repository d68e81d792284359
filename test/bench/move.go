package main

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"time"

	"github.com/norsk-oss/norsk-manager/proto/commonpb"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
	"github.com/norsk-oss/norsk-manager/test/simfleet"
)

// moveJobs is the number of jobs the move bench drains off one node at
// once, and moveTrials the single moves it times one after the other
// (--quick: moveQuick of each).
const (
	moveJobs   = 20
	moveTrials = 20
	moveQuick  = 5
)

// moveSample is what one migration_completed says, and when it arrived.
type moveSample struct {
	handover, overlap time.Duration
	at                time.Time
}

// runMove measures make-before-break moves (docs/design/placement.md,
// "Moves") on a fresh manager (fsync on) and a simulated fleet of two
// nodes whose runtime runs nothing (a job is "running" as soon as it is
// provisioned, so what is measured is the control plane's part): (1) a
// drain of a node with moveJobs auto-placed jobs, all moving at once; (2)
// moveTrials single MigrateJob moves of one job, one after the other. For
// each move the manager's migration_completed gives the hand-over (target
// seen running → the source's stop confirmed by its worker) and the
// overlap (target recorded → the same stop: how long both instances
// existed).
func runMove(ctx context.Context, e *env) error {
	jobs, trials := moveJobs, moveTrials
	if e.quick {
		jobs, trials = moveQuick, moveQuick
	}
	dir := e.dir("move")
	m, err := e.startManager(ctx, filepath.Join(dir, "data"), "")
	if err != nil {
		return err
	}
	defer m.stop()
	conn, api, err := dial(m.addr)
	if err != nil {
		return err
	}
	defer conn.Close()
	fleet, err := simfleet.Start(ctx, simfleet.Config{ManagerURLs: []string{m.addr}, Nodes: 2, Capacity: float64(4 * jobs),
		Zones: []string{"zone-a"}, Tags: map[string]string{"bench": "move"}, StateDir: filepath.Join(dir, "fleet"),
		Register: slotRegistrar(api)})
	if err != nil {
		return err
	}
	defer fleet.Close()
	if err := awaitNodesStarted(ctx, api, fleet, 2*time.Minute); err != nil {
		return err
	}
	nodes := fleet.Nodes()
	a, b := nodes[0].ID, nodes[1].ID
	ev, err := watchEvents(ctx, m.addr)
	if err != nil {
		return err
	}
	defer ev.close()
	ids := make([]string, jobs)
	for i := range ids {
		ids[i] = fmt.Sprintf("move-%03d", i)
	}
	// One reader of the stream: the jobs' first job_running, and every
	// migration_completed.
	running := &runningSet{at: map[string]time.Time{}, want: map[string]bool{}, all: make(chan struct{}), end: make(chan error, 1)}
	for _, id := range ids {
		running.want[id] = true
	}
	done := make(chan moveSample, jobs+trials)
	go func() {
		for {
			select {
			case te := <-ev.ch:
				running.add(te)
				if c := te.ev.GetMigrationCompleted(); c != nil {
					done <- moveSample{handover: msDuration(c.GetHandoverMs()), overlap: msDuration(c.GetOverlapMs()), at: te.at}
				}
			case <-ev.errCh:
				return
			}
		}
	}()

	// Every job on a: b is cordoned while they are placed.
	if _, err := api.CordonNode(ctx, &managerpb.CordonNodeRequest{NodeId: &commonpb.NodeId{NodeId: b}, Reason: "bench"}); err != nil {
		return fmt.Errorf("cordon: %w", err)
	}
	if _, errs := createPlacementJobs(ctx, m.addr, ids); errs > 0 {
		return fmt.Errorf("%d CreateJob errors", errs)
	}
	if _, err := running.wait(ctx, time.Minute); err != nil {
		return err
	}
	if _, err := api.UncordonNode(ctx, &commonpb.NodeId{NodeId: b}); err != nil {
		return fmt.Errorf("uncordon: %w", err)
	}
	t0 := time.Now()
	if _, err := api.DrainNode(ctx, &managerpb.DrainNodeRequest{NodeId: &commonpb.NodeId{NodeId: a}, Reason: "bench"}); err != nil {
		return fmt.Errorf("drain: %w", err)
	}
	drained, err := awaitMoves(ctx, done, jobs, 2*time.Minute)
	if err != nil {
		return fmt.Errorf("drain: %w", err)
	}
	drainTook := drained[len(drained)-1].at.Sub(t0)
	if _, err := api.UncordonNode(ctx, &commonpb.NodeId{NodeId: a}); err != nil {
		return fmt.Errorf("uncordon: %w", err)
	}

	// Single moves of one job, back and forth between the nodes.
	var single []moveSample
	var took []time.Duration
	role := "primary~1"
	for i := range trials {
		t1 := time.Now()
		resp, err := api.MigrateJob(ctx, &managerpb.MigrateJobRequest{JobId: &commonpb.JobId{JobId: ids[0]}, Role: role, TargetNodeId: "any"})
		if err != nil {
			return fmt.Errorf("MigrateJob %d: %w", i, err)
		}
		s, err := awaitMoves(ctx, done, 1, time.Minute)
		if err != nil {
			return fmt.Errorf("move %d: %w", i, err)
		}
		single = append(single, s[0])
		took = append(took, s[0].at.Sub(t1))
		role = resp.GetMigration().GetTargetRole()
	}
	printMove(e, jobs, drained, drainTook, single, took)
	return nil
}

// awaitMoves returns the next n samples from done, or an error after
// timeout.
func awaitMoves(ctx context.Context, done <-chan moveSample, n int, timeout time.Duration) ([]moveSample, error) {
	out := make([]moveSample, 0, n)
	deadline := time.After(timeout)
	for len(out) < n {
		select {
		case s := <-done:
			out = append(out, s)
		case <-deadline:
			return out, fmt.Errorf("%d of %d moves completed after %s", len(out), n, timeout)
		case <-ctx.Done():
			return out, ctx.Err()
		}
	}
	if len(out) == 0 {
		return nil, errors.New("no move")
	}
	return out, nil
}

func msDuration(v float64) time.Duration { return time.Duration(v * float64(time.Millisecond)) }

// printMove writes the move bench's tables.
func printMove(e *env, jobs int, drained []moveSample, drainTook time.Duration, single []moveSample, took []time.Duration) {
	row := func(name string, ss []moveSample, extra string) {
		var h, o []time.Duration
		for _, s := range ss {
			h, o = append(h, s.handover), append(o, s.overlap)
		}
		fmt.Fprintf(e.out, "| %s | %d | %s / %s / %s | %s / %s / %s | %s |\n", name, len(ss),
			fmtMs(ms(percentile(h, 50))), fmtMs(ms(percentile(h, 95))), fmtMs(ms(percentile(h, 100))),
			fmtMs(ms(percentile(o, 50))), fmtMs(ms(percentile(o, 95))), fmtMs(ms(percentile(o, 100))), extra)
	}
	fmt.Fprintf(e.out, "## Make-before-break moves (simulated runtime: running at provision)\n\n")
	fmt.Fprintf(e.out, "| moves | n | hand-over ms p50 / p95 / max | overlap ms p50 / p95 / max | |\n|---|---|---|---|---|\n")
	row(fmt.Sprintf("drain of %d jobs at once", jobs), drained, fmt.Sprintf("drain → last migration_completed %s ms", fmtMs(ms(drainTook))))
	row("single MigrateJob, one at a time", single, fmt.Sprintf("MigrateJob → migration_completed p50 %s ms", fmtMs(ms(percentile(took, 50)))))
	fmt.Fprintln(e.out)
}
