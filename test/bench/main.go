// Command bench measures a single norsk-manager on this machine and prints
// markdown tables for docs/benchmarks.md:
//
//	go run ./test/bench createjob   # CreateJob at 1/16/64 clients, next to raw badger synced writes
//	go run ./test/bench startjob    # StartJob → job_running on the event stream (real worker process)
//	go run ./test/bench register    # ClusterMemberRegister → node_started (in-bench minimal worker)
//	go run ./test/bench recovery    # restart on 10k/100k jobs: time to serve, heap per job
//	go run ./test/bench all         # all of the above
//
// Add --quick for a sanity run of well under a minute. Diagnostics for
// createjob: --unsafe-no-fsync (no fsync in the manager nor in raw badger,
// to see what the syncs cost) and --manager-cpu-profile (the manager runs as
// this binary, the same cluster/agent code, with a CPU profile whose top is
// printed). The load shape is
// that of docs/benchmarks.md and the peer baselines (closed loop, one gRPC
// connection per client, warm-up, measured window, several runs,
// nearest-rank percentiles). Everything listens on 127.0.0.1; scratch
// directories go under --work-dir (default: the system temp dir) and are
// removed at the end unless --keep.
//
// The bench builds cmd/norsk-manager and cmd/norsk-ctl with "go build", so
// it must run inside the module (go run ./test/bench from the repo root).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// settings are the flags shared by every scenario.
type settings struct {
	quick   bool
	runs    int
	warmup  time.Duration
	window  time.Duration
	clients []int
	trials  int   // startjob
	slots   int   // register
	jobs    []int // recovery
	probes  int   // recovery: restarts measured per size
	pprof   bool  // recovery: print the top of a heap profile of the largest size
	// cpuProfile: createjob runs the manager as a profiled bench process
	// (serveCommand) instead of norsk-manager and prints the profile's top.
	cpuProfile bool
	// noSync: createjob without fsync (manager --unsafe-no-fsync, badger
	// SyncWrites off), to see what the syncs cost.
	noSync  bool
	workDir string
	keep    bool
	out     io.Writer
}

// scenarios maps a scenario name to its runner.
var scenarios = map[string]func(context.Context, *env) error{
	"createjob": runCreateJob,
	"startjob":  runStartJob,
	"register":  runRegister,
	"recovery":  runRecovery,
}

// order is the order "all" runs the scenarios in.
var order = []string{"createjob", "startjob", "register", "recovery"}

func main() {
	if len(os.Args) >= 2 && os.Args[1] == probeCommand {
		// Internal: one recovery measurement in a fresh process.
		if err := runProbe(os.Args[2:]); err != nil {
			fmt.Fprintln(os.Stderr, "bench probe:", err)
			os.Exit(1)
		}
		return
	}
	if len(os.Args) >= 2 && os.Args[1] == serveCommand {
		// Internal: a profiled in-process manager (createjob --manager-cpu-profile).
		if err := runServe(os.Args[2:]); err != nil {
			fmt.Fprintln(os.Stderr, "bench manager:", err)
			os.Exit(1)
		}
		return
	}
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

func usage() string {
	return "usage: go run ./test/bench {createjob|startjob|register|recovery|all} [--quick] [flags]\n" +
		"       go run ./test/bench <scenario> --help   lists the flags"
}

func run(args []string) error {
	if len(args) == 0 || strings.HasPrefix(args[0], "-") {
		return errors.New(usage())
	}
	name := args[0]
	var names []string
	switch {
	case name == "all":
		names = order
	case scenarios[name] != nil:
		names = []string{name}
	default:
		return fmt.Errorf("unknown scenario %q\n%s", name, usage())
	}
	s, err := parseFlags(name, args[1:])
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	e, err := newEnv(ctx, s)
	if err != nil {
		return err
	}
	defer e.close()
	fmt.Fprintf(s.out, "# norsk-manager bench: %s%s\n\n", name, map[bool]string{true: " (--quick)"}[s.quick])
	fmt.Fprintf(s.out, "Command: `go run ./test/bench %s`\n\n", strings.Join(args, " "))
	fmt.Fprintf(s.out, "Code: %s\n\n", codeLine(ctx, e.modRoot))
	fmt.Fprintf(s.out, "Machine: %s\n\n", machineLine(s.workDir))
	fmt.Fprintf(s.out, "At the start: %s.\n\n", loadLine())
	for _, n := range names {
		started := time.Now()
		if err := scenarios[n](ctx, e); err != nil {
			return fmt.Errorf("%s: %w", n, err)
		}
		fmt.Fprintf(s.out, "_%s took %s; at the end: %s._\n\n", n, time.Since(started).Round(time.Second), loadLine())
	}
	return nil
}

// parseFlags parses the flags after the scenario name. --quick changes the
// defaults of the flags not given explicitly.
func parseFlags(name string, args []string) (*settings, error) {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	quick := fs.Bool("quick", false, "fast sanity run (1 run, short windows, few trials, small recovery sizes)")
	runs := fs.Int("runs", 3, "runs per client count (createjob)")
	warmup := fs.Duration("warmup", 2*time.Second, "warm-up before each measured window (not counted)")
	window := fs.Duration("window", 10*time.Second, "measured window per run")
	clients := fs.String("clients", "1,16,64", "concurrent clients (createjob)")
	trials := fs.Int("trials", 100, "start/stop trials (startjob)")
	slots := fs.Int("slots", 50, "cluster slots registered (register)")
	jobs := fs.String("jobs", "10000,100000", "job counts to recover (recovery)")
	probes := fs.Int("probes", 3, "manager starts measured per job count (recovery)")
	pprof := fs.Bool("pprof", true, "recovery: print go tool pprof -top of the heap at the largest job count")
	cpuProfile := fs.Bool("manager-cpu-profile", false, "createjob: run the manager as the bench binary with a CPU profile (same agent code) and print go tool pprof -top per client count")
	noSync := fs.Bool("unsafe-no-fsync", false, "createjob diagnostic: run the manager with --unsafe-no-fsync and raw badger without SyncWrites")
	workDir := fs.String("work-dir", "", "parent of the scratch directories (default: the system temp dir; keep it on the disk you want to measure)")
	keep := fs.Bool("keep", false, "keep the scratch directories")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(0)
		}
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments %q\n%s", fs.Args(), usage())
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if *quick {
		quickDefault(set, "runs", runs, 1)
		quickDefault(set, "warmup", warmup, 500*time.Millisecond)
		quickDefault(set, "window", window, 2*time.Second)
		quickDefault(set, "trials", trials, 10)
		quickDefault(set, "slots", slots, 10)
		quickDefault(set, "jobs", jobs, "1000,5000")
		quickDefault(set, "probes", probes, 1)
	}
	s := &settings{quick: *quick, runs: *runs, warmup: *warmup, window: *window, trials: *trials,
		slots: *slots, probes: *probes, pprof: *pprof, cpuProfile: *cpuProfile, noSync: *noSync, workDir: *workDir, keep: *keep, out: os.Stdout}
	var err error
	if s.clients, err = parseInts("--clients", *clients); err != nil {
		return nil, err
	}
	if s.jobs, err = parseInts("--jobs", *jobs); err != nil {
		return nil, err
	}
	switch {
	case s.runs < 1, s.trials < 1, s.slots < 1, s.probes < 1:
		return nil, errors.New("--runs, --trials, --slots and --probes must be at least 1")
	case s.window <= 0 || s.warmup < 0:
		return nil, errors.New("--window must be positive and --warmup not negative")
	}
	if s.workDir == "" {
		s.workDir = os.TempDir()
	}
	return s, nil
}

// quickDefault sets *p to v unless the flag was given.
func quickDefault[T any](set map[string]bool, name string, p *T, v T) {
	if !set[name] {
		*p = v
	}
}

func parseInts(flagName, s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return nil, fmt.Errorf("%s: %q is not a list of positive integers", flagName, s)
		}
		out = append(out, n)
	}
	return out, nil
}
