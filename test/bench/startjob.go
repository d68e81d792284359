package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/norsk-oss/norsk-manager/proto/commonpb"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
)

// eventTimeout bounds each wait for an event in startjob and register.
const eventTimeout = 30 * time.Second

// runStartJob measures, on a manager process and a real worker process
// (norsk-ctl --mode=worker, process runtime), the time from a StartJob call
// to the job_updated event whose newest history entry is job_running, and
// from StopJob to job_stopped, for e.trials start/stop cycles of one job
// running "sleep 3600".
func runStartJob(ctx context.Context, e *env) error {
	dir := e.dir("startjob")
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
	ev, err := watchEvents(ctx, m.addr)
	if err != nil {
		return err
	}
	defer ev.close()
	node, w, err := startWorker(ctx, e, api, ev, dir, m.addr)
	if err != nil {
		return err
	}
	defer w.stop()
	const jobID, role = "bench-sleep", "primary"
	job := &managerpb.Job{JobId: &commonpb.JobId{JobId: jobID}, Tags: map[string]string{"bench": "startjob"},
		Services: []*commonpb.Service{{Name: "sleeper", Command: "sleep 3600"}}}
	if _, err := api.CreateJob(ctx, job); err != nil {
		return fmt.Errorf("CreateJob: %w", err)
	}
	var call, running, stopped []time.Duration
	for i := range e.trials {
		c, r, s, err := startStopTrial(ctx, api, ev, jobID, role, node)
		if err != nil {
			return fmt.Errorf("trial %d: %w\nworker log:\n%s", i+1, err, w.tail())
		}
		call, running, stopped = append(call, c), append(running, r), append(stopped, s)
	}
	printStartJob(e, call, running, stopped)
	return nil
}

// startWorker registers a cluster slot, starts norsk-ctl --mode=worker on
// it and waits for node_started.
func startWorker(ctx context.Context, e *env, api managerpb.ManagerClient, ev *eventWatch, dir, addr string) (string, *child, error) {
	return startWorkerWith(ctx, e, api, ev, dir, addr, "bench-worker")
}

// startWorkerWith is startWorker for a slot named nodeName, with extra
// worker flags (the docker scenario's --runtime=docker …). The worker's
// state dir is dir/worker and its log dir/worker.log.
func startWorkerWith(ctx context.Context, e *env, api managerpb.ManagerClient, ev *eventWatch, dir, addr, nodeName string, extra ...string) (string, *child, error) {
	slot, err := api.RegisterClusterNode(ctx, &managerpb.RegisterClusterNodeRequest{NodeName: nodeName})
	if err != nil {
		return "", nil, fmt.Errorf("RegisterClusterNode: %w", err)
	}
	node := slot.GetNodeId().GetNodeId()
	port, err := freePort()
	if err != nil {
		return "", nil, err
	}
	bin, err := e.binaries(ctx)
	if err != nil {
		return "", nil, err
	}
	stateDir := filepath.Join(dir, "worker")
	if err := os.MkdirAll(stateDir, 0o700); err != nil {
		return "", nil, err
	}
	args := append([]string{"--mode=worker", "--token=" + slot.GetToken(), "--manager-url=" + addr,
		fmt.Sprintf("--listen=127.0.0.1:%d", port), "--state-dir=" + stateDir, "--log-level=warn"}, extra...)
	w, err := startChild("norsk-ctl --mode=worker", filepath.Join(dir, "worker.log"), filepath.Join(bin, "norsk-ctl"), args...)
	if err != nil {
		return "", nil, err
	}
	if _, err := ev.waitFor(ctx, eventTimeout, "node_started", func(x *managerpb.EventStreamEvent) bool {
		return nodeStarted(x, node)
	}); err != nil {
		_ = w.stop()
		return "", nil, fmt.Errorf("%w\nworker log:\n%s", err, w.tail())
	}
	return node, w, nil
}

// startStopTrial starts the job and waits until it runs, then stops it and
// waits until it has stopped. It returns the StartJob call latency, StartJob
// → job_running and StopJob → job_stopped.
func startStopTrial(ctx context.Context, api managerpb.ManagerClient, ev *eventWatch, job, role, node string) (call, running, stopped time.Duration, err error) {
	t0 := time.Now()
	_, err = api.StartJob(ctx, &managerpb.StartJobRequest{JobId: &commonpb.JobId{JobId: job}, Role: role, NodeId: &commonpb.NodeId{NodeId: node}})
	if err != nil {
		return 0, 0, 0, fmt.Errorf("StartJob: %w", err)
	}
	call = time.Since(t0)
	at, err := ev.waitFor(ctx, eventTimeout, "job_running", func(x *managerpb.EventStreamEvent) bool {
		return newestEntry(x, job, func(h *managerpb.JobHistoryEntry) bool { return h.GetJobRunning() != nil })
	})
	if err != nil {
		return 0, 0, 0, err
	}
	running = at.Sub(t0)
	t1 := time.Now()
	_, err = api.StopJob(ctx, &managerpb.StopJobRequest{JobId: &commonpb.JobId{JobId: job}, Role: role, NodeId: &commonpb.NodeId{NodeId: node}})
	if err != nil {
		return 0, 0, 0, fmt.Errorf("StopJob: %w", err)
	}
	at, err = ev.waitFor(ctx, eventTimeout, "job_stopped", func(x *managerpb.EventStreamEvent) bool {
		return newestEntry(x, job, func(h *managerpb.JobHistoryEntry) bool { return h.GetJobStopped() != nil })
	})
	if err != nil {
		return 0, 0, 0, err
	}
	return call, running, at.Sub(t1), nil
}

func printStartJob(e *env, call, running, stopped []time.Duration) {
	w := e.out
	fmt.Fprintln(w, "## startjob")
	fmt.Fprintln(w)
	fmt.Fprintf(w, "A norsk-manager process (fsync on) and a norsk-ctl --mode=worker process (process runtime) on a cluster slot; "+
		"one job with one service \"sleep 3600\"; %d sequential trials of StartJob → wait for job_running → StopJob → wait for job_stopped, "+
		"events received on an EventStream subscription on its own connection. Each trial adds 4 history entries to the job "+
		"(provisioned, running, stopping, stopped), so its record and every job_updated grow over the run.\n\n", e.trials)
	fmt.Fprintln(w, latencyHeader)
	latencyRow(w, "StartJob call returns", call, 0)
	latencyRow(w, "StartJob → job_updated (newest entry job_running)", running, 0)
	latencyRow(w, "StopJob → job_updated (newest entry job_stopped)", stopped, 0)
	if k := len(running) / 10; k >= 5 {
		fmt.Fprintf(w, "\nStartJob → job_running p50 over the first %d trials %s ms, over the last %d %s ms.\n", k,
			fmtMs(ms(percentile(running[:k], 50))), k, fmtMs(ms(percentile(running[len(running)-k:], 50))))
	}
	fmt.Fprintln(w)
	p99 := percentile(running, 99)
	fmt.Fprintf(w, "Target: StartJob → job_running p99 %s ms < 100 ms: %s\n\n", fmtMs(ms(p99)), met(p99 < 100*time.Millisecond))
}
