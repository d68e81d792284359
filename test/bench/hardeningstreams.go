package main

import (
	"context"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/norsk-oss/norsk-manager/proto/commonpb"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
)

// The flood of hardeningFlood (issue 21 §4): floodStreams event streams on
// floodConns connections stop reading, then floodJobs jobs of floodJobBytes
// each are created. A JobById is timed every floodProbeEvery meanwhile (at
// most floodProbeMax calls), and the manager sampled every floodSampleEvery.
const (
	floodStreams     = 64
	floodConns       = 4
	floodJobs        = 20
	floodJobBytes    = 900 << 10
	floodProbeEvery  = 100 * time.Millisecond
	floodProbeMax    = 1000
	floodSampleEvery = 200 * time.Millisecond
	floodReadTimeout = 60 * time.Second
	// floodStable: samples in a row with the same number of streams served
	// and the same RSS (to the MiB) that count as settled.
	floodStable = 10
)

// memSample is one sample of the manager: VmRSS, and from its metrics the
// Go heap (go_memstats_heap_alloc_bytes: live objects and garbage not yet
// collected), the GC's heap goal (go_memstats_next_gc_bytes: at GOGC=100
// twice what the last collection found live) and the event streams it
// serves; heap, goal and subs are -1 when the scrape failed.
type memSample struct {
	at              time.Time
	phase           string // "flood" (from the first CreateJob until settled) or "read" (the streams read out)
	rss, heap, goal int64
	subs            int64
	scrapeFail      bool
}

// floodResult is what hardeningFlood measured.
type floodResult struct {
	base      memSample // after the streams received their first message
	samples   []memSample
	settled   bool          // the streams settled before the settle bound
	floodTook time.Duration // the 20 CreateJob calls
	createLat []time.Duration
	probeLat  []time.Duration
	probeErrs int
	// The streams when read after the flood: cut with ResourceExhausted
	// naming the budget and a resume index, ended otherwise (code and
	// message of the first), and those that delivered every job.
	cutBudget, cutOther, complete int
	otherErr                      string
	openAtSettle                  int64 // norsk_manager_event_subscribers when settled (-1: unknown)
}

// hardeningFlood runs a manager with --event-stream-memory at its default
// and --metrics-addr, opens floodStreams event streams that receive their
// first message and stop reading, creates floodJobs jobs of floodJobBytes
// (manager_configuration) while sampling the manager's memory and timing
// JobById on another connection, waits for the streams to settle (at most
// settle), then reads every stream to see which were cut.
func hardeningFlood(ctx context.Context, e *env, settle time.Duration) (*floodResult, error) {
	dir := e.dir("hardening-streams")
	mport, err := freePort()
	if err != nil {
		return nil, err
	}
	maddr := fmt.Sprintf("127.0.0.1:%d", mport)
	m, err := e.startManager(ctx, filepath.Join(dir, "data"), "", "--metrics-addr", maddr)
	if err != nil {
		return nil, err
	}
	defer m.stop()
	pid := m.cmd.Process.Pid
	sctx, cancelStreams := context.WithCancel(ctx)
	defer cancelStreams()
	// Clients with fixed 64 KiB flow-control windows, as the in-process
	// test (cluster/agent): what a client that stops reading lets the
	// manager push into its socket stays small.
	streams := make([]managerpb.Manager_EventStreamClient, floodStreams)
	for i := range floodConns {
		conn, err := grpc.NewClient(m.addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithInitialWindowSize(64<<10), grpc.WithInitialConnWindowSize(64<<10),
			grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(8<<20)))
		if err != nil {
			return nil, err
		}
		defer conn.Close()
		api := managerpb.NewManagerClient(conn)
		for k := i; k < floodStreams; k += floodConns {
			s, err := api.EventStream(sctx, &managerpb.EventStreamRequest{})
			if err != nil {
				return nil, fmt.Errorf("EventStream %d: %w", k, err)
			}
			if _, err := s.Recv(); err != nil {
				return nil, fmt.Errorf("EventStream %d: first message: %w", k, err)
			}
			streams[k] = s // and it stops reading
		}
	}
	res := &floodResult{openAtSettle: -1}
	res.base = sampleManager(ctx, pid, maddr, "")

	conn, api, err := dial(m.addr)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	probeConn, probe, err := dial(m.addr)
	if err != nil {
		return nil, err
	}
	defer probeConn.Close()
	if _, err := api.CreateJob(ctx, &managerpb.Job{JobId: &commonpb.JobId{JobId: "probe"}, Tags: map[string]string{"bench": "hardening"}}); err != nil {
		return nil, fmt.Errorf("CreateJob probe: %w", err)
	}

	var mu sync.Mutex
	phase := "flood"
	stopSampling, sampled := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(sampled)
		t := time.NewTicker(floodSampleEvery)
		defer t.Stop()
		for {
			select {
			case <-stopSampling:
				return
			case <-t.C:
				mu.Lock()
				p := phase
				mu.Unlock()
				s := sampleManager(ctx, pid, maddr, p)
				mu.Lock()
				res.samples = append(res.samples, s)
				mu.Unlock()
			}
		}
	}()
	stopProbe, probed := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(probed)
		t := time.NewTicker(floodProbeEvery)
		defer t.Stop()
		for range floodProbeMax {
			select {
			case <-stopProbe:
				return
			case <-t.C:
			}
			cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			t0 := time.Now()
			_, err := probe.JobById(cctx, &commonpb.JobId{JobId: "probe"})
			d := time.Since(t0)
			cancel()
			mu.Lock()
			if err != nil {
				res.probeErrs++
			} else {
				res.probeLat = append(res.probeLat, d)
			}
			mu.Unlock()
		}
	}()

	payload := strings.Repeat("x", floodJobBytes)
	t0 := time.Now()
	for i := range floodJobs {
		c0 := time.Now()
		if _, err := api.CreateJob(ctx, &managerpb.Job{JobId: &commonpb.JobId{JobId: fmt.Sprintf("big-%02d", i)},
			Tags: map[string]string{"bench": "hardening"}, ManagerConfiguration: payload}); err != nil {
			close(stopProbe)
			close(stopSampling)
			<-probed
			<-sampled
			return nil, fmt.Errorf("CreateJob big-%02d: %w\nmanager log:\n%s", i, err, m.tail())
		}
		res.createLat = append(res.createLat, time.Since(c0))
	}
	res.floodTook = time.Since(t0)

	// Settled: the streams served and the RSS stay the same over
	// floodStable samples.
	deadline := time.Now().Add(settle)
	for time.Now().Before(deadline) && !res.settled {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(floodSampleEvery):
		}
		mu.Lock()
		res.settled = stable(res.samples)
		mu.Unlock()
	}
	close(stopProbe)
	<-probed
	mu.Lock()
	if n := len(res.samples); n > 0 {
		res.openAtSettle = res.samples[n-1].subs
	}
	phase = "read"
	mu.Unlock()

	readStreams(ctx, streams, res)
	close(stopSampling)
	<-sampled
	return res, nil
}

// stable reports whether the last floodStable samples show the same number
// of streams served and the same RSS in MiB.
func stable(s []memSample) bool {
	if len(s) < floodStable {
		return false
	}
	last := s[len(s)-floodStable:]
	for _, x := range last {
		if x.scrapeFail || x.subs != last[0].subs || x.rss>>20 != last[0].rss>>20 {
			return false
		}
	}
	return true
}

// readStreams reads every stream until it has delivered big-(floodJobs-1)
// or ended, floodConns streams at a time, and counts how each ended.
func readStreams(ctx context.Context, streams []managerpb.Manager_EventStreamClient, res *floodResult) {
	last := fmt.Sprintf("big-%02d", floodJobs-1)
	var mu sync.Mutex
	sem := make(chan struct{}, floodConns)
	var wg sync.WaitGroup
	for _, s := range streams {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			kind, msg := readOne(ctx, s, last)
			mu.Lock()
			defer mu.Unlock()
			switch kind {
			case "budget":
				res.cutBudget++
			case "complete":
				res.complete++
			default:
				res.cutOther++
				if res.otherErr == "" {
					res.otherErr = msg
				}
			}
		}()
	}
	wg.Wait()
}

// readOne reads s until the job_updated of job last ("complete"), a
// ResourceExhausted naming the event-stream budget with a resume index
// ("budget"), another end ("other", with the error), or floodReadTimeout.
func readOne(ctx context.Context, s managerpb.Manager_EventStreamClient, last string) (string, string) {
	type result struct{ kind, msg string }
	done := make(chan result, 1)
	go func() {
		for {
			ev, err := s.Recv()
			if err != nil {
				if isBudgetCut(err) {
					done <- result{"budget", ""}
				} else {
					done <- result{"other", err.Error()}
				}
				return
			}
			if ev.GetJobUpdated().GetJobWithHistory().GetJob().GetJobId().GetJobId() == last {
				done <- result{"complete", ""}
				return
			}
		}
	}()
	select {
	case r := <-done:
		return r.kind, r.msg
	case <-time.After(floodReadTimeout):
		return "other", fmt.Sprintf("no end within %s of reading", floodReadTimeout)
	case <-ctx.Done():
		return "other", ctx.Err().Error()
	}
}

// isBudgetCut reports whether err is the end of a stream cut for
// --event-stream-memory: ResourceExhausted with an ErrorInfo of reason
// EVENT_STREAM_MEMORY and a resume_from_index (docs/design/event-stream.md,
// "Memory").
func isBudgetCut(err error) bool {
	st, ok := status.FromError(err)
	if !ok || st.Code() != codes.ResourceExhausted {
		return false
	}
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok && info.GetReason() == "EVENT_STREAM_MEMORY" {
			_, err := strconv.ParseUint(info.GetMetadata()["resume_from_index"], 10, 64)
			return err == nil
		}
	}
	return false
}

// sampleManager reads process pid's VmRSS and, from its metrics on maddr,
// the Go heap and the event streams served.
func sampleManager(ctx context.Context, pid int, maddr, phase string) memSample {
	s := memSample{at: time.Now(), phase: phase, rss: vmRSS(pid), heap: -1, goal: -1, subs: -1}
	vals, err := scrapeGauges(ctx, maddr, "go_memstats_heap_alloc_bytes", "go_memstats_next_gc_bytes", "norsk_manager_event_subscribers")
	if err != nil {
		s.scrapeFail = true
		return s
	}
	s.heap, s.goal, s.subs = int64(vals[0]), int64(vals[1]), int64(vals[2])
	return s
}

// vmRSS returns the resident set size of process pid in bytes (-1 if it
// cannot be read).
func vmRSS(pid int) int64 {
	f := strings.Fields(procField(fmt.Sprintf("/proc/%d/status", pid), "VmRSS"))
	if len(f) != 2 || f[1] != "kB" {
		return -1
	}
	kb, err := strconv.ParseInt(f[0], 10, 64)
	if err != nil {
		return -1
	}
	return kb << 10
}
