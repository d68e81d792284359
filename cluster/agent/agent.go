// Package agent wires one norsk-manager process: the store and its log,
// the actor system with the job, node, bundle and mock-pool grains, the gRPC
// gateway (with reflection and grpc.health.v1) and the background loops.
// cmd/norsk-manager is a thin main around it; tests start agents in-process
// through it.
package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/reflection"

	"github.com/norsk-oss/norsk-manager/actors"
	"github.com/norsk-oss/norsk-manager/actors/bundle"
	"github.com/norsk-oss/norsk-manager/actors/job"
	"github.com/norsk-oss/norsk-manager/actors/node"
	"github.com/norsk-oss/norsk-manager/actors/placement"
	"github.com/norsk-oss/norsk-manager/actors/reconcile"
	"github.com/norsk-oss/norsk-manager/cluster/gateway"
	"github.com/norsk-oss/norsk-manager/persistence"
	"github.com/norsk-oss/norsk-manager/proto/commonpb"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
)

// APIVersion is the Norsk API level the manager implements: the published
// wire format 1.0.384 (@norskvideo/norsk-api) plus the seed documents'
// additions.
var APIVersion = &commonpb.Version{MajorVersion: 1, MinorVersion: 0, BuildNumber: 384, BranchName: "norsk-manager-go", Label: "1.0.384-compatible"}

// Config configures an Agent. Start from DefaultConfig or DevConfig.
type Config struct {
	// APIAddr is the address of the public gRPC API (host:port; port 0
	// picks a free port, see Agent.APIAddr).
	APIAddr string
	// Store configures persistence (data dir, sync, retention).
	Store persistence.Config
	// MockWorkerURLs is the mock provider's pool (NORSK_MOCK_WORKER_URLS).
	MockWorkerURLs []string
	// Node configures node grains (health and reconnect timeouts). Its
	// Journal, Store, Router, Liveness and Logger are set by the agent.
	Node node.Config
	// NodeBootTime is how long a node the placement engine creates is
	// expected to take until its worker takes jobs
	// (placement.Config.NodeBootTime; 0: its default).
	NodeBootTime time.Duration
	// Job configures job grains (history limit, timeouts). Its Journal,
	// Router, Store and Logger are set by the agent.
	Job job.Config
	// Bundle configures bundle grains (timeouts, retry backoff). Its
	// Journal, Router and Logger are set by the agent.
	Bundle bundle.Config
	// Events configures the event stream.
	Events gateway.EventStreamConfig
	// MaxRecvMsgSize bounds one request in bytes (ResourceExhausted
	// beyond). Default 4 MiB.
	MaxRecvMsgSize int
	// MaxSendMsgSize bounds one response in bytes (the call fails with
	// ResourceExhausted beyond). Default 16 MiB (limits.go).
	MaxSendMsgSize int
	// MaxConcurrentStreams bounds the calls in flight on one client
	// connection; more wait in the client. Default 1024 (limits.go).
	MaxConcurrentStreams uint32
	// Limits bounds event streams per caller and registrations per
	// source address (gateway.LimitsConfig; zero: its defaults).
	Limits gateway.LimitsConfig
	// ShutdownGrace bounds how long Shutdown waits for in-flight calls
	// before cutting streams. Default 2 s.
	ShutdownGrace time.Duration
	// Version is the manager's build version, answered by Manager.Version.
	// Default "0.1.0-dev".
	Version string
	// Cluster configures the HA cluster; zero value: a single manager.
	Cluster ClusterConfig
	// MetricsAddr serves Prometheus metrics on http://MetricsAddr/metrics
	// (host:port; empty: no metrics endpoint).
	MetricsAddr string
	// EnableDebug also serves Go's runtime profiles (net/http/pprof) under
	// /debug/pprof/ on MetricsAddr, as Consul's enable_debug does. Off by
	// default: profiles expose internals to whoever reaches the port.
	EnableDebug bool
	// TLS secures the API and the worker links (tls.go); zero: plaintext.
	TLS TLSConfig
	// ACL turns ACL tokens on (--acl; acl.go, docs/design/security.md):
	// every API call then needs a token whose role allows it. Every
	// manager of a cluster must agree.
	ACL bool
	// NoPlacementEngine runs no placement engine on this manager: nothing
	// is auto-placed. For benchmarks that isolate the write path from the
	// engine's passes (test/bench createjob --no-placement-engine); a
	// production manager always runs it (norsk-manager has no flag).
	NoPlacementEngine bool
	Logger            *slog.Logger
}

// DefaultConfig returns production defaults for a data dir.
func DefaultConfig(dataDir string) Config {
	return Config{
		APIAddr:        "127.0.0.1:6790",
		Store:          persistence.DefaultConfig(dataDir),
		MaxRecvMsgSize: DefaultMaxRecvMsgSize,
		ShutdownGrace:  2 * time.Second,
	}
}

// DevConfig returns defaults for --dev and tests: loopback, a free port,
// short node timeouts.
func DevConfig(dataDir string) Config {
	c := DefaultConfig(dataDir)
	c.APIAddr = "127.0.0.1:0"
	c.Node.HealthTimeout = 6 * time.Second
	c.Node.InitialHealthTimeout = 6 * time.Second
	c.Node.LostTimeout = 15 * time.Second
	c.Node.RedialMax = 2 * time.Second
	return c
}

// Agent is one running manager.
type Agent struct {
	// engine is the placement engine running on this manager, nil when
	// none (placement.go).
	engine atomic.Pointer[placement.Engine]
	cfg    Config
	log    *slog.Logger
	store  *persistence.Store
	system *actor.ActorSystem
	live   *actors.Liveness
	grpc   *grpc.Server
	health *health.Server
	lis    net.Listener
	// metricsLis is the metrics listener (nil: no metrics endpoint).
	metricsLis net.Listener
	metrics    *metrics
	gateway    *gateway.Server

	// actorLogger is the slog logger of every actor system of the agent.
	actorLogger *slog.Logger

	// journal and router are the write path and the grain router: a
	// LocalLog and the local Host for a single manager, Raft and the
	// protoactor cluster in an HA cluster (cl).
	journal persistence.Journal
	router  actors.Router
	jlog    *persistence.LocalLog // single manager only
	host    *actors.Host          // single manager only
	cl      *clustered            // HA cluster only

	cancel context.CancelFunc
	wg     sync.WaitGroup
	// healthMu serialises provider health publications.
	healthMu sync.Mutex
	// healthStop ends the provider health refresher (nil if none).
	healthStop context.CancelFunc
	once       sync.Once
	// stopping is set when Shutdown begins: the libraries' warnings and
	// errors about their sockets closing are debug from then on
	// (quietOnStop, actorLog).
	stopping atomic.Bool
}

// New listens on APIAddr, opens the store and builds the agent (and, for
// an HA cluster, joins the membership and starts Raft); Start serves.
// Errors name the failing part (an address in use, a corrupt or missing
// data dir). Shutdown releases everything.
func New(cfg Config) (*Agent, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	cfg.limitDefaults()
	if cfg.ShutdownGrace <= 0 {
		cfg.ShutdownGrace = 2 * time.Second
	}
	if cfg.Version == "" {
		cfg.Version = "0.1.0-dev"
	}
	if err := cfg.Cluster.validate(); err != nil {
		return nil, err
	}
	if err := cfg.TLS.validateCluster(cfg.Cluster); err != nil {
		return nil, err
	}
	if err := validateClusterACL(cfg.Cluster, cfg.ACL, cfg.TLS); err != nil {
		return nil, err
	}
	log := cfg.Logger
	// Listen first: a busy port must fail before a new data dir is made.
	lis, err := net.Listen("tcp", cfg.APIAddr)
	if err != nil {
		return nil, fmt.Errorf("listen on API address %s: %w", cfg.APIAddr, err)
	}
	cfg.Store.Logger = log.With("component", "store")
	storeCfg := cfg.Store
	// The data dir records its mode: a single manager's dir is refused
	// as a cluster member's, and the reverse (persistence.ErrWrongMode).
	storeCfg.Mode = persistence.ModeSingle
	if cfg.Cluster.Enabled() {
		storeCfg.Mode = persistence.ModeCluster
		// In a cluster the Raft log (its own badger DB, synced as
		// cfg.Store.SyncWrites says) is what makes a write durable; the
		// store is the FSM, which records its applied index in the same
		// transaction as each apply. A store that lost its last applies
		// (power loss: the page cache, not a process kill) is therefore
		// consistent and behind, and Raft replays the logs after its
		// applied index at start (or restores a snapshot if it is behind
		// that, RaftFSM.NeedsSnapshotRestore). Syncing here too would cost
		// a second fsync per commit for nothing.
		storeCfg.SyncWrites = false
	}
	store, err := persistence.Open(storeCfg)
	if err != nil {
		lis.Close()
		return nil, err
	}
	a := &Agent{cfg: cfg, log: log, store: store, live: actors.NewLiveness(), lis: lis, metrics: newMetrics()}
	if cfg.MetricsAddr != "" {
		if a.metricsLis, err = net.Listen("tcp", cfg.MetricsAddr); err != nil {
			store.Close()
			lis.Close()
			return nil, fmt.Errorf("listen on metrics address %s: %w", cfg.MetricsAddr, err)
		}
	}
	// protoactor is chatty at info; its endpoint retries are one warning
	// per peer outage (actorLog).
	a.actorLogger = slog.New(newActorLog(log.With("component", "protoactor").Handler(), slog.LevelWarn, &a.stopping))
	a.system = a.newActorSystem()
	a.cfg.Node.DialOptions = append(a.cfg.TLS.workerDialOptions(), a.cfg.Node.DialOptions...)
	if a.cfg.Node.PinnedDialOptions == nil {
		a.cfg.Node.PinnedDialOptions = a.cfg.TLS.pinnedWorkerDialOptions
	}
	// The kinds need the router before it exists.
	router := &lateRouter{}
	if cfg.Cluster.Enabled() {
		if err := a.initCluster(router); err != nil {
			a.closeStore()
			lis.Close()
			return nil, err
		}
		return a, nil
	}
	a.jlog = persistence.NewLocalLog(store)
	a.journal = timedJournal{Journal: a.jlog, hist: a.metrics.applySecs}
	a.host, err = actors.NewHost(a.system, actors.HostConfig{Logger: log.With("component", "grains")}, a.kinds(router, nil)...)
	if err != nil {
		a.closeStore()
		lis.Close()
		return nil, err
	}
	router.Router = a.host
	a.router = a.host
	return a, nil
}

// newActorSystem returns a new actor system (with a new id) logging
// through the agent's protoactor logger.
func (a *Agent) newActorSystem() *actor.ActorSystem {
	return actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return a.actorLogger }))
}

// kinds returns the grain kinds over a.journal and router; barrier (nil for
// a single manager) makes node grains read instances from an up-to-date
// replica.
func (a *Agent) kinds(router actors.Router, barrier func(context.Context) error) []actors.Kind {
	jc := a.cfg.Job
	jc.Journal, jc.Router, jc.Store, jc.Logger = a.journal, router, a.store, a.log.With("component", "job")
	nc := a.cfg.Node
	nc.Journal, nc.Store, nc.Router, nc.Liveness, nc.Logger = a.journal, a.store, router, a.live, a.log.With("component", "node")
	nc.Barrier = barrier
	if len(nc.ManagerURLs) == 0 {
		nc.ManagerURLs = []string{a.lis.Addr().String()}
	}
	if a.cfg.TLS.mutual() && nc.ManagerCA == nil {
		nc.ManagerCA, nc.ManagerName = a.cfg.TLS.Certs.CAPEM, a.cfg.TLS.peerName()
	}
	bc := a.cfg.Bundle
	bc.Journal, bc.Router, bc.Logger = a.journal, router, a.log.With("component", "bundle")
	kinds := []actors.Kind{job.Kind(jc), node.Kind(nc), bundle.Kind(bc),
		node.PoolKind(node.PoolConfig{Journal: a.journal, URLs: a.cfg.MockWorkerURLs, Logger: a.log.With("component", "mock-pool")})}
	for i := range kinds {
		c := a.metrics.activations.WithLabelValues(kinds[i].Name)
		kinds[i].OnActivate = c.Inc
	}
	return kinds
}

// lateRouter lets grain kinds hold the router before the host exists.
type lateRouter struct{ actors.Router }

// Start serves the API on the listener New opened, then wakes the grains
// that own worker sessions and starts the background loops (in a cluster:
// bootstrap, leadership duties and health tracking). It returns once the
// API accepts connections.
func (a *Agent) Start() error {
	a.watchProviderHealth()
	lis := a.lis
	aclOpts, err := a.aclServerOptions()
	if err != nil {
		return err
	}
	// The client-certificate and internal-service guards run first, then
	// the ACL layer, then the limits.
	opts := append(append(append(a.cfg.TLS.serverOptions(), a.cfg.TLS.internalGuardOptions()...), aclOpts...), a.cfg.limitOptions()...)
	a.grpc = grpc.NewServer(append(opts,
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 5 * time.Second, PermitWithoutStream: true}),
	)...)
	gcfg := gateway.Config{
		Router: a.router, Store: a.store, Journal: a.journal, Liveness: a.live, Logger: a.log.With("component", "gateway"),
		Version: &managerpb.VersionInfo{Version: APIVersion, ManagerVersion: a.cfg.Version, GoVersion: runtime.Version()},
		Events:  a.cfg.Events, Limits: a.cfg.Limits,
		ACL: a.aclGatewayConfig(), MaxSendMsgSize: a.cfg.MaxSendMsgSize,
	}
	if c, ok := a.cfg.Node.Providers[managerpb.NodeProvider_NODE_PROVIDER_AWS].(gateway.SecurityGroupChecker); ok {
		gcfg.SecurityGroups = c // CreateJob/UpdateJob warn of a job's missing security groups
	}
	if a.cl != nil {
		gcfg.Barrier = a.cl.rep.Barrier
		gcfg.LeaderKnown = func() bool { return a.cl.rep.Leader() != "" }
		gcfg.Members = a.clusterMembers
		gcfg.LiveView = a.liveView
	} else {
		gcfg.Members = a.standaloneMembers
	}
	gcfg.Placement = a.placementEngine
	a.gateway = gateway.New(gcfg)
	a.gateway.Register(a.grpc)
	a.registerAgentGauges()
	a.registerTLSGauges()
	a.health = health.NewServer()
	// The health server starts with "" SERVING: not before the grains are
	// revived (a single manager) or a leader is known (a cluster member).
	a.setServing(false)
	healthpb.RegisterHealthServer(a.grpc, a.health)
	reflection.Register(a.grpc)
	if a.cl != nil {
		a.cl.registerServices(a.grpc)
	}

	ctx, cancel := context.WithCancel(context.Background())
	a.cancel = cancel
	a.wg.Add(1)
	go func() {
		defer a.wg.Done()
		if err := a.grpc.Serve(lis); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
			a.log.Error("gRPC server stopped", "error", err)
		}
	}()
	if a.metricsLis != nil {
		a.wg.Add(1)
		go func() {
			defer a.wg.Done()
			a.serveMetrics(ctx, a.metricsLis)
		}()
	}
	if a.cl != nil {
		a.startCluster(ctx)
	} else {
		rc := reconcile.Config{Store: a.store, Router: a.router, Logger: a.log}
		if err := reconcile.Revive(ctx, rc); err != nil {
			a.log.Error("revive grains", "error", err)
		}
		a.wg.Add(1)
		go func() {
			defer a.wg.Done()
			_ = reconcile.RunActivator(ctx, rc)
		}()
		a.wg.Add(1)
		go func() {
			defer a.wg.Done()
			a.runPlacement(ctx)
		}()
		a.setServing(true)
	}
	first, head := a.store.EventBounds()
	a.log.Info("manager serving", "api_addr", lis.Addr().String(), "data_dir", a.cfg.Store.Dir, "cluster", a.cl != nil,
		"applied_index", a.store.FSM().AppliedIndex(), "events_first", first, "events_head", head, "version", a.cfg.Version,
		"tls", a.cfg.TLS.enabled(), "mtls", a.cfg.TLS.mutual(), "acl", a.cfg.ACL)
	return nil
}

// setServing sets the health of the manager (grpc.health.v1): SERVING, or
// NOT_SERVING while a cluster member has no leader.
func (a *Agent) setServing(ok bool) {
	st := healthpb.HealthCheckResponse_NOT_SERVING
	if ok {
		st = healthpb.HealthCheckResponse_SERVING
	}
	a.health.SetServingStatus("", st)
	a.health.SetServingStatus(managerpb.Manager_ServiceDesc.ServiceName, st)
}

// APIAddr returns the address the API listens on (after Start).
func (a *Agent) APIAddr() string { return a.lis.Addr().String() }

// Store returns the agent's store (tests, benchmarks).
func (a *Agent) Store() *persistence.Store { return a.store }

// Host returns the agent's grain host (tests; nil in a cluster).
func (a *Agent) Host() *actors.Host { return a.host }

// Router returns the agent's grain router (tests).
func (a *Agent) Router() actors.Router { return a.router }

// Shutdown stops serving and closes everything; worker sessions are closed
// but no job is stopped — workers keep running them and a restarted manager
// adopts them. Idempotent.
func (a *Agent) Shutdown() {
	a.once.Do(func() {
		a.stopping.Store(true)
		if a.healthStop != nil {
			a.healthStop()
		}
		if a.health != nil {
			a.health.Shutdown()
		}
		if a.cl != nil {
			// Before the API (and the internal service followers forward
			// to) stops: a leader hands off so writes resume after one
			// round trip instead of an election timeout.
			a.cl.handOff()
		}
		if a.grpc == nil {
			a.lis.Close() // never started
			if a.metricsLis != nil {
				a.metricsLis.Close()
			}
		} else {
			done := make(chan struct{})
			go func() { a.grpc.GracefulStop(); close(done) }()
			select {
			case <-done:
			case <-time.After(a.cfg.ShutdownGrace):
				a.grpc.Stop()
				<-done
			}
		}
		if a.cancel != nil {
			a.cancel()
		}
		a.wg.Wait()
		if a.host != nil {
			a.host.Stop()
		}
		if a.cl != nil {
			// Cluster.Shutdown shuts the actor system down itself; a second
			// ActorSystem.Shutdown panics (close of a closed channel).
			a.cl.shutdown()
		} else {
			a.system.Shutdown()
		}
		a.closeStore()
		a.log.Info("manager stopped")
	})
}

func (a *Agent) closeStore() {
	if a.jlog != nil {
		a.jlog.Close()
	}
	if err := a.store.Close(); err != nil {
		a.log.Error("close store", "error", err)
	}
}
