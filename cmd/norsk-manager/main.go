// Command norsk-manager runs the Norsk Manager daemon: the gRPC API
// (norsk.api.manager.Manager) over persistent job and node grains.
//
//	norsk-manager --data-dir /var/lib/norsk-manager --api-addr 0.0.0.0:6790
//	norsk-manager --dev --run-job examples/hello-http/job.json
package main

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/dustin/go-humanize"
	"github.com/spf13/cobra"

	"github.com/norsk-oss/norsk-manager/actors/node"
	"github.com/norsk-oss/norsk-manager/cluster/agent"
	"github.com/norsk-oss/norsk-manager/cmd/internal/buildinfo"
	"github.com/norsk-oss/norsk-manager/persistence"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := newCommand().ExecuteContext(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "norsk-manager:", err)
		var ue *usageError
		if errors.As(err, &ue) {
			os.Exit(2)
		}
		var ce interface{ ExitCode() int }
		if errors.As(err, &ce) {
			os.Exit(ce.ExitCode())
		}
		os.Exit(1)
	}
}

// usageError is a bad flag or argument: exit code 2, as for norsk-ctl.
type usageError struct{ err error }

func (e *usageError) Error() string { return e.err.Error() }
func (e *usageError) Unwrap() error { return e.err }

func usagef(format string, args ...any) error { return &usageError{err: fmt.Errorf(format, args...)} }

type options struct {
	dataDir        string
	apiAddr        string
	dev            bool
	runJob         string
	logLevel       string
	logFormat      string
	mockURLs       string
	eventRetention uint64
	auditRetention uint64
	noSync         bool
	minFreeDisk    bytesFlag
	orphanGrace    time.Duration
	moveGrace      time.Duration

	// HA cluster
	name              string
	gossipAddr        string
	clusterAddr       string
	raftAddr          string
	advertise         string
	join              string
	bootstrapExpect   int
	gossipKey         string
	deadServerTimeout time.Duration
	clusterTimings    string
	metricsAddr       string
	enableDebug       bool
	// changed reports whether the flag of that name was given on the
	// command line (nil: none was, as in unit tests of options).
	changed func(name string) bool

	providers providerOptions
	tls       tlsOptions
	devTLS    bool
	acl       bool
	limits    limitOptions
}

func defaultDataDir() string {
	if d := os.Getenv("XDG_DATA_HOME"); d != "" {
		return filepath.Join(d, "norsk-manager")
	}
	if h, err := os.UserHomeDir(); err == nil {
		return filepath.Join(h, ".local", "share", "norsk-manager")
	}
	return "norsk-manager-data"
}

func newCommand() *cobra.Command {
	o := &options{}
	cmd := &cobra.Command{
		Use:   "norsk-manager",
		Short: "Run the Norsk Manager daemon",
		Long: `norsk-manager runs the Norsk Manager: the control plane that keeps live-video
jobs running on worker nodes. It serves the Norsk Manager gRPC API
(norsk.api.manager.Manager, wire-compatible with @norskvideo/norsk-api 1.0.384)
and stores jobs, nodes and cluster slots durably in --data-dir.

Workers join through cluster slots: create one with
"norsk-ctl slot register NAME", then run the printed
"norsk-ctl --mode=worker --token=..." on the worker host; the manager dials
the worker back on its --listen address.

--dev runs a throw-away manager on loopback together with a local worker on a
fresh slot, for trying things out; with --run-job it also creates and starts
the job in the given file and prints the event stream until Ctrl-C.

--tls-cert and --tls-key serve the API over TLS only; with --tls-ca, clients
must present a certificate of that CA and workers are dialled back over TLS
(make them with "norsk-manager tls"; README, "Securing a cluster"). A
connection without a client certificate may call ClusterMemberRegister only:
a worker started with --self-signed (cloud nodes' user data does so)
registers with its token and the fingerprint of its own certificate, which
the manager then pins when it dials the worker back. In a
cluster the same certificate and CA secure the Raft and actor ports with
mutual TLS (--tls-ca is then required): a process without a certificate of
the CA carrying --tls-peer-name cannot connect to them, join or vote. SIGHUP
re-reads the certificate files.

--acl turns ACL tokens on: every call then needs "authorization: Bearer
<secret>" metadata of a token whose role allows it. Give it to every manager
of a cluster (a manager without it serves every call unauthenticated), then
run "norsk-ctl acl bootstrap" once for the first management token (README,
"Securing a cluster").

Stopping the manager (SIGINT/SIGTERM, or even SIGKILL) never stops a job:
workers keep running them and a restarted manager adopts them.
` + exitCodesHelp,
		SilenceUsage:  true,
		SilenceErrors: true,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) > 0 {
				return usagef("unexpected argument %q: norsk-manager takes only flags (see --help)", args[0])
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			if o.runJob != "" && !cmd.Flags().Changed("log-level") {
				o.logLevel = "warn" // keep the walkthrough's event lines readable
			}
			o.changed = cmd.Flags().Changed
			return run(cmd.Context(), o)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.dataDir, "data-dir", "", "directory of the manager's durable state (default "+defaultDataDir()+"; --dev: a temporary directory)")
	f.StringVar(&o.apiAddr, "api-addr", "127.0.0.1:6790", "address of the gRPC API (use 0.0.0.0:6790 to accept remote workers and clients)")
	f.BoolVar(&o.dev, "dev", false, "development mode: temporary data dir, short timeouts, and a local worker on a fresh cluster slot")
	f.BoolVar(&o.devTLS, "dev-tls", false, "with --dev: mutual TLS on the API and the local worker's link, with a throw-away CA and certificates in a temporary directory (printed; removed on exit)")
	f.StringVar(&o.runJob, "run-job", "", "with --dev: create this job (a protojson norsk.api.manager.Job file), start it on the local worker and print events until Ctrl-C")
	f.StringVar(&o.logLevel, "log-level", "info", "log level: debug, info, warn or error")
	f.StringVar(&o.logFormat, "log-format", "text", "log format: text or json")
	f.StringVar(&o.mockURLs, "mock-worker-urls", os.Getenv("NORSK_MOCK_WORKER_URLS"), "comma-separated host:port of pre-started workers for CreateMockNode (default $NORSK_MOCK_WORKER_URLS)")
	f.Uint64Var(&o.eventRetention, "event-retention", 100_000, "number of events the event log retains for resuming subscribers")
	f.Uint64Var(&o.auditRetention, "audit-retention", 100_000, "number of audit entries the audit log retains; older ones are dropped behind an anchor that keeps the chain verifiable (every manager of a cluster must use the same value)")
	f.DurationVar(&o.orphanGrace, "orphan-grace", node.DefaultOrphanGrace, "how long a job a worker runs that the store does not know (an orphan: a store restored from an old backup) keeps running before it is stopped; 0 stops it at once")
	f.DurationVar(&o.moveGrace, "worker-move-grace", node.DefaultMoveGrace, "how long a node's worker session must have been down before a worker at another address presenting the node's identity is accepted as the host having moved (while the session is up it is refused: a copied --state-dir)")
	f.BoolVar(&o.noSync, "unsafe-no-fsync", false, "do not fsync writes (benchmarks only: a crash can lose acknowledged writes)")
	o.minFreeDisk = bytesFlag(persistence.DefaultConfig("").MinFreeDisk)
	f.Var(&o.minFreeDisk, "min-free-disk", "free space the data dir's filesystem must keep: below it writes are refused (RESOURCE_EXHAUSTED, reads keep working) "+
		"until space is freed, before a full disk could crash the store; the default is four of the store's 64 MiB memtables (README, \"A full disk\"); 0 disables")
	o.providers.addFlags(f)
	o.tls.addFlags(f)
	o.limits.addFlags(f)
	f.StringVar(&o.metricsAddr, "metrics-addr", "", "serve Prometheus metrics on http://ADDR/metrics (host:port; empty: off)")
	f.BoolVar(&o.enableDebug, "enable-debug", false, "with --metrics-addr: also serve Go runtime profiles on http://ADDR/debug/pprof/")
	f.BoolVar(&o.acl, "acl", false, "require an ACL token on every API call (every manager of a cluster must have it; \"norsk-ctl acl bootstrap\" makes the first token; "+
		"a second bootstrap needs the reset index in DATA-DIR/"+agent.ACLResetFileName+")")

	// HA cluster (docs/design/ha.md): a manager is part of a cluster when
	// --join or --bootstrap-expect is given.
	f.StringVar(&o.name, "name", "", "cluster: this manager's unique name (default: the host name)")
	f.StringVar(&o.gossipAddr, "gossip-addr", "0.0.0.0:7946", "cluster: memberlist gossip bind address (host:port)")
	f.StringVar(&o.clusterAddr, "cluster-addr", "0.0.0.0:7947", "cluster: grain (actor remote) bind address (host:port)")
	f.StringVar(&o.raftAddr, "raft-addr", "0.0.0.0:7948", "cluster: Raft bind address (host:port)")
	f.StringVar(&o.advertise, "advertise", "", "cluster: host other managers use to reach this one (required when binding 0.0.0.0)")
	f.StringVar(&o.join, "join", "", "cluster: comma-separated gossip addresses of other managers, retried until one answers")
	f.IntVar(&o.bootstrapExpect, "bootstrap-expect", 0, "cluster: form a new cluster once this many managers (this one included) see each other; give the same value to each")
	f.StringVar(&o.gossipKey, "gossip-key", os.Getenv("NORSK_GOSSIP_KEY"), "cluster: base64 key (16, 24 or 32 bytes) encrypting gossip; the same on every manager (default $NORSK_GOSSIP_KEY)")
	f.DurationVar(&o.deadServerTimeout, "dead-server-timeout", 5*time.Minute, "cluster: remove a manager that stays dead (not left) this long from the Raft voters")
	f.StringVar(&o.clusterTimings, "cluster-timings", "lan", `cluster: failure-detection timings: "lan" (managers in one data centre) or "local" (one host or a fast test network: quicker failover)`)
	cmd.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return &usageError{err: err} })
	cmd.CompletionOptions.DisableDefaultCmd = true
	addSubcommands(cmd)
	return cmd
}

func newLogger(level, format string) (*slog.Logger, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return nil, usagef("--log-level: %q is not one of debug, info, warn, error", level)
	}
	opts := &slog.HandlerOptions{Level: l}
	switch format {
	case "text":
		return slog.New(slog.NewTextHandler(os.Stderr, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(os.Stderr, opts)), nil
	}
	return nil, usagef("--log-format: %q is not one of text, json", format)
}

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

func run(ctx context.Context, o *options) error {
	log, err := newLogger(o.logLevel, o.logFormat)
	if err != nil {
		return err
	}
	if o.runJob != "" && !o.dev {
		return usagef("--run-job needs --dev")
	}
	if o.eventRetention == 0 {
		return usagef("--event-retention must be at least 1")
	}
	if o.auditRetention == 0 {
		return usagef("--audit-retention must be at least 1")
	}
	var devJob *managerpb.Job
	if o.runJob != "" {
		// Read the job before starting anything: a bad file fails fast.
		if devJob, err = readJobFile(o.runJob); err != nil {
			return &usageError{err: err}
		}
	}
	// Every flag is checked before anything is created on disk.
	if err := checkListenAddr("--api-addr", o.apiAddr, "127.0.0.1:6790 or 0.0.0.0:6790"); err != nil {
		return err
	}
	if o.metricsAddr != "" {
		if err := checkListenAddr("--metrics-addr", o.metricsAddr, "127.0.0.1:9790"); err != nil {
			return err
		}
	}
	cc, err := o.clusterConfig(log)
	if err != nil {
		return err
	}
	if o.dev && o.tls.given() {
		return usagef("--dev makes its own certificates with --dev-tls: drop --tls-cert, --tls-key and --tls-ca")
	}
	if o.devTLS && !o.dev {
		return usagef("--dev-tls needs --dev")
	}
	if o.dev && o.acl {
		return usagef("--dev runs without ACLs (its local worker's slot is registered without a token): drop --acl")
	}
	tlsCfg, err := o.tls.config(log)
	if err != nil {
		return err
	}
	if cc.Enabled() && o.acl && o.tls.ca == "" {
		return usagef("--acl in a cluster needs mutual TLS between the managers (--tls-cert, --tls-key and --tls-ca): their internal service on the API port appends to the replicated log and is authorised by their certificates")
	}
	if cc.Enabled() && o.tls.given() && o.tls.ca == "" {
		return usagef("--tls-cert without --tls-ca in a cluster: the Raft and actor ports use mutual TLS and need the cluster CA (--tls-ca) to verify the other managers")
	}
	if err := o.providers.validate(); err != nil {
		return &usageError{err}
	}
	provs, err := o.providers.build(ctx, log)
	if err != nil {
		return err
	}
	var cfg agent.Config
	var dt *devTLS // --dev-tls
	if o.dev {
		dir := o.dataDir
		if dir == "" {
			if dir, err = os.MkdirTemp("", "norsk-manager-dev-"); err != nil {
				return err
			}
			if err := os.Remove(dir); err != nil { // Open creates it with its marker
				return err
			}
			defer os.RemoveAll(dir)
		}
		cfg = agent.DevConfig(dir)
		if o.apiAddr != "" {
			cfg.APIAddr = o.apiAddr
		}
		if o.devTLS {
			certDir, err := os.MkdirTemp("", "norsk-manager-dev-tls-")
			if err != nil {
				return err
			}
			defer os.RemoveAll(certDir)
			if dt, err = newDevTLS(log, certDir); err != nil {
				return err
			}
			tlsCfg = dt.managerTLS
		}
	} else {
		dir := o.dataDir
		if dir == "" {
			dir = defaultDataDir()
		}
		cfg = agent.DefaultConfig(dir)
		cfg.APIAddr = o.apiAddr
	}
	cfg.Logger = log
	cfg.Version = buildinfo.String()
	cfg.MockWorkerURLs = splitList(o.mockURLs)
	cfg.Store.EventRetention = o.eventRetention
	cfg.Store.AuditRetention = o.auditRetention
	cfg.Store.SyncWrites = !o.noSync
	cfg.Store.MinFreeDisk = uint64(o.minFreeDisk)
	if m := cfg.Store.MinSafeFreeDisk(); o.minFreeDisk != 0 && uint64(o.minFreeDisk) < m {
		return usagef("--min-free-disk %s: must be 0 (off) or at least %s (the store's 64 MiB memtable and one 4 MiB batch): "+
			"the store flushes a full memtable into a table of up to its size, and a full disk at that moment crashes the manager", o.minFreeDisk.String(), humanize.IBytes(m))
	}
	cfg.Cluster = cc
	cfg.MetricsAddr = o.metricsAddr
	cfg.TLS = tlsCfg
	cfg.ACL = o.acl
	if err := o.limits.apply(&cfg); err != nil {
		return err
	}
	cfg.EnableDebug = o.enableDebug
	cfg.Node.Providers = provs
	if o.moveGrace <= 0 {
		return usagef("--worker-move-grace %s: must be more than 0", o.moveGrace)
	}
	cfg.Node.MoveGrace = o.moveGrace
	switch {
	case o.orphanGrace < 0:
		return usagef("--orphan-grace %s: must be 0 or more", o.orphanGrace)
	case o.orphanGrace == 0:
		cfg.Node.OrphanGrace = -1 // node.Config: negative stops orphans at once
	default:
		cfg.Node.OrphanGrace = o.orphanGrace
	}
	cfg.Node.PendingTimeout, cfg.Node.StartupTimeout = o.providers.pendingTimeout, o.providers.startupTimeout
	cfg.NodeBootTime = o.providers.bootTime
	cfg.Node.ManagerURLs = splitList(o.providers.workerURLs)
	if len(provs) > 0 && len(cfg.Node.ManagerURLs) == 0 {
		if host, _, err := net.SplitHostPort(cfg.APIAddr); err == nil {
			if ip := net.ParseIP(host); host == "localhost" || ip != nil && (ip.IsLoopback() || ip.IsUnspecified()) {
				log.Warn("cloud instances' workers will be told to register at the API address, which they cannot reach from another host; give --worker-manager-url", "api_addr", cfg.APIAddr)
			}
		}
	}
	a, err := agent.New(cfg)
	if err != nil {
		return err
	}
	defer a.Shutdown()
	if err := a.Start(); err != nil {
		return err
	}
	defer watchTLS(ctx, log, tlsCfg.Certs)()
	if o.dev {
		if err := runDev(ctx, log, a, devJob, dt); err != nil {
			return err
		}
	}
	select {
	case <-ctx.Done():
	case err := <-a.Err():
		// Another manager uses our --name (already logged): stop.
		return err
	}
	log.Info("shutting down (jobs keep running on their workers)")
	return nil
}

// clusterOnlyFlags are the flags that mean something only to a cluster
// member (given with --join or --bootstrap-expect).
var clusterOnlyFlags = []string{"name", "gossip-addr", "cluster-addr", "raft-addr", "advertise", "gossip-key", "dead-server-timeout", "cluster-timings"}

const (
	// maxBootstrapExpect bounds --bootstrap-expect: every manager is a
	// Raft voter, and a commit waits for a majority of them, so more than
	// 9 voters only slows writes (etcd and Consul advise 3 or 5).
	maxBootstrapExpect = 9
	// minDeadServerTimeout bounds --dead-server-timeout from below: the
	// reaper must not remove a voter that is only paused or cut off for
	// the length of a failure-detection round.
	minDeadServerTimeout = time.Second
)

// clusterConfig turns the cluster flags into an agent.ClusterConfig (the
// zero value when neither --join nor --bootstrap-expect is given).
//
// Usage errors (exit code 2) name the flag. --join entries must carry a
// port: a bare host is refused rather than defaulted, because a default
// (this manager's own gossip port, as memberlist would use) is wrong as
// soon as managers use different ports.
func (o *options) clusterConfig(log *slog.Logger) (agent.ClusterConfig, error) {
	join := splitList(o.join)
	if len(join) == 0 && o.bootstrapExpect == 0 {
		// A cluster flag on a single manager is a mistake (a forgotten
		// --join, a copied command line): refuse it rather than run
		// something other than what the operator meant.
		for _, fl := range clusterOnlyFlags {
			if o.changed != nil && o.changed(fl) {
				return agent.ClusterConfig{}, usagef("--%s is a cluster flag: give --join or --bootstrap-expect to run a cluster member, or drop it to run a single manager", fl)
			}
		}
		return agent.ClusterConfig{}, nil
	}
	if o.dev {
		return agent.ClusterConfig{}, usagef("--dev runs a single manager: drop --join/--bootstrap-expect")
	}
	if o.bootstrapExpect < 0 || o.bootstrapExpect > maxBootstrapExpect {
		return agent.ClusterConfig{}, usagef("--bootstrap-expect %d: must be 1 to %d (every manager is a Raft voter; 3 or 5 is usual)", o.bootstrapExpect, maxBootstrapExpect)
	}
	for _, j := range join {
		host, port, err := net.SplitHostPort(j)
		if err != nil || host == "" || !validPort(port) {
			return agent.ClusterConfig{}, usagef("--join %q: want host:port, the gossip address of another manager (e.g. %s)", j, net.JoinHostPort(hostOf(j), "7946"))
		}
	}
	if o.advertise != "" {
		if err := checkAdvertise(o.advertise); err != nil {
			return agent.ClusterConfig{}, usagef("--advertise %q: %v", o.advertise, err)
		}
	}
	if o.deadServerTimeout < minDeadServerTimeout {
		return agent.ClusterConfig{}, usagef("--dead-server-timeout %s: must be at least %s (shorter removes a voter for a pause or a network blip)", o.deadServerTimeout, minDeadServerTimeout)
	}
	if o.bootstrapExpect > 1 && o.bootstrapExpect%2 == 0 {
		log.Warn(fmt.Sprintf("--bootstrap-expect %d is even: a cluster of %d managers tolerates no more failures than one of %d (%d); use an odd number",
			o.bootstrapExpect, o.bootstrapExpect, o.bootstrapExpect-1, (o.bootstrapExpect-1)/2))
	}
	name := o.name
	if name == "" {
		h, err := os.Hostname()
		if err != nil {
			return agent.ClusterConfig{}, usagef("--name: no host name to default to: %v", err)
		}
		name = h
	}
	if err := checkManagerName(name); err != nil {
		return agent.ClusterConfig{}, err
	}
	var key []byte
	if o.gossipKey != "" {
		k, err := base64.StdEncoding.DecodeString(o.gossipKey)
		if err != nil {
			return agent.ClusterConfig{}, usagef("--gossip-key: not base64: %v", err)
		}
		if n := len(k); n != 16 && n != 24 && n != 32 {
			return agent.ClusterConfig{}, usagef("--gossip-key: decodes to %d bytes; it must be 16, 24 or 32 (e.g. head -c 32 /dev/urandom | base64)", n)
		}
		key = k
	}
	cc := agent.ClusterConfig{
		Name: name, GossipAddr: o.gossipAddr, ClusterAddr: o.clusterAddr, RaftAddr: o.raftAddr, Advertise: o.advertise,
		Join: join, BootstrapExpect: o.bootstrapExpect, GossipKey: key, DeadServerTimeout: o.deadServerTimeout,
	}
	switch o.clusterTimings {
	case "lan":
	case "local":
		cc.LocalTimings = true
	default:
		return cc, usagef("--cluster-timings %q: want lan or local", o.clusterTimings)
	}
	for flag, addr := range map[string]string{"--gossip-addr": o.gossipAddr, "--cluster-addr": o.clusterAddr, "--raft-addr": o.raftAddr} {
		host, port, err := net.SplitHostPort(addr)
		if err != nil || !validPort(port) {
			return cc, usagef("%s %q: want host:port", flag, addr)
		}
		if ip := net.ParseIP(host); o.advertise == "" && (host == "" || ip != nil && ip.IsUnspecified()) {
			return cc, usagef("%s %s binds every interface: give --advertise (the address other managers reach this one at)", flag, addr)
		}
	}
	return cc, nil
}

func validPort(p string) bool {
	n, err := strconv.ParseUint(p, 10, 16)
	return err == nil && n <= 65535
}

// hostOf returns the host of "host" or "host:port" (for messages).
func hostOf(s string) string {
	if h, _, err := net.SplitHostPort(s); err == nil {
		return h
	}
	return strings.Trim(s, "[]")
}

// managerNameRe is the form of a manager's --name: it is the Raft server
// id, the memberlist node name and part of actor ids and metric labels,
// so it has the characters of ids (docs/design/jobs.md#ids) and of host
// names, which are its default.
var managerNameRe = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`)

// checkManagerName validates a manager's --name (given or defaulted from
// the host name): 1 to 64 bytes of managerNameRe. The error is a usage
// error naming the flag.
func checkManagerName(name string) error {
	if !managerNameRe.MatchString(name) {
		return usagef("--name %q: a manager's name is 1 to 64 letters, digits, '.', '_' and '-', starting with a letter or digit", name)
	}
	return nil
}

// checkAdvertise accepts an IP address or a host name, without a port:
// every bind address keeps its own port.
func checkAdvertise(s string) error {
	if ip := net.ParseIP(strings.Trim(s, "[]")); ip != nil {
		if ip.IsUnspecified() {
			return errors.New("must be an address other managers can reach, not an unspecified address")
		}
		return nil
	}
	if _, _, err := net.SplitHostPort(s); err == nil {
		return errors.New("must be a host (IP address or name) without a port: each of --gossip-addr, --cluster-addr and --raft-addr keeps its port")
	}
	if len(s) > 253 {
		return errors.New("not an IP address or host name")
	}
	for _, label := range strings.Split(s, ".") {
		if label == "" || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return errors.New("not an IP address or host name")
		}
		for _, r := range label {
			if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-') {
				return errors.New("not an IP address or host name")
			}
		}
	}
	return nil
}
