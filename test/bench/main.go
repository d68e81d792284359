// Command bench measures norsk-manager on this machine and prints
// markdown tables for docs/benchmarks.md. A single manager:
//
//	go run ./test/bench createjob   # CreateJob at 1/16/64 clients, next to raw badger synced writes
//	go run ./test/bench startjob    # StartJob → job_running on the event stream (real worker process)
//	go run ./test/bench register    # ClusterMemberRegister → node_started (in-bench minimal worker)
//	go run ./test/bench recovery    # restart on 10k/100k jobs: time to serve, heap per job
//	go run ./test/bench snapshot    # snapshot save / restore / start of the restored manager on 10k/100k jobs (--jobs, --probes)
//	go run ./test/bench docker      # the Docker runtime: StartJob → job_running, StopJob → job_stopped of a two-container job (real worker, --runtime=docker)
//	go run ./test/bench storeopen   # store open on 10k/100k jobs: plain badger vs every table checksum-verified first, and verify
//	go run ./test/bench storecrash  # writers SIGKILLed --crash-iterations times per store (test/storecrash), every restart first time
//	go run ./test/bench placement   # the placement engine on simulated fleets (test/simfleet): 100×1,000 and 1,000×10,000 nodes×jobs (--fleet-sizes); manager RSS (--manager-heap-profile)
//	go run ./test/bench scale       # issue 22: CreateJob rate and CPU per write, engine pass time and RSS at 1k/10k/100k stored jobs (--stored)
//	go run ./test/bench provision   # a waiting job → a node created by the engine (mock provider) → running; its release after linger
//	go run ./test/bench hardening   # issue 21: placements of auto-placed jobs that end at once (true, exit 1) over 30 s; manager RSS/heap with 64 stalled event streams and 20 jobs of 900 KiB
//	go run ./test/bench all         # createjob, startjob, register, recovery and docker (docker is skipped with a note where no Docker engine answers)
//
// An HA cluster of manager processes (--cluster-timings lan, what operators
// run, unless --cluster-timings local):
//
//	go run ./test/bench failover            # SIGKILL the Raft leader under writes: kill → new leader, → first acked CreateJob
//	go run ./test/bench session-failover    # SIGKILL the manager holding a worker's session: kill → session on a new owner; the job keeps its pid
//	go run ./test/bench cluster-throughput  # CreateJob on a 1-manager cluster and a 3-manager cluster (and a plain manager)
//	go run ./test/bench convergence         # start 3 (5) managers at once → one leader with all voters; a joining manager → voter
//	go run ./test/bench ha                  # the four HA scenarios
//	go run ./test/bench robustness --duration 10m --seed N  # porcupine-checked CAS traffic under kills, freezes, partitions (test/robustness)
//	go run ./test/bench freeze              # SIGSTOP a manager for 20 s, SIGCONT: → serving, → rejoined, → every manager answers consistently; false answers
//
// Security (issue 12 §5):
//
//	go run ./test/bench secure   # CreateJob with mutual TLS + ACL tokens on vs off, interleaved: single managers, then 3-manager clusters (--secure-cluster)
//
// Add --quick for a sanity run of well under a minute. Diagnostics for
// createjob: --unsafe-no-fsync (no fsync in the manager nor in raw badger,
// to see what the syncs cost), --peer-etcd PATH (an etcd binary started
// on 127.0.0.1 beside the manager, its Put measured in the same windows)
// and --manager-cpu-profile (the manager runs as
// this binary, the same cluster/agent code, with a CPU profile whose top is
// printed; for secure, both single managers, with the difference on − off). The load shape is
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
	// clientsSet: --clients was given (cluster-throughput uses 16,64
	// otherwise).
	clientsSet bool
	trials     int   // startjob
	slots      int   // register
	jobs       []int // recovery, storeopen
	// fleetSizes: placement runs, simulated nodes × auto-placed jobs.
	fleetSizes []fleetSize
	probes     int // recovery: restarts measured per size; storeopen: opens per size and mode
	// crashIterations: storecrash kills per store and kind set.
	crashIterations int
	pprof           bool // recovery: print the top of a heap profile of the largest size
	// scenario is the name given on the command line ("all", "ha" or one
	// scenario).
	scenario string
	// docker: trials per series, the workers' --stop-grace, whether to run
	// the --docker-network=job series too, and the repetitions of the
	// directly timed Engine API calls.
	dockerTrials     int
	dockerGrace      time.Duration
	dockerJobNetwork bool
	engineReps       int
	// cpuProfile: createjob runs the manager as a profiled bench process
	// (serveCommand) instead of norsk-manager and prints the profile's top.
	cpuProfile bool
	// heapProfile: placement and scale fetch the manager's heap profile
	// (norsk-manager --enable-debug) and print its top.
	heapProfile bool
	// stored: scale's sizes, jobs stored before each measurement.
	stored []int
	// peerEtcd: createjob also measures an etcd binary at this path.
	peerEtcd string
	// noSync: createjob without fsync (manager --unsafe-no-fsync, badger
	// SyncWrites off), to see what the syncs cost.
	noSync bool
	// noEngine: the profiled manager (cpuProfile) runs no placement
	// engine, so that createjob measures the write path alone.
	noEngine bool
	workDir  string
	keep     bool
	out      io.Writer

	// HA scenarios.
	timings           string        // --cluster-timings of every cluster manager: lan or local
	failoverTrials    int           // failover: leader kills
	sessionTrials     int           // session-failover: session-owner kills
	convergenceTrials int           // convergence: cluster starts per size
	convergenceSizes  []int         // convergence: cluster sizes
	writeInterval     time.Duration // failover, session-failover: CreateJob every this often per manager

	// robustness (test/robustness): faults and gaps in all, seed (0:
	// random), clients, jobs, where a failing run's files go, partitions.
	rbDuration        time.Duration
	rbSeed            uint64
	rbClients, rbJobs int
	rbOut             string
	rbPartitions      bool
	freezeTrials      int           // freeze: freezes (--trials, 10 unless given)
	freezeFor         time.Duration // freeze: how long each victim stays stopped
	managerLogLevel   string        // freeze: the managers' --log-level

	// secure: whether to measure 3-manager clusters too, and at which
	// client counts.
	secureCluster        bool
	secureClusterClients []int
}

// scenarios maps a scenario name to its runner.
var scenarios = map[string]func(context.Context, *env) error{
	"createjob": runCreateJob,
	"startjob":  runStartJob,
	"register":  runRegister,
	"recovery":  runRecovery,
	"docker":    runDocker,
	"snapshot":  runSnapshot,
	"placement": runPlacement,
	"scale":     runScale,
	"provision": runProvision,
	"move":      runMove,
	"hardening": runHardening,

	"storeopen":  runStoreOpen,
	"storecrash": runStoreCrash,

	"failover":           runFailover,
	"session-failover":   runSessionFailover,
	"cluster-throughput": runClusterThroughput,
	"convergence":        runConvergence,

	"robustness": runRobustness,
	"freeze":     runFreeze,

	"secure": runSecure,
}

// order is the order "all" runs the scenarios in (a single manager).
var order = []string{"createjob", "startjob", "register", "recovery", "docker"}

// haOrder is the order "ha" runs the HA cluster scenarios in.
var haOrder = []string{"convergence", "failover", "session-failover", "cluster-throughput"}

func main() {
	if len(os.Args) >= 2 && os.Args[1] == probeCommand {
		// Internal: one recovery measurement in a fresh process.
		if err := runProbe(os.Args[2:]); err != nil {
			fmt.Fprintln(os.Stderr, "bench probe:", err)
			os.Exit(1)
		}
		return
	}
	if len(os.Args) >= 2 && os.Args[1] == storeOpenProbeCommand {
		// Internal: one store open in a fresh process (storeopen).
		if err := runStoreOpenProbe(os.Args[2:]); err != nil {
			fmt.Fprintln(os.Stderr, "bench storeopen probe:", err)
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
	return "usage: go run ./test/bench {createjob|startjob|register|recovery|snapshot|docker|all} [--quick] [flags]\n" +
		"       go run ./test/bench createjob [--quick] [--clients 1,16,64] [--peer-etcd PATH] [--manager-cpu-profile] [--unsafe-no-fsync]\n" +
		"       go run ./test/bench placement [--quick] [--fleet-sizes 100x1000,1000x10000] [--manager-cpu-profile] [--manager-heap-profile]\n" +
		"       go run ./test/bench scale [--quick] [--stored 1000,10000,100000] [--runs N] [--manager-heap-profile]\n" +
		"       go run ./test/bench provision [--trials N]   (at most 10 rounds)\n" +
		"       go run ./test/bench move [--quick]\n" +
		"       go run ./test/bench hardening [--quick]   (issue 21: placements of jobs that end at once; memory under stalled event streams)\n" +
		"       go run ./test/bench {storeopen|storecrash} [--quick] [flags]\n" +
		"       go run ./test/bench {failover|session-failover|cluster-throughput|convergence|ha} [--quick] [--cluster-timings lan|local] [flags]\n" +
		"       go run ./test/bench robustness [--duration 10m] [--seed N] [flags]\n" +
		"       go run ./test/bench freeze [--quick] [--trials N] [--freeze 20s] [--cluster-timings local|lan]\n" +
		"       go run ./test/bench secure [--quick] [--clients 1,16,64] [--secure-cluster=false] [--secure-cluster-clients 16,64] [--manager-cpu-profile]\n" +
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
	case name == "ha":
		names = haOrder
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
	quick := fs.Bool("quick", false, "fast sanity run (1 run, short windows, few trials, small recovery sizes, 5 docker trials and 3 engine reps)")
	runs := fs.Int("runs", 3, "runs per client count (createjob)")
	warmup := fs.Duration("warmup", 2*time.Second, "warm-up before each measured window (not counted)")
	window := fs.Duration("window", 10*time.Second, "measured window per run")
	clients := fs.String("clients", "1,16,64", "concurrent clients (createjob, secure; cluster-throughput: 16,64 unless given)")
	secureCluster := fs.Bool("secure-cluster", true, "secure: also measure two 3-manager clusters (plaintext vs mutual TLS on every port + --acl)")
	secureClusterClients := fs.String("secure-cluster-clients", "16,64", "secure: client counts of the 3-manager clusters (--quick: 16)")
	trials := fs.Int("trials", 100, "start/stop trials (startjob); freezes (freeze: 10 unless given, 3 with --quick)")
	slots := fs.Int("slots", 50, "cluster slots registered (register)")
	jobs := fs.String("jobs", "10000,100000", "job counts to recover (recovery) or to snapshot (snapshot)")
	probes := fs.Int("probes", 3, "manager starts (recovery), save/restore rounds (snapshot) measured per job count, store opens per job count and mode (storeopen)")
	crashIterations := fs.Int("crash-iterations", 200, "storecrash: kills per store and kind set")
	dockerTrials := fs.Int("docker-trials", 50, "docker: start/stop trials per series (each a fresh job)")
	dockerGrace := fs.Duration("docker-stop-grace", time.Second, "docker: the workers' --stop-grace (what the SIGTERM-ignoring service gets before SIGKILL)")
	dockerJobNetwork := fs.Bool("docker-job-network", true, "docker: also measure a worker with --docker-network=job (a bridge network per job)")
	engineReps := fs.Int("engine-reps", 10, "docker: repetitions of the directly timed Engine API calls per network mode, and containers of the SIGTERM-right-after-start check")
	pprof := fs.Bool("pprof", true, "recovery: print go tool pprof -top of the heap at the largest job count")
	cpuProfile := fs.Bool("manager-cpu-profile", false, "createjob: run the manager as the bench binary with a CPU profile (same agent code) and print go tool pprof -top per client count; "+
		"placement: profile norsk-manager (--enable-debug) for the first 30 s after the first CreateJob and print the top")
	fleetSizes := fs.String("fleet-sizes", "100x1000,1000x10000", "placement: runs as NODESxJOBS (simulated nodes × auto-placed jobs of 1 unit), each on a fresh manager "+
		"(with --register-rate 0: every simulated worker registers from 127.0.0.1, and the default limit per address, 1/s after a burst of 20, would let them in at one a second)")
	heapProfile := fs.Bool("manager-heap-profile", false, "placement, scale: run norsk-manager with --enable-debug and print go tool pprof -top -sample_index=inuse_space "+
		"of its heap (after a GC) once every job ran (placement) or at the end of each stored size (scale)")
	stored := fs.String("stored", "1000,10000,100000", "scale: jobs stored before each measurement, one table row each, on one manager that grows (--quick: 500,2000,5000)")
	peerEtcd := fs.String("peer-etcd", "", "createjob: path of an etcd binary (3.5 or later); it is started as a single member (fsync on, its data dir in the scratch dir, "+
		"127.0.0.1 ports only) and its Put of 1 KiB values is measured in windows alternating with CreateJob's, with the same clients, warm-up and window")
	noSync := fs.Bool("unsafe-no-fsync", false, "createjob diagnostic: run the manager with --unsafe-no-fsync and raw badger without SyncWrites")
	noEngine := fs.Bool("no-placement-engine", false, "createjob with --manager-cpu-profile: the manager runs no placement engine (the write path alone; nothing is auto-placed)")
	workDir := fs.String("work-dir", "", "parent of the scratch directories (default: the system temp dir; keep it on the disk you want to measure)")
	keep := fs.Bool("keep", false, "keep the scratch directories")
	timings := fs.String("cluster-timings", "lan", `HA scenarios: --cluster-timings of every manager: "lan" (the default of norsk-manager) or "local" (freeze: local unless given)`)
	freezeFor := fs.Duration("freeze", 20*time.Second, "freeze: how long each victim stays SIGSTOPped (6s with --quick)")
	managerLogLevel := fs.String("manager-log-level", "info", "freeze: the managers' --log-level (debug to diagnose a false answer; --keep keeps the logs)")
	failoverTrials := fs.Int("failover-trials", 20, "failover: leader kills")
	sessionTrials := fs.Int("session-trials", 10, "session-failover: kills of the manager holding the worker's session")
	convergenceTrials := fs.Int("convergence-trials", 5, "convergence: cluster starts per size")
	convergenceSizes := fs.String("convergence-sizes", "3,5", "convergence: cluster sizes (managers started at once with --bootstrap-expect N)")
	writeInterval := fs.Duration("write-interval", 10*time.Millisecond, "failover, session-failover: each manager gets a CreateJob this often (open loop)")
	rbDuration := fs.Duration("duration", 10*time.Minute, "robustness: faults and the traffic between them add up to this (--quick: 1m)")
	rbSeed := fs.Uint64("seed", 0, "robustness: seed of the schedule and the clients' choices (0: random, printed)")
	rbClients := fs.Int("robustness-clients", 6, "robustness: clients, bound round-robin to the 3 managers")
	rbJobs := fs.Int("robustness-jobs", 5, "robustness: jobs the clients share")
	rbOut := fs.String("robustness-out", "", "robustness: where a failing run writes the porcupine visualisation and the history (default: a fresh dir under the system temp dir)")
	rbPartitions := fs.Bool("robustness-partitions", true, "robustness: partitions too (needs root and iptables; left out with a note otherwise)")
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
		quickDefault(set, "fleet-sizes", fleetSizes, "20x200")
		quickDefault(set, "stored", stored, "500,2000,5000")
		quickDefault(set, "probes", probes, 1)
		quickDefault(set, "crash-iterations", crashIterations, 20)
		quickDefault(set, "docker-trials", dockerTrials, 5)
		quickDefault(set, "engine-reps", engineReps, 3)
		quickDefault(set, "failover-trials", failoverTrials, 3)
		quickDefault(set, "session-trials", sessionTrials, 2)
		quickDefault(set, "convergence-trials", convergenceTrials, 1)
		quickDefault(set, "duration", rbDuration, time.Minute)
		quickDefault(set, "freeze", freezeFor, 6*time.Second)
		quickDefault(set, "secure-cluster-clients", secureClusterClients, "16")
	}
	freezeTrials := *trials
	if !set["trials"] {
		freezeTrials = map[bool]int{false: 10, true: 3}[*quick]
	}
	if name == "freeze" && !set["cluster-timings"] {
		*timings = "local" // the setting: the gossip declares a frozen manager failed in about 1.5 s
	}
	s := &settings{quick: *quick, runs: *runs, warmup: *warmup, window: *window, trials: *trials,
		slots: *slots, probes: *probes, pprof: *pprof, cpuProfile: *cpuProfile, noSync: *noSync, noEngine: *noEngine, workDir: *workDir, keep: *keep, out: os.Stdout,
		timings: *timings, failoverTrials: *failoverTrials, sessionTrials: *sessionTrials, convergenceTrials: *convergenceTrials,
		writeInterval: *writeInterval, scenario: name, dockerTrials: *dockerTrials, dockerGrace: *dockerGrace,
		dockerJobNetwork: *dockerJobNetwork, engineReps: *engineReps, crashIterations: *crashIterations,
		rbDuration: *rbDuration, rbSeed: *rbSeed, rbClients: *rbClients, rbJobs: *rbJobs, rbOut: *rbOut, rbPartitions: *rbPartitions,
		freezeTrials: freezeTrials, freezeFor: *freezeFor, managerLogLevel: *managerLogLevel,
		heapProfile: *heapProfile, peerEtcd: *peerEtcd}
	var err error
	if s.clients, err = parseInts("--clients", *clients); err != nil {
		return nil, err
	}
	s.clientsSet = set["clients"]
	s.secureCluster = *secureCluster
	if s.secureClusterClients, err = parseInts("--secure-cluster-clients", *secureClusterClients); err != nil {
		return nil, err
	}
	if s.jobs, err = parseInts("--jobs", *jobs); err != nil {
		return nil, err
	}
	if s.stored, err = parseInts("--stored", *stored); err != nil {
		return nil, err
	}
	if s.fleetSizes, err = parseFleetSizes(*fleetSizes); err != nil {
		return nil, err
	}
	if s.convergenceSizes, err = parseInts("--convergence-sizes", *convergenceSizes); err != nil {
		return nil, err
	}
	switch {
	case s.runs < 1, s.trials < 1, s.slots < 1, s.probes < 1, s.crashIterations < 1:
		return nil, errors.New("--runs, --trials, --slots, --probes and --crash-iterations must be at least 1")
	case s.dockerTrials < 1, s.engineReps < 1:
		return nil, errors.New("--docker-trials and --engine-reps must be at least 1")
	case s.dockerGrace <= 0:
		return nil, errors.New("--docker-stop-grace must be positive")
	case s.window <= 0 || s.warmup < 0:
		return nil, errors.New("--window must be positive and --warmup not negative")
	case s.failoverTrials < 1, s.sessionTrials < 1, s.convergenceTrials < 1:
		return nil, errors.New("--failover-trials, --session-trials and --convergence-trials must be at least 1")
	case s.timings != "lan" && s.timings != "local":
		return nil, fmt.Errorf("--cluster-timings %q: want lan or local", s.timings)
	case s.writeInterval <= 0:
		return nil, errors.New("--write-interval must be positive")
	case s.rbDuration <= 0, s.rbClients < 1, s.rbJobs < 1:
		return nil, errors.New("--duration must be positive, --robustness-clients and --robustness-jobs at least 1")
	case s.freezeFor <= 0:
		return nil, errors.New("--freeze must be positive")
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
