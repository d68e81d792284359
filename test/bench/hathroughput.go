package main

import (
	"context"
	"fmt"
	"path/filepath"
	"time"

	"google.golang.org/grpc"

	"github.com/norsk-oss/norsk-manager/proto/managerpb"
)

// tpSetup is one server setup of cluster-throughput with its clients.
type tpSetup struct {
	label string
	tag   string       // in job ids (default: from the cluster-throughput label)
	pids  func() []int // the manager processes, for the CPU columns
	conns []*grpc.ClientConn
	apis  []managerpb.ManagerClient // client c → a connection to manager c % managers
	seq   []int
	stop  func() error
}

func (s *tpSetup) close() error {
	for _, c := range s.conns {
		if c != nil {
			c.Close()
		}
	}
	s.conns = nil
	if s.stop == nil {
		return nil
	}
	err := s.stop()
	s.stop = nil
	return err
}

// runClusterThroughput measures CreateJob, closed loop as createjob does,
// at each client count of e.clients (16 and 64 unless --clients is given)
// on three setups started side by side on fresh data dirs: a plain
// manager (no cluster flags), a 1-manager cluster (--bootstrap-expect 1)
// and a 3-manager cluster with the clients spread over the three
// managers. The windows of the three alternate (run 1 of each, run 2 of
// each, …), so they see the same neighbours.
func runClusterThroughput(ctx context.Context, e *env) error {
	counts := e.clients
	if !e.clientsSet {
		counts = []int{16, 64}
	}
	labels := []string{"plain manager", "1-manager cluster", "3-manager cluster"}
	res := map[string]map[int][]runStats{}
	for _, l := range labels {
		res[l] = map[int][]runStats{}
	}
	var notes []string
	for _, n := range counts {
		setups, err := startTPSetups(ctx, e, n)
		if err != nil {
			return err
		}
		for r := range e.runs {
			for _, s := range setups {
				res[s.label][n] = append(res[s.label][n], s.run(ctx, e, r))
				if ctx.Err() != nil {
					break
				}
			}
		}
		for _, s := range setups {
			if err := s.close(); err != nil {
				notes = append(notes, fmt.Sprintf("stopping the %s (%d clients): %v", s.label, n, err))
			}
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
	printClusterThroughput(e, counts, labels, res)
	for _, n := range notes {
		printNote(e, n)
	}
	return nil
}

// startTPSetups starts the three setups for n clients and connects the
// clients; on error it stops what it started.
func startTPSetups(ctx context.Context, e *env, n int) (setups []*tpSetup, err error) {
	defer func() {
		if err != nil {
			for _, s := range setups {
				_ = s.close()
			}
		}
	}()
	// A plain manager.
	m, err := e.startManager(ctx, filepath.Join(e.dir(fmt.Sprintf("throughput-plain-%d", n)), "data"), "")
	if err != nil {
		return nil, err
	}
	plain := &tpSetup{label: "plain manager", pids: func() []int { return []int{m.cmd.Process.Pid} }, stop: m.stop}
	setups = append(setups, plain)
	if err := plain.connect(n, []string{m.addr}); err != nil {
		return setups, err
	}
	// A 1-manager cluster and a 3-manager cluster.
	for _, size := range []int{1, 3} {
		c, err := e.newCluster(fmt.Sprintf("throughput-%dm-%d", size, n), size, "warn")
		if err != nil {
			return setups, err
		}
		s := &tpSetup{label: fmt.Sprintf("%d-manager cluster", size), stop: c.close, pids: func() []int {
			var pids []int
			for _, m := range c.running() {
				pids = append(pids, m.pid())
			}
			return pids
		}}
		setups = append(setups, s)
		if size == 1 {
			c.ms[0].flags = []string{"--bootstrap-expect", "1"}
			err = c.start(c.ms[0])
		} else {
			err = c.startAll()
		}
		if err != nil {
			return setups, err
		}
		if _, err := c.waitStable(ctx, recoverTimeout); err != nil {
			return setups, err
		}
		var addrs []string
		for _, m := range c.ms {
			addrs = append(addrs, m.api)
		}
		if err := s.connect(n, addrs); err != nil {
			return setups, err
		}
	}
	return setups, nil
}

// connect opens one connection per client, client c to addrs[c % len].
func (s *tpSetup) connect(n int, addrs []string) error { return s.connectWith(n, addrs, dial) }

// connectWith is connect with the connections opened by dialer.
func (s *tpSetup) connectWith(n int, addrs []string, dialer func(string) (*grpc.ClientConn, managerpb.ManagerClient, error)) error {
	s.conns, s.apis, s.seq = make([]*grpc.ClientConn, n), make([]managerpb.ManagerClient, n), make([]int, n)
	for c := range n {
		var err error
		if s.conns[c], s.apis[c], err = dialer(addrs[c%len(addrs)]); err != nil {
			return err
		}
	}
	return nil
}

// run is one warm-up + window of CreateJob; job ids are unique per setup,
// run and client.
func (s *tpSetup) run(ctx context.Context, e *env, r int) runStats {
	cpu := windowCPUs(s.pids(), e.warmup, e.window)
	tag := s.tag
	if tag == "" {
		tag = map[string]string{"plain manager": "p", "1-manager cluster": "c1", "3-manager cluster": "c3"}[s.label]
	}
	st := closedLoop(ctx, len(s.apis), e.warmup, e.window, func(ctx context.Context, c int) error {
		s.seq[c]++
		job := benchJob(fmt.Sprintf("tp-%s-r%d-c%02d-%07d", tag, r, c, s.seq[c]), c*1_000_000+s.seq[c])
		cctx, cancel := context.WithTimeout(ctx, callTimeout)
		defer cancel()
		_, err := s.apis[c].CreateJob(cctx, job)
		return err
	})
	st.serverCores, st.benchCores = cpu()
	return st
}

// windowCPUs is windowCPU over several server processes (their sum).
func windowCPUs(pids []int, warmup, window time.Duration) func() (server, bench float64) {
	type sample struct{ server, bench float64 }
	ch := make(chan sample, 1)
	sum := func() (d time.Duration) {
		for _, p := range pids {
			d += serverCPU(p)
		}
		return d
	}
	go func() {
		time.Sleep(warmup)
		s0, b0 := sum(), cpuTime(0)
		time.Sleep(window)
		s1, b1 := sum(), cpuTime(0)
		ch <- sample{server: (s1 - s0).Seconds() / window.Seconds(), bench: (b1 - b0).Seconds() / window.Seconds()}
	}()
	return func() (float64, float64) { s := <-ch; return s.server, s.bench }
}

func printClusterThroughput(e *env, counts []int, labels []string, res map[string]map[int][]runStats) {
	w := e.out
	fmt.Fprintln(w, "## cluster-throughput")
	fmt.Fprintln(w)
	fmt.Fprintf(w, "CreateJob (the createjob job), closed loop, one gRPC connection per client, %s warm-up + %s window, %d run(s) per client count. "+
		"Three setups run side by side, each on fresh data dirs per client count (its runs share them), all fsync on: a plain norsk-manager "+
		"(no cluster flags), a 1-manager cluster (`--bootstrap-expect 1`: Raft with one voter) and a 3-manager cluster "+
		"(`--bootstrap-expect 3`; client c talks to manager c mod 3, so two thirds of the writes are forwarded to the leader); "+
		"cluster managers with %s and `--log-level warn`. The setups' windows alternate within each run. "+
		"CPU cores: the setup's manager processes together + the bench. Each cell: min / median / max over the runs.\n\n",
		e.warmup, e.window, e.runs, timingsLine(e.timings))
	fmt.Fprintln(w, "| setup | clients | CreateJob/s | p50 ms | p99 ms | max ms | errors | CPU cores: managers + bench | CreateJob/s per run |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|---|")
	for _, n := range counts {
		for _, l := range labels {
			row := groupRow(fmt.Sprint(n), res[l][n], true)
			fmt.Fprintf(w, "| %s %s\n", l, row)
		}
	}
	for _, n := range counts {
		for _, l := range labels {
			for i, r := range res[l][n] {
				if r.firstErr != nil {
					fmt.Fprintf(w, "\n%s, %d clients, run %d: %d errors, first: %v\n", l, n, i+1, r.errs, r.firstErr)
				}
			}
		}
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "### Targets (medians over the runs)")
	fmt.Fprintln(w)
	for _, n := range counts {
		one, three, plain := res["1-manager cluster"][n], res["3-manager cluster"][n], res["plain manager"][n]
		if len(one) == 0 || len(three) == 0 {
			continue
		}
		a, b := medianRate(three), medianRate(one)
		ratio := 0.0
		if b > 0 {
			ratio = a / b
		}
		fmt.Fprintf(w, "- %d clients: 3-manager cluster %.0f/s vs 1-manager cluster %.0f/s = %.2f× ≥ 0.5×: %s "+
			"(p99 %s ms vs %s ms; plain manager %.0f/s, p99 %s ms)\n",
			n, a, b, ratio, met(ratio >= 0.5), fmtMs(ms(medianP99(three))), fmtMs(ms(medianP99(one))),
			medianRate(plain), fmtMs(ms(medianP99(plain))))
	}
	fmt.Fprintln(w)
}
