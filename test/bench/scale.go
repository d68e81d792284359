package main

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/norsk-oss/norsk-manager/proto/commonpb"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
	"github.com/norsk-oss/norsk-manager/test/simfleet"
)

// The scale curve (issue 22 §3): one norsk-manager that grows through
// --stored sizes. At each size the store holds that many jobs, 9 in 10
// completed (CreateJob of the createjob bench's ~1 KB job, then
// CompleteJob: state POST with a job_completed entry) and 1 in 10
// auto-placed (1 unit) and running on a simulated fleet; then the bench
// measures, on a quiet manager, the engine's idle passes and, under
// scaleClients closed-loop CreateJob clients, the CreateJob rate, the
// manager's CPU per write and the passes during the writes, and the
// manager's RSS.

// scaleClients is the number of CreateJob clients of a measured window.
const scaleClients = 16

// scalePreloadClients is the number of concurrent clients of the preload.
const scalePreloadClients = 64

// scaleIdle is how long the quiet manager's passes are watched at each
// size at least (the engine passes every 500 ms when nothing happens), and
// scaleIdlePasses how many passes it waits for beyond that, for at most
// scaleIdleMax: a pass over 100,000 records takes seconds, and the engine
// waits 3 times a pass after each.
const (
	scaleIdle       = 3 * time.Second
	scaleIdlePasses = 2
	scaleIdleMax    = 60 * time.Second
)

// scaleWarmup is the CreateJobs of each window's warm-up (not counted).
const scaleWarmup = 100

// scaleWrites is the CreateJobs of one measured window at stored: a tenth
// of the store, at least 200 and at most 3,000, so that the windows do not
// outgrow the smaller sizes (the table says how many jobs were stored at
// the start and at the end of the windows).
func scaleWrites(stored int) int { return min(max(stored/10, 200), 3000) }

// scaleRow is what one stored size measured.
type scaleRow struct {
	stored, storedEnd int
	completed, placed int
	preloaded         int // jobs the preload of this size created
	preload           time.Duration
	preloadRetries    int
	runs              []scaleRun
	idleBefore        scrape
	idleAfter         scrape
	idleCPU           time.Duration
	idleFor           time.Duration // how long the idle passes were watched
	writesBefore      scrape
	writesAfter       scrape
	mem               procMem
	memErr            error
	heap              string
}

// scaleRun is one measured window.
type scaleRun struct {
	st      runStats
	took    time.Duration
	cpu     time.Duration // the manager's
	writes  int
	cpuMsPW float64 // CPU ms per acknowledged write
}

// scaleJobID names preloaded job i; i%10 == 9 is an auto-placed one.
func scaleJobID(i int) string {
	if i%10 == 9 {
		return fmt.Sprintf("scale-placed-%07d", i)
	}
	return fmt.Sprintf("scale-done-%07d", i)
}

func runScale(ctx context.Context, e *env) error {
	sizes := slices.Sorted(slices.Values(e.stored))
	largest := sizes[len(sizes)-1]
	dir := e.dir("scale")
	port, err := freePort()
	if err != nil {
		return err
	}
	metricsAddr := fmt.Sprintf("127.0.0.1:%d", port)
	extra := append([]string{"--metrics-addr", metricsAddr}, registerRateFlags...)
	if e.heapProfile {
		extra = append(extra, "--enable-debug")
	}
	m, err := e.startManager(ctx, filepath.Join(dir, "data"), "", extra...)
	if err != nil {
		return err
	}
	defer m.stop()
	conn, api, err := dial(m.addr)
	if err != nil {
		return err
	}
	defer conn.Close()

	maxPlaced := largest / 10
	nodes := min(max(maxPlaced/100, 10), 100)
	capacity := float64(2*maxPlaced/nodes + 10)
	fleet, err := simfleet.Start(ctx, simfleet.Config{ManagerURLs: []string{m.addr}, Nodes: nodes, Capacity: capacity,
		Zones: placementZones, Tags: map[string]string{"bench": "placement"}, StateDir: filepath.Join(dir, "fleet"),
		Register: slotRegistrar(api)})
	if err != nil {
		return err
	}
	defer fleet.Close()
	if err := awaitNodesStarted(ctx, api, fleet, 3*time.Minute); err != nil {
		return err
	}

	var rows []scaleRow
	have, extraJobs := 0, 0 // preloaded; created by the windows
	for _, n := range sizes {
		row := scaleRow{stored: n}
		if want := n - extraJobs; want > have {
			started := time.Now()
			retries, err := preload(ctx, m.addr, have, want)
			if err != nil {
				return fmt.Errorf("preload to %d jobs: %w", n, err)
			}
			row.preload, row.preloadRetries, row.preloaded = time.Since(started), retries, want-have
			have = want
		}
		row.placed = have / 10 // ids i%10 == 9 below have
		row.completed = have - row.placed
		if err := awaitRunning(ctx, fleet, row.placed, 5*time.Minute); err != nil {
			return err
		}
		row.stored = have + extraJobs
		if err := scaleMeasure(ctx, e, m, metricsAddr, api, &row); err != nil {
			return fmt.Errorf("%d stored: %w", n, err)
		}
		extraJobs += row.storedEnd - row.stored
		if e.heapProfile && n == largest {
			row.heap = filepath.Join(e.scratch, fmt.Sprintf("scale-heap-%d.pprof", n))
			if err := fetchHeapProfile(ctx, metricsAddr, row.heap); err != nil {
				fmt.Fprintf(os.Stderr, "bench: scale %d: %v\n", n, err)
				row.heap = ""
			}
		}
		rows = append(rows, row)
		fmt.Fprintf(os.Stderr, "bench: scale: %d stored measured\n", n)
	}
	printScale(e, rows, nodes, capacity, fleet.Stats())
	return nil
}

// scaleMeasure measures one size: the idle passes, then e.runs windows of
// CreateJobs, then the RSS.
func scaleMeasure(ctx context.Context, e *env, m *manager, metricsAddr string, api managerpb.ManagerClient, row *scaleRow) error {
	pid := m.cmd.Process.Pid
	var err error
	if row.idleBefore, err = scrapeMetrics(ctx, metricsAddr); err != nil {
		return err
	}
	cpu0, t0 := cpuTime(pid), time.Now()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(250 * time.Millisecond): // a measurement window, not a synchronisation
		}
		if row.idleAfter, err = scrapeMetrics(ctx, metricsAddr); err != nil {
			return err
		}
		d := time.Since(t0)
		passes := row.idleAfter.passCount - row.idleBefore.passCount
		if d >= scaleIdleMax || (d >= scaleIdle && (passes >= scaleIdlePasses || row.idleAfter.passBuckets[math.Inf(1)] == 0 && passes == 0 && d >= 2*scaleIdle)) {
			break
		}
	}
	row.idleCPU, row.idleFor = cpuTime(pid)-cpu0, time.Since(t0)
	cl, err := newCreateClients(m.addr, scaleClients)
	if err != nil {
		return err
	}
	defer cl.close()
	prefix := fmt.Sprintf("scale-w%07d", row.stored)
	if row.writesBefore, err = scrapeMetrics(ctx, metricsAddr); err != nil {
		return err
	}
	created := 0
	for r := range e.runs {
		cl.count(ctx, fmt.Sprintf("%s-r%d-warm", prefix, r), scaleWarmup)
		created += scaleWarmup
		n := scaleWrites(row.stored)
		c0, t0 := cpuTime(pid), time.Now()
		st := cl.count(ctx, fmt.Sprintf("%s-r%d", prefix, r), n)
		run := scaleRun{st: st, took: time.Since(t0), cpu: cpuTime(pid) - c0, writes: n}
		created += n
		if st.ok > 0 {
			run.st.rate = float64(st.ok) / run.took.Seconds()
			run.cpuMsPW = ms(run.cpu) / float64(st.ok)
		}
		row.runs = append(row.runs, run)
	}
	if row.writesAfter, err = scrapeMetrics(ctx, metricsAddr); err != nil {
		return err
	}
	row.storedEnd = row.stored + created
	row.mem, row.memErr = readProcMem(pid)
	return nil
}

// createClients are CreateJob clients, one connection each.
type createClients struct {
	apis  []managerpb.ManagerClient
	close func()
}

func newCreateClients(addr string, n int) (*createClients, error) {
	c := &createClients{close: func() {}}
	var closers []func() error
	c.close = func() {
		for _, f := range closers {
			_ = f()
		}
	}
	for range n {
		conn, api, err := dial(addr)
		if err != nil {
			c.close()
			return nil, err
		}
		closers = append(closers, conn.Close)
		c.apis = append(c.apis, api)
	}
	return c, nil
}

// count sends n CreateJobs of the createjob bench's job (ids prefix-i)
// from every client at once, each client sending its next as soon as its
// previous returned, and returns their latencies and errors.
func (c *createClients) count(ctx context.Context, prefix string, n int) runStats {
	var next atomic.Int64
	lat := make([][]time.Duration, len(c.apis))
	errs := make([]int, len(c.apis))
	var firstErr atomic.Pointer[error]
	var wg sync.WaitGroup
	for k, api := range c.apis {
		wg.Go(func() {
			for i := int(next.Add(1) - 1); i < n && ctx.Err() == nil; i = int(next.Add(1) - 1) {
				cctx, cancel := context.WithTimeout(ctx, callTimeout)
				t0 := time.Now()
				_, err := api.CreateJob(cctx, benchJob(fmt.Sprintf("%s-%05d", prefix, i), i))
				d := time.Since(t0)
				cancel()
				if err != nil {
					errs[k]++
					firstErr.CompareAndSwap(nil, &err)
					continue
				}
				lat[k] = append(lat[k], d)
			}
		})
	}
	wg.Wait()
	st := summarize(slices.Concat(lat...))
	for _, x := range errs {
		st.errs += x
	}
	if p := firstErr.Load(); p != nil {
		st.firstErr = *p
	}
	return st
}

// preload creates jobs from..to-1 with scalePreloadClients clients: 9 in
// 10 are created and completed, 1 in 10 (i%10 == 9) created auto-placed.
// It prints its progress every 10 s and returns the retried calls.
func preload(ctx context.Context, addr string, from, to int) (int, error) {
	var next, done, retries atomic.Int64
	next.Store(int64(from))
	errCh := make(chan error, scalePreloadClients)
	stop := make(chan struct{})
	go func() {
		t := time.NewTicker(10 * time.Second)
		defer t.Stop()
		start := time.Now()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
				d := done.Load()
				fmt.Fprintf(os.Stderr, "bench: scale: preloaded %d of %d jobs (%.0f/s)\n", int64(from)+d, to, float64(d)/time.Since(start).Seconds())
			}
		}
	}()
	defer close(stop)
	var wg sync.WaitGroup
	for range scalePreloadClients {
		conn, api, err := dial(addr)
		if err != nil {
			return 0, err
		}
		defer conn.Close()
		wg.Go(func() {
			for i := int(next.Add(1) - 1); i < to; i = int(next.Add(1) - 1) {
				if err := preloadOne(ctx, api, i, &retries); err != nil {
					errCh <- err
					return
				}
				done.Add(1)
			}
		})
	}
	wg.Wait()
	close(errCh)
	return int(retries.Load()), <-errCh
}

// preloadOne creates job i (and completes it unless it is auto-placed),
// retrying each call up to 5 times: AlreadyExists after a retried
// CreateJob and FailedPrecondition after a retried CompleteJob count as
// done (the first attempt had gone through).
func preloadOne(ctx context.Context, api managerpb.ManagerClient, i int, retries *atomic.Int64) error {
	id := scaleJobID(i)
	job := benchJob(id, i)
	if i%10 == 9 {
		job = placementJob(id)
	}
	call := func(name string, again codes.Code, f func(context.Context) error) error {
		var err error
		for attempt := range 5 {
			if attempt > 0 {
				retries.Add(1)
				time.Sleep(100 * time.Millisecond) // back-off of a retried call
			}
			cctx, cancel := context.WithTimeout(ctx, callTimeout)
			err = f(cctx)
			cancel()
			if err == nil || (attempt > 0 && status.Code(err) == again) {
				return nil
			}
			if ctx.Err() != nil {
				return ctx.Err()
			}
		}
		return fmt.Errorf("%s %s: %w", name, id, err)
	}
	if err := call("CreateJob", codes.AlreadyExists, func(ctx context.Context) error { _, err := api.CreateJob(ctx, job); return err }); err != nil {
		return err
	}
	if i%10 == 9 {
		return nil
	}
	return call("CompleteJob", codes.FailedPrecondition, func(ctx context.Context) error {
		_, err := api.CompleteJob(ctx, &commonpb.JobId{JobId: id})
		return err
	})
}

// awaitRunning polls the fleet until want jobs run on it.
func awaitRunning(ctx context.Context, fleet *simfleet.Fleet, want int, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		st := fleet.Stats()
		if st.Running >= want {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d of %d auto-placed jobs running on the simulated fleet after %s (agents stopped: %v)", st.Running, want, timeout, fleet.Errors())
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
}
