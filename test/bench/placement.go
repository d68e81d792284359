package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/norsk-oss/norsk-manager/proto/commonpb"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
	"github.com/norsk-oss/norsk-manager/test/simfleet"
)

// fleetSize is one placement run: simulated nodes and auto-placed jobs.
type fleetSize struct{ nodes, jobs int }

func (s fleetSize) String() string { return fmt.Sprintf("%dx%d", s.nodes, s.jobs) }

// parseFleetSizes parses --fleet-sizes: "NODESxJOBS,…".
func parseFleetSizes(v string) ([]fleetSize, error) {
	var out []fleetSize
	for _, f := range strings.Split(v, ",") {
		n, j, ok := strings.Cut(strings.TrimSpace(f), "x")
		nodes, err1 := strconv.Atoi(n)
		jobs, err2 := strconv.Atoi(j)
		if !ok || err1 != nil || err2 != nil || nodes < 1 || jobs < 1 {
			return nil, fmt.Errorf("--fleet-sizes: %q is not NODESxJOBS (e.g. 100x1000) with positive counts", f)
		}
		out = append(out, fleetSize{nodes: nodes, jobs: jobs})
	}
	return out, nil
}

// placementCreators is the number of concurrent CreateJob clients (one
// connection each).
const placementCreators = 32

// placementZones are the zones the simulated nodes are spread over.
var placementZones = []string{"zone-a", "zone-b", "zone-c"}

// placementResult is what one run measured.
type placementResult struct {
	size fleetSize
	// capacity is each node's capacity in units (jobs need 1 each).
	capacity float64
	// connect: slots registered and every node STARTED.
	connect time.Duration
	// created: first CreateJob sent → last acknowledged.
	created time.Duration
	// allRunning: first CreateJob sent → last job_running received.
	allRunning time.Duration
	// startWindow: the first start received by the fleet → the last.
	startWindow time.Duration
	// latencies: CreateJob sent → its job_running received, per job.
	latencies  []time.Duration
	createErrs int
	missing    int // jobs not running at the deadline
	fleet      simfleet.Stats
	before     scrape
	after      scrape
	// cpu is the manager's CPU time from the first CreateJob to the last
	// job_running.
	cpu     time.Duration
	profile string // CPU profile path, with --manager-cpu-profile
	// heap is the manager's heap profile path once every job ran, with
	// --manager-heap-profile.
	heap string
	// mem is the manager's RSS once every job ran (peak: since it started,
	// the bring-up of the nodes included); memErr why it could not be read.
	mem    procMem
	memErr error
}

// registerRateFlags are the norsk-manager flags of the benches whose
// simulated workers all register from 127.0.0.1: the registration rate
// limit per source address (--register-rate, 1/s after a burst of 20 by
// default; docs/design/security.md, "Limits") is meant for one real
// address per worker or a few behind a NAT, and would let 1,000 simulated
// workers in at one per second (257 of 996 in 3 minutes). "0" is its
// documented "no limit"; nothing else about the manager changes.
var registerRateFlags = []string{"--register-rate", "0"}

// runPlacement measures the placement engine on simulated fleets: for
// each --fleet-sizes entry a fresh norsk-manager (fsync on), a simulated
// fleet (test/simfleet) of real worker agents in the bench process whose
// runtime runs nothing, and auto-placed jobs of 1 unit created by 32
// clients; it waits for every job's job_running on the event stream.
func runPlacement(ctx context.Context, e *env) error {
	var results []placementResult
	for _, sz := range e.fleetSizes {
		r, err := placementRun(ctx, e, sz)
		if err != nil {
			return fmt.Errorf("%s: %w", sz, err)
		}
		results = append(results, r)
	}
	printPlacement(e, results)
	return nil
}

func placementRun(ctx context.Context, e *env, sz fleetSize) (placementResult, error) {
	r := placementResult{size: sz, capacity: max(10, float64(2*sz.jobs/sz.nodes))}
	dir := e.dir("placement-" + sz.String())
	port, err := freePort()
	if err != nil {
		return r, err
	}
	metricsAddr := fmt.Sprintf("127.0.0.1:%d", port)
	extra := append([]string{"--metrics-addr", metricsAddr}, registerRateFlags...)
	if e.cpuProfile || e.heapProfile {
		extra = append(extra, "--enable-debug")
	}
	m, err := e.startManager(ctx, filepath.Join(dir, "data"), "", extra...)
	if err != nil {
		return r, err
	}
	defer m.stop()
	conn, api, err := dial(m.addr)
	if err != nil {
		return r, err
	}
	defer conn.Close()

	t0 := time.Now()
	fleet, err := simfleet.Start(ctx, simfleet.Config{ManagerURLs: []string{m.addr}, Nodes: sz.nodes, Capacity: r.capacity,
		Zones: placementZones, Tags: map[string]string{"bench": "placement"}, StateDir: filepath.Join(dir, "fleet"),
		Register: slotRegistrar(api)})
	if err != nil {
		return r, err
	}
	defer fleet.Close()
	if err := awaitNodesStarted(ctx, api, fleet, 3*time.Minute); err != nil {
		return r, err
	}
	r.connect = time.Since(t0)

	ev, err := watchEvents(ctx, m.addr)
	if err != nil {
		return r, err
	}
	defer ev.close()
	ids := make([]string, sz.jobs)
	for i := range ids {
		ids[i] = fmt.Sprintf("place-%s-%05d", sz, i)
	}
	running := collectRunning(ev, ids)
	if r.before, err = scrapeMetrics(ctx, metricsAddr); err != nil {
		return r, err
	}
	cpu0 := cpuTime(m.cmd.Process.Pid)
	var profileDone func() error
	if e.cpuProfile {
		r.profile = filepath.Join(e.scratch, fmt.Sprintf("placement-%s.pprof", sz))
		profileDone = fetchProfile(ctx, metricsAddr, r.profile, 30*time.Second)
	}

	start := time.Now()
	sent, errs := createPlacementJobs(ctx, m.addr, ids)
	r.created, r.createErrs = time.Since(start), errs
	deadline := max(time.Minute, time.Duration(sz.jobs)*20*time.Millisecond)
	at, waitErr := running.wait(ctx, deadline)
	r.cpu = cpuTime(m.cmd.Process.Pid) - cpu0
	if r.after, err = scrapeMetrics(ctx, metricsAddr); err != nil {
		return r, err
	}
	r.fleet = fleet.Stats()
	for i, id := range ids {
		t, ok := at[id]
		if !ok {
			r.missing++
			continue
		}
		r.latencies = append(r.latencies, t.Sub(sent[i]))
		r.allRunning = max(r.allRunning, t.Sub(start))
	}
	r.mem, r.memErr = readProcMem(m.cmd.Process.Pid)
	if e.heapProfile {
		r.heap = filepath.Join(e.scratch, fmt.Sprintf("placement-heap-%s.pprof", sz))
		if err := fetchHeapProfile(ctx, metricsAddr, r.heap); err != nil {
			fmt.Fprintf(os.Stderr, "bench: placement %s: %v\n", sz, err)
			r.heap = ""
		}
	}
	if n := len(r.fleet.StartTimes); n > 0 {
		r.startWindow = r.fleet.StartTimes[n-1].Sub(r.fleet.StartTimes[0])
	}
	if profileDone != nil {
		if err := profileDone(); err != nil {
			fmt.Fprintf(os.Stderr, "bench: placement %s: CPU profile: %v\n", sz, err)
			r.profile = ""
		}
	}
	if waitErr != nil {
		fmt.Fprintf(os.Stderr, "bench: placement %s: %v\n", sz, waitErr)
	}
	return r, nil
}

// awaitNodesStarted polls ListNodes until every node of the fleet is
// connected and STARTED.
func awaitNodesStarted(ctx context.Context, api managerpb.ManagerClient, fleet *simfleet.Fleet, timeout time.Duration) error {
	want := map[string]bool{}
	for _, n := range fleet.Nodes() {
		want[n.ID] = true
	}
	deadline := time.Now().Add(timeout)
	for {
		resp, err := api.ListNodes(ctx, &managerpb.ListNodesRequest{})
		up := 0
		if err == nil {
			for _, n := range resp.GetNodes() {
				if want[n.GetMetadata().GetNodeId().GetNodeId()] && n.GetConnected() && n.GetState() == managerpb.NodeLifecycle_NODE_LIFECYCLE_STARTED {
					up++
				}
			}
		}
		if up == len(want) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d of %d simulated nodes STARTED after %s (last ListNodes error: %v; agents stopped: %v)", up, len(want), timeout, err, fleet.Errors())
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// runningSet records the first job_running of each watched job.
type runningSet struct {
	mu   sync.Mutex
	at   map[string]time.Time // guarded by mu
	want map[string]bool
	all  chan struct{} // closed when every watched job ran; only ever closed
	end  chan error    // the event stream's end, once
}

// collectRunning follows ev in the background (until ev is closed),
// recording the first job_updated whose newest history entry is
// job_running for each of ids.
func collectRunning(ev *eventWatch, ids []string) *runningSet {
	s := &runningSet{at: map[string]time.Time{}, want: map[string]bool{}, all: make(chan struct{}), end: make(chan error, 1)}
	for _, id := range ids {
		s.want[id] = true
	}
	go func() {
		for {
			select {
			case te := <-ev.ch:
				s.add(te)
			case err := <-ev.errCh:
				s.end <- err
				return
			}
		}
	}()
	return s
}

func (s *runningSet) add(te timedEvent) {
	jwh := te.ev.GetJobUpdated().GetJobWithHistory()
	id := jwh.GetJob().GetJobId().GetJobId()
	h := jwh.GetHistoryEntry()
	if !s.want[id] || len(h) == 0 || h[len(h)-1].GetJobRunning() == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, seen := s.at[id]; seen {
		return
	}
	s.at[id] = te.at
	if len(s.at) == len(s.want) {
		close(s.all)
	}
}

// wait waits until every job ran, the stream ends or timeout passes, and
// returns the times seen so far.
func (s *runningSet) wait(ctx context.Context, timeout time.Duration) (map[string]time.Time, error) {
	var err error
	select {
	case <-s.all:
	case e := <-s.end:
		err = fmt.Errorf("event stream ended: %w", e)
	case <-time.After(timeout):
		err = fmt.Errorf("not every job running within %s", timeout)
	case <-ctx.Done():
		err = ctx.Err()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]time.Time, len(s.at))
	for k, v := range s.at {
		out[k] = v
	}
	return out, err
}

// createPlacementJobs creates the jobs with placementCreators clients and
// returns when each was sent, and the number of failed calls.
func createPlacementJobs(ctx context.Context, addr string, ids []string) ([]time.Time, int) {
	sent := make([]time.Time, len(ids))
	next := make(chan int)
	var mu sync.Mutex
	errs := 0
	var wg sync.WaitGroup
	for range placementCreators {
		conn, api, err := dial(addr)
		if err != nil {
			mu.Lock()
			errs++
			mu.Unlock()
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer conn.Close()
			for i := range next {
				sent[i] = time.Now()
				if _, err := api.CreateJob(ctx, placementJob(ids[i])); err != nil {
					mu.Lock()
					errs++
					mu.Unlock()
				}
			}
		}()
	}
	for i := range ids {
		next <- i
	}
	close(next)
	wg.Wait()
	return sent, errs
}

// placementJob is an auto-placed job of 1 unit whose one service the
// simulated runtime never runs.
func placementJob(id string) *managerpb.Job {
	return &managerpb.Job{JobId: &commonpb.JobId{JobId: id}, Tags: map[string]string{"bench": "placement"},
		Services:      []*commonpb.Service{{Name: "sim", Command: "true", Restart: commonpb.Service_NEVER}},
		AutoPlacement: &managerpb.AutoPlacement{Requirements: &managerpb.JobRequirements{RequiredCapacity: 1}}}
}

// fetchProfile takes a CPU profile of the manager (its /debug/pprof,
// --enable-debug) for d in the background; the returned func waits for it
// and reports an error if it failed.
func fetchProfile(ctx context.Context, addr, path string, d time.Duration) func() error {
	done := make(chan error, 1)
	go func() {
		url := fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", addr, int(d.Seconds()))
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			done <- err
			return
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			done <- err
			return
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			done <- fmt.Errorf("GET %s: %s", url, resp.Status)
			return
		}
		f, err := os.Create(path)
		if err != nil {
			done <- err
			return
		}
		_, err = f.ReadFrom(resp.Body)
		done <- errors.Join(err, f.Close())
	}()
	return func() error { return <-done }
}

// slotRegistrar registers each simulated node as a cluster slot on the
// manager api talks to (simfleet.Config.Register): its node id and token.
func slotRegistrar(api managerpb.ManagerClient) func(ctx context.Context, name string, tags map[string]string) (string, string, error) {
	return func(ctx context.Context, name string, tags map[string]string) (string, string, error) {
		resp, err := api.RegisterClusterNode(ctx, &managerpb.RegisterClusterNodeRequest{NodeName: name, Tags: tags})
		return resp.GetNodeId().GetNodeId(), resp.GetToken(), err
	}
}
