package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"github.com/norsk-oss/norsk-manager/persistence"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/norsk-oss/norsk-manager/proto/managerpb"
)

// populateClients is the number of concurrent CreateJob clients that fill
// the recovery data dirs.
const populateClients = 64

// runRecovery fills data dirs with e.jobs jobs through a manager process
// (each size reuses a copy of the previous one), then measures manager
// starts on each (and on an empty data dir) in fresh bench processes: New →
// Start, the first JobById and JobSearch answers, and the heap.
func runRecovery(ctx context.Context, e *env) error {
	sizes := slices.Sorted(slices.Values(e.jobs))
	dirs := map[int]string{0: filepath.Join(e.dir("recovery-0"), "data")}
	var pops []popStats
	prev, have := "", 0
	for _, n := range sizes {
		d := filepath.Join(e.dir(fmt.Sprintf("recovery-%d", n)), "data")
		if prev != "" {
			if err := os.CopyFS(d, os.DirFS(prev)); err != nil {
				return fmt.Errorf("copy %s to %s: %w", prev, d, err)
			}
		}
		p, err := populate(ctx, e, d, have, n)
		if err != nil {
			return err
		}
		pops = append(pops, p)
		dirs[n], prev, have = d, d, n
	}
	results := map[int][]probeResult{}
	for _, n := range append([]int{0}, sizes...) {
		for i := range e.probes {
			profile := ""
			if e.pprof && n == sizes[len(sizes)-1] && i == e.probes-1 {
				profile = filepath.Join(e.scratch, fmt.Sprintf("heap-%d.pprof", n))
			}
			r, err := probe(ctx, dirs[n], n, profile)
			if err != nil {
				return fmt.Errorf("probe %d jobs: %w", n, err)
			}
			results[n] = append(results[n], r)
		}
	}
	printRecovery(e, pops, sizes, results)
	if e.pprof {
		n := sizes[len(sizes)-1]
		printProfileTop(ctx, e, fmt.Sprintf("Heap of the last start with %d jobs", n),
			filepath.Join(e.scratch, fmt.Sprintf("heap-%d.pprof", n)), "-top", "-sample_index=inuse_space")
	}
	return nil
}

// popStats describes how one data dir was filled.
type popStats struct {
	from, to int
	took     time.Duration
	retries  int
	diskMiB  float64
}

// populate starts a manager on dir and creates jobs from..to-1 with
// populateClients concurrent clients, then stops the manager.
func populate(ctx context.Context, e *env, dir string, from, to int) (popStats, error) {
	m, err := e.startManager(ctx, dir, "")
	if err != nil {
		return popStats{}, err
	}
	defer m.stop()
	var next atomic.Int64
	next.Store(int64(from))
	var retries atomic.Int64
	errCh := make(chan error, populateClients)
	start := time.Now()
	var wg sync.WaitGroup
	for range populateClients {
		conn, api, err := dial(m.addr)
		if err != nil {
			return popStats{}, err
		}
		defer conn.Close()
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := int(next.Add(1) - 1); i < to; i = int(next.Add(1) - 1) {
				if err := createWithRetry(ctx, api, i, &retries); err != nil {
					errCh <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	took := time.Since(start)
	close(errCh)
	if err := <-errCh; err != nil {
		return popStats{}, err
	}
	if err := m.stop(); err != nil {
		return popStats{}, err
	}
	return popStats{from: from, to: to, took: took, retries: int(retries.Load()), diskMiB: dirMiB(dir)}, nil
}

// createWithRetry creates recovery job i, retrying a failed call up to 5
// times (AlreadyExists after a retry counts as success).
func createWithRetry(ctx context.Context, api managerpb.ManagerClient, i int, retries *atomic.Int64) error {
	var err error
	for attempt := range 5 {
		if attempt > 0 {
			retries.Add(1)
			time.Sleep(100 * time.Millisecond)
		}
		cctx, cancel := context.WithTimeout(ctx, callTimeout)
		_, err = api.CreateJob(cctx, benchJob(recoveryJobID(i), i))
		cancel()
		if err == nil || (attempt > 0 && status.Code(err) == codes.AlreadyExists) {
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
	return fmt.Errorf("CreateJob %s: %w", recoveryJobID(i), err)
}

func recoveryJobID(i int) string { return fmt.Sprintf("job-%07d", i) }

func dirMiB(dir string) float64 {
	var total int64
	_ = filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			if info, err := d.Info(); err == nil {
				total += info.Size()
			}
		}
		return nil
	})
	return float64(total) / (1 << 20)
}

// probe runs one recovery measurement in a fresh bench process.
func probe(ctx context.Context, dir string, jobs int, profile string) (probeResult, error) {
	exe, err := os.Executable()
	if err != nil {
		return probeResult{}, err
	}
	args := []string{probeCommand, "--dir", dir, "--heap-profile", profile}
	if jobs > 0 {
		// The newest job of the dir, and a customer with jobs in it.
		args = append(args, "--job-id", recoveryJobID(jobs-1), "--customer", customerTag(jobs-1))
	}
	cmd := exec.CommandContext(ctx, exe, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return probeResult{}, fmt.Errorf("%w\n%s", err, stderr.String())
	}
	var r probeResult
	if err := json.Unmarshal(stdout.Bytes(), &r); err != nil {
		return probeResult{}, fmt.Errorf("probe output %q: %w", stdout.String(), err)
	}
	return r, nil
}

func printRecovery(e *env, pops []popStats, sizes []int, results map[int][]probeResult) {
	w := e.out
	fmt.Fprintln(w, "## recovery")
	fmt.Fprintln(w)
	fmt.Fprintf(w, "Data dirs filled through a norsk-manager process (fsync on) with %d concurrent CreateJob clients (the createjob job shape: 4 tags, "+
		"one in five jobs scheduled, so PRE); each size continues a copy of the previous one:\n\n", populateClients)
	fmt.Fprintln(w, "| jobs | created in this step | took s | CreateJob/s | retries | data dir MiB |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|")
	for _, p := range pops {
		fmt.Fprintf(w, "| %d | %d | %.1f | %.0f | %d | %.1f |\n", p.to, p.to-p.from, p.took.Seconds(),
			float64(p.to-p.from)/p.took.Seconds(), p.retries, p.diskMiB)
	}
	fmt.Fprintln(w)
	def := persistence.DefaultConfig("")
	fmt.Fprintf(w, "Each manager start is measured in a fresh bench process (agent.New + Start in-process, default config: fsync on, "+
		"%d MiB memtable, %d MiB block cache), %d start(s) per size, page cache warm. Times are from the call to agent.New; "+
		"JobSearch is tag customer eq (1 job in %d). Heap after runtime.GC() twice, following both answers. "+
		"Each cell: min / median / max over the starts.\n\n", def.MemTableSize>>20, def.BlockCacheSize>>20, e.probes, numCustomers)
	fmt.Fprintln(w, "| jobs | New returns ms | Start returns ms | first JobById ms | first JobSearch ms (hits) | HeapAlloc MiB | HeapInuse MiB | RSS MiB | heap per job B | RSS per job B |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|---|---|")
	base := medianOf(results[0], func(r probeResult) float64 { return float64(r.HeapAlloc) })
	baseRSS := medianOf(results[0], func(r probeResult) float64 { return float64(r.RSS) })
	for _, n := range append([]int{0}, sizes...) {
		rs := results[n]
		col := func(f func(probeResult) float64, format func(float64) string) string {
			var vs []float64
			for _, r := range rs {
				vs = append(vs, f(r))
			}
			return spread(vs, format)
		}
		mib := func(v float64) string { return fmt.Sprintf("%.1f", v/(1<<20)) }
		perJob, rssPerJob := "–", "–"
		if n > 0 {
			perJob = col(func(r probeResult) float64 { return (float64(r.HeapAlloc) - base) / float64(n) }, fmtRate)
			rssPerJob = col(func(r probeResult) float64 { return (float64(r.RSS) - baseRSS) / float64(n) }, fmtRate)
		}
		fmt.Fprintf(w, "| %d | %s | %s | %s | %s (%d) | %s | %s | %s | %s | %s |\n", n,
			col(func(r probeResult) float64 { return r.NewMs }, fmtMs),
			col(func(r probeResult) float64 { return r.StartMs }, fmtMs),
			col(func(r probeResult) float64 { return r.JobByIDMs }, fmtMs),
			col(func(r probeResult) float64 { return r.SearchMs }, fmtMs), rs[0].Hits,
			col(func(r probeResult) float64 { return float64(r.HeapAlloc) }, mib),
			col(func(r probeResult) float64 { return float64(r.HeapInuse) }, mib),
			col(func(r probeResult) float64 { return float64(r.RSS) }, mib), perJob, rssPerJob)
	}
	fmt.Fprintln(w)
	printRecoveryTargets(e, sizes, results, base)
}

func printRecoveryTargets(e *env, sizes []int, results map[int][]probeResult, base float64) {
	w := e.out
	fmt.Fprintln(w, "### Targets (medians over the starts)")
	fmt.Fprintln(w)
	for _, n := range sizes {
		back := medianOf(results[n], func(r probeResult) float64 { return max(r.StartMs, r.JobByIDMs, r.SearchMs) })
		heap := (medianOf(results[n], func(r probeResult) float64 { return float64(r.HeapAlloc) }) - base) / float64(n)
		line := fmt.Sprintf("- %d jobs: serving (JobById and JobSearch answered) %s ms after New", n, fmtMs(back))
		if n == 100_000 {
			line += fmt.Sprintf(" < 5 s: %s", met(back < 5000))
		}
		line += fmt.Sprintf("; heap per idle job %.0f B < 4096 B: %s", heap, met(heap < 4096))
		fmt.Fprintln(w, line)
	}
	fmt.Fprintln(w)
}

func medianOf(rs []probeResult, f func(probeResult) float64) float64 {
	var vs []float64
	for _, r := range rs {
		vs = append(vs, f(r))
	}
	slices.Sort(vs)
	return vs[len(vs)/2]
}

// printProfileTop prints the first entries of go tool pprof args... profile.
func printProfileTop(ctx context.Context, e *env, title, profile string, args ...string) {
	w := e.out
	out, err := exec.CommandContext(ctx, "go", append(append([]string{"tool", "pprof"}, args...), profile)...).CombinedOutput()
	fmt.Fprintf(w, "%s (`go tool pprof %s`, first entries):\n\n```\n", title, strings.Join(args, " "))
	if err != nil {
		fmt.Fprintf(w, "go tool pprof failed: %v\n", err)
	}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for i := 0; sc.Scan() && i < 30; i++ {
		if line := strings.TrimRight(sc.Text(), " "); !strings.HasPrefix(line, "Build ID:") && !strings.HasPrefix(line, "Time:") {
			fmt.Fprintln(w, line)
		}
	}
	fmt.Fprintf(w, "```\n\n")
}

// probeCommand is the hidden first argument that makes the bench binary
// run one recovery measurement (see runProbe).
const probeCommand = "__recovery-probe"

// probeResult is what a probe process reports (JSON on stdout).
type probeResult struct {
	NewMs     float64 `json:"new_ms"`
	StartMs   float64 `json:"start_ms"`
	JobByIDMs float64 `json:"job_by_id_ms"`
	SearchMs  float64 `json:"search_ms"`
	Hits      int     `json:"hits"`
	HeapAlloc uint64  `json:"heap_alloc"`
	HeapInuse uint64  `json:"heap_inuse"`
	RSS       uint64  `json:"rss"`
}
