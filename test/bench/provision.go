package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/norsk-oss/norsk-manager/proto/commonpb"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
)

// provisionRounds bounds the rounds of runProvision (each needs its own
// mock worker process: the mock pool hands a URL out once).
const provisionRounds = 10

// provisionLinger is the bench tier's linger.
const provisionLinger = time.Second

// runProvision measures the engine's provisioning (issue 13 §1;
// docs/design/placement.md, "Provisioning and release") with the mock
// provider: a manager whose only pool tier has a mock provisioner and no
// node, and pre-started worker processes in its mock pool. Each round
// creates one auto-placed job (1 unit, "sleep 3600") and times CreateJob →
// node_provisioning (the engine decided and the node is recorded) and →
// job_running on the new node, then CompleteJob → node_released, less the
// tier's linger. A mock worker is already running when its node is
// created, so there is no boot time to subtract: the figures are the
// manager's part of what a cloud node adds to the instance's boot.
func runProvision(ctx context.Context, e *env) error {
	dir := e.dir("provision")
	rounds := min(e.trials, provisionRounds)
	bin, err := e.binaries(ctx)
	if err != nil {
		return err
	}
	var urls []string
	for i := range rounds {
		addr, w, err := startMockWorker(filepath.Join(bin, "norsk-ctl"), filepath.Join(dir, fmt.Sprintf("worker-%d", i)))
		if err != nil {
			return err
		}
		defer w.stop()
		urls = append(urls, addr)
	}
	m, err := e.startManager(ctx, filepath.Join(dir, "data"), "", "--mock-worker-urls", strings.Join(urls, ","))
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
	if _, err := api.CreatePool(ctx, &managerpb.Pool{Name: "bench", Tiers: []*managerpb.PoolTier{{Name: "mock", MaxNodes: uint32(rounds),
		LingerSeconds: uint32(provisionLinger / time.Second), Provisioner: &managerpb.PoolTier_Mock{Mock: &managerpb.MockTierProvisioner{
			Offering: &managerpb.TierInstanceType{Capacity: 4}}}}}}); err != nil {
		return fmt.Errorf("CreatePool: %w", err)
	}
	var decided, running, released []time.Duration
	for i := range rounds {
		d, r, rel, err := provisionRound(ctx, api, ev, fmt.Sprintf("prov-%d", i))
		if err != nil {
			return fmt.Errorf("round %d: %w\nmanager log:\n%s", i+1, err, m.child.tail())
		}
		decided, running, released = append(decided, d), append(running, r), append(released, rel)
	}
	w := e.out
	fmt.Fprintln(w, "## provision")
	fmt.Fprintln(w)
	fmt.Fprintf(w, "A norsk-manager process (fsync on) with a pool whose one tier has the mock provisioner (linger %s) and no node; %d "+
		"pre-started norsk-ctl --mode=worker processes in its mock pool (NORSK_MOCK_WORKER_URLS). %d sequential rounds: CreateJob of an "+
		"auto-placed 1-unit job → the engine creates a node for it → the job runs there → CompleteJob → the idle node is released. "+
		"The worker is up before its node exists, so no boot time is included (a cloud node adds its instance's boot).\n\n",
		provisionLinger, rounds, rounds)
	fmt.Fprintln(w, latencyHeader)
	latencyRow(w, "CreateJob → node_provisioning", decided, 0)
	latencyRow(w, "CreateJob → job_running on the new node", running, 0)
	latencyRow(w, "CompleteJob → node_released, less the linger", released, 0)
	fmt.Fprintln(w)
	return nil
}

// provisionRound runs one round of runProvision for job.
func provisionRound(ctx context.Context, api managerpb.ManagerClient, ev *eventWatch, job string) (decided, running, released time.Duration, err error) {
	t0 := time.Now()
	if _, err = api.CreateJob(ctx, &managerpb.Job{JobId: &commonpb.JobId{JobId: job}, Tags: map[string]string{"pool": "bench"},
		AutoPlacement: &managerpb.AutoPlacement{Requirements: &managerpb.JobRequirements{RequiredCapacity: 1}},
		Services:      []*commonpb.Service{{Name: "sleeper", Command: "sleep 3600"}}}); err != nil {
		return 0, 0, 0, fmt.Errorf("CreateJob: %w", err)
	}
	var node string
	at, err := ev.waitFor(ctx, eventTimeout, "node_provisioning", func(x *managerpb.EventStreamEvent) bool {
		p := x.GetNodeProvisioning()
		for _, k := range p.GetForJobs() {
			if k == job+"/primary" {
				node = p.GetNodeId().GetNodeId()
				return true
			}
		}
		return false
	})
	if err != nil {
		return 0, 0, 0, err
	}
	decided = at.Sub(t0)
	if at, err = ev.waitFor(ctx, eventTimeout, "job_running", func(x *managerpb.EventStreamEvent) bool {
		return newestEntry(x, job, func(h *managerpb.JobHistoryEntry) bool { return h.GetJobRunning() != nil })
	}); err != nil {
		return 0, 0, 0, err
	}
	running = at.Sub(t0)
	t1 := time.Now()
	if _, err = api.CompleteJob(ctx, &commonpb.JobId{JobId: job}); err != nil {
		return 0, 0, 0, fmt.Errorf("CompleteJob: %w", err)
	}
	if at, err = ev.waitFor(ctx, eventTimeout, "node_released", func(x *managerpb.EventStreamEvent) bool {
		return x.GetNodeReleased().GetNodeId().GetNodeId() == node
	}); err != nil {
		return 0, 0, 0, err
	}
	return decided, running, at.Sub(t1) - provisionLinger, nil
}

// startMockWorker starts a worker without a token (a mock-pool worker) of
// 4 units with its state in stateDir and returns its address once it
// listens.
func startMockWorker(ctlBin, stateDir string) (string, *child, error) {
	port, err := freePort()
	if err != nil {
		return "", nil, err
	}
	if err := os.MkdirAll(stateDir, 0o700); err != nil {
		return "", nil, err
	}
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	w, err := startChild("norsk-ctl --mode=worker", stateDir+".log", ctlBin, "--mode=worker", "--listen="+addr,
		"--state-dir="+stateDir, "--log-level=warn", "--capacity=4", "--stop-grace=2s")
	if err != nil {
		return "", nil, err
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
			return addr, w, nil
		}
		if time.Now().After(deadline) {
			_ = w.stop()
			return "", nil, fmt.Errorf("mock worker on %s not listening: %w\n%s", addr, err, w.tail())
		}
		time.Sleep(50 * time.Millisecond)
	}
}
