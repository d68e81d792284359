package agent

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/pprof"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/norsk-oss/norsk-manager/actors/placement"
	"github.com/norsk-oss/norsk-manager/persistence"
)

// metrics are the manager's Prometheus metrics, on a registry of its own.
type metrics struct {
	reg         *prometheus.Registry
	applySecs   prometheus.Histogram
	activations *prometheus.CounterVec
	rejoins     prometheus.Counter
	placement   *placement.Metrics
}

func newMetrics() *metrics {
	m := &metrics{
		reg: prometheus.NewRegistry(),
		applySecs: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "norsk_manager_journal_append_seconds",
			Help:    "Time from a grain's journal append to its acknowledgement (durable; in a cluster, committed by a quorum and applied here).",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14),
		}),
		activations: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "norsk_manager_grain_activations_total",
			Help: "Grain activations on this manager, by kind.",
		}, []string{"kind"}),
		rejoins: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "norsk_manager_actor_rejoins_total",
			Help: "Times this manager rejoined the actor cluster under a new id after the others declared it failed (a freeze, a partition).",
		}),
	}
	m.reg.MustRegister(m.applySecs, m.activations, m.rejoins, collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	// A fresh registry: registering cannot fail.
	m.placement, _ = placement.NewMetrics(m.reg)
	return m
}

// gauge registers a gauge read from fn at scrape time.
func (m *metrics) gauge(name, help string, fn func() float64) {
	m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, fn))
}

// registerAgentGauges adds the gauges that read the agent's state.
func (a *Agent) registerAgentGauges() {
	m := a.metrics
	m.gauge("norsk_manager_worker_sessions", "Worker sessions up on this manager.", func() float64 { return float64(a.live.Connected()) })
	m.gauge("norsk_manager_event_subscribers", "Event streams served by this manager.", func() float64 { return float64(a.gateway.Subscribers()) })
	m.gauge("norsk_manager_applied_index", "Log index of the last batch applied to this manager's store.", func() float64 {
		return float64(a.store.FSM().AppliedIndex())
	})
	a.registerSpaceGauges()
	if a.cl != nil {
		r := a.cl.rep
		m.gauge("norsk_manager_raft_leader", "1 if this manager is the Raft leader.", func() float64 {
			if r.IsLeader() {
				return 1
			}
			return 0
		})
		m.gauge("norsk_manager_raft_has_leader", "1 if this manager knows a Raft leader.", func() float64 {
			if r.Leader() != "" {
				return 1
			}
			return 0
		})
		m.gauge("norsk_manager_raft_term", "Current Raft term.", func() float64 { return float64(r.Raft().CurrentTerm()) })
		for _, k := range a.cl.kinds {
			name := k.Name
			m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
				Name: "norsk_manager_grains_active", Help: "Grains activated on this manager right now, by kind.",
				ConstLabels: prometheus.Labels{"kind": name},
			}, func() float64 {
				if ak := a.cl.layer().cluster.GetClusterKind(name); ak != nil {
					return float64(ak.Count())
				}
				return 0
			}))
		}
		m.gauge("norsk_manager_raft_commit_index", "Raft commit index known here.", func() float64 { return float64(r.Raft().CommitIndex()) })
		m.gauge("norsk_manager_raft_last_contact_seconds", "Seconds since this follower last heard from the leader (0 on the leader).", func() float64 {
			if r.IsLeader() {
				return 0
			}
			if lc := r.Raft().LastContact(); !lc.IsZero() {
				return time.Since(lc).Seconds()
			}
			return -1
		})
	}
}

// registerSpaceGauges exports the store's free-space guard
// (persistence.DiskGuard): the data dir's free bytes (sampled every
// second), the reserve, whether writes are refused for space right now and
// how many were. With --min-free-disk 0 the guard is off and all read 0.
func (a *Agent) registerSpaceGauges() {
	m, g := a.metrics, a.store.DiskGuard()
	m.gauge("norsk_manager_data_dir_free_bytes", "Free bytes of the data dir's filesystem (sampled every second; 0 with --min-free-disk 0).",
		func() float64 { return float64(g.Free()) })
	m.gauge("norsk_manager_data_dir_min_free_bytes", "The data dir's free-space reserve (--min-free-disk): writes are refused below it.",
		func() float64 { return float64(g.MinFree()) })
	m.gauge("norsk_manager_writes_refused_for_space", "1 while this manager refuses writes because its data dir is under the free-space reserve.",
		func() float64 {
			if g.Low() {
				return 1
			}
			return 0
		})
	m.reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "norsk_manager_writes_refused_for_space_total",
		Help: "Writes this manager refused (RESOURCE_EXHAUSTED) because its data dir was under the free-space reserve.",
	}, func() float64 { return float64(g.Refused()) }))
}

// serveMetrics serves /metrics (and /debug/pprof/ with EnableDebug) on lis
// until ctx ends.
func (a *Agent) serveMetrics(ctx context.Context, lis net.Listener) {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(a.metrics.reg, promhttp.HandlerOpts{}))
	if a.cfg.EnableDebug {
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	a.wg.Add(1)
	go func() {
		defer a.wg.Done()
		<-ctx.Done()
		_ = srv.Close()
	}()
	if err := srv.Serve(lis); err != nil && !errors.Is(err, http.ErrServerClosed) {
		a.log.Error("metrics server stopped", "error", err)
	}
}

// timedJournal records the latency of every append.
type timedJournal struct {
	persistence.Journal
	hist prometheus.Histogram
}

func (t timedJournal) Append(ctx context.Context, key persistence.EntityKey, seq persistence.Seq, c persistence.Change) (persistence.AppendResult, error) {
	start := time.Now()
	res, err := t.Journal.Append(ctx, key, seq, c)
	t.hist.Observe(time.Since(start).Seconds())
	return res, err
}
