package placement

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/norsk-oss/norsk-manager/actors"
	"github.com/norsk-oss/norsk-manager/actors/placement/scheduler"
	"github.com/norsk-oss/norsk-manager/actors/provisioner"
	"github.com/norsk-oss/norsk-manager/persistence"
)

// Config configures an Engine.
type Config struct {
	// Store is the replicated store the engine reads (required).
	Store *persistence.Store
	// Router delivers StartJob and UpdateJob to the job grains (required).
	Router actors.Router
	// Interval is the longest wait between passes when nothing happens.
	// Default 500 ms.
	Interval time.Duration
	// MinGap is the shortest wait between two passes, so that a stream of
	// events does not keep the loop busy. Default 50 ms.
	MinGap time.Duration
	// RequestTimeout bounds each StartJob and UpdateJob. Default 15 s
	// (above the job grain's wait for its node).
	RequestTimeout time.Duration
	// Provisioning tells whether a node being created will take a HIGH
	// priority job that fits no node now (preempt.go); nil: the engine's
	// own provisioning answers (Engine.NodeComing, coming.go).
	Provisioning Provisioning
	// NodeBootTime is how long a node the engine creates is expected to
	// take from its create to a worker that takes jobs, for NodeComing.
	// Default DefaultNodeBootTime.
	NodeBootTime time.Duration
	// NodeCreateTimeout is how long a node the engine created may stay
	// being created before the engine terminates it (provision.go).
	// Default provisioner.CreateTimeout; keep it above the node grains'
	// pending and startup timeouts, so cloud nodes end by those.
	NodeCreateTimeout time.Duration
	// SecurityGroups looks up, before the engine creates an AWS node,
	// whether the security groups it would carry exist in its region
	// (providers.AWS implements it, with a cache per region); a job naming
	// a missing group then gets no node and a reason, and its tier stays
	// open (provision_groups.go). Nil: no look-up; a missing group then
	// fails the node's launch, which keeps the group out just the same
	// (provisioner.Node.MissingGroups), one node record later.
	SecurityGroups SecurityGroupChecker
	// Clock reads the time. Default time.Now.
	Clock   func() time.Time
	Logger  *slog.Logger
	Metrics *Metrics
}

// DefaultConfig returns a Config with the defaults and no store or router.
func DefaultConfig() Config {
	return Config{Interval: 500 * time.Millisecond, MinGap: 50 * time.Millisecond, RequestTimeout: 15 * time.Second,
		NodeBootTime: DefaultNodeBootTime, Clock: time.Now, Logger: slog.New(slog.DiscardHandler)}
}

// ErrInvalidConfig is returned (wrapped, naming the field) by New.
var ErrInvalidConfig = errors.New("placement: invalid config")

// Engine is the placement engine of one leadership term: build it with
// New when this manager gains leadership, Run it, and let Run's ctx end
// when leadership is lost. Its methods are safe for concurrent use.
type Engine struct {
	cfg Config
	log *slog.Logger
	// kickCh wakes the loop (a StartJob answered); buffered 1.
	kickCh chan struct{}
	wg     sync.WaitGroup

	mu sync.Mutex
	// inflight holds the StartJobs sent and not yet answered, with what
	// they place: added to every view so a pass neither decides the role
	// again nor gives its room away. Guarded by mu.
	inflight map[key]scheduler.Placed
	// failures is the last failure of each (job, role) not placed, logged
	// once per change of its reason. Guarded by mu.
	failures map[key]Unplaced
	// terminalSent holds the jobs whose terminal_state write is in flight,
	// with the record sequence it was decided at. Guarded by mu.
	terminalSent map[scheduler.JobID]persistence.Seq
	// retryAt holds, for a (job, role) whose StartJob was refused or not
	// answered, when it may be decided again: pacing, so that a node or a
	// job that refuses is not asked again every pass. Guarded by mu.
	retryAt map[key]time.Time
	// decided holds the last decision of each (job, role) the job grain
	// accepted, for Explain (explain.go). Guarded by mu; made on first use.
	decided map[key]Decided
	// drain holds the StopJobs in flight and the drained nodes logged.
	drain drainState
	// moves holds the move steps in flight (migrate.go).
	moves moveState
	// notes holds the failure and re-check writes in flight and their
	// budget (failures.go). Guarded by mu.
	notes noteWrites
	// preempt holds the preemptions in flight (preempt.go).
	preempt preemptState
	// prov holds the provisioning work in flight (provision.go).
	prov provState

	// passMu serialises passes; base is the world they keep from pass to
	// pass (base.go). Guarded by passMu.
	passMu sync.Mutex
	base   *base
}

// startRetry is how long a (job, role) whose StartJob failed waits before
// it is decided again.
const startRetry = 2 * time.Second

// New returns an engine, or ErrInvalidConfig naming a missing field. Zero
// durations and a nil clock or logger take DefaultConfig's values.
func New(cfg Config) (*Engine, error) {
	def := DefaultConfig()
	switch {
	case cfg.Store == nil:
		return nil, fmt.Errorf("%w: store is nil", ErrInvalidConfig)
	case cfg.Router == nil:
		return nil, fmt.Errorf("%w: router is nil", ErrInvalidConfig)
	}
	if cfg.Interval <= 0 {
		cfg.Interval = def.Interval
	}
	if cfg.MinGap <= 0 {
		cfg.MinGap = def.MinGap
	}
	if cfg.RequestTimeout <= 0 {
		cfg.RequestTimeout = def.RequestTimeout
	}
	if cfg.NodeBootTime <= 0 {
		cfg.NodeBootTime = def.NodeBootTime
	}
	if cfg.NodeCreateTimeout <= 0 {
		cfg.NodeCreateTimeout = provisioner.CreateTimeout
	}
	if cfg.Clock == nil {
		cfg.Clock = def.Clock
	}
	if cfg.Logger == nil {
		cfg.Logger = def.Logger
	}
	return &Engine{cfg: cfg, log: cfg.Logger.With("loop", "placement"), kickCh: make(chan struct{}, 1),
		inflight: map[key]scheduler.Placed{}, failures: map[key]Unplaced{}, terminalSent: map[scheduler.JobID]persistence.Seq{}, retryAt: map[key]time.Time{},
		base: newBase()}, nil
}

// Run passes until ctx ends: at once, then whenever the store's World
// view changes (a placement-relevant job, a node, pool, bundle or provider
// health record: persistence.World.Changed — not every write, so a job
// created without auto placement does not wake it), a StartJob is
// answered, or Interval passes. It returns when ctx has ended and every StartJob it
// sent was answered or gave up.
func (e *Engine) Run(ctx context.Context) {
	defer e.wg.Wait()
	defer e.cfg.Metrics.setUnplaced(0)
	e.log.Info("placement engine started")
	defer e.log.Info("placement engine stopped")
	for {
		_, changed := e.cfg.Store.World().Changed()
		t0 := time.Now()
		if err := e.Pass(ctx); err != nil && ctx.Err() == nil {
			e.log.Error("placement pass failed", "error", err)
		}
		e.cfg.Metrics.ObservePass(time.Since(t0))
		if !e.wait(ctx, changed, passGap(e.cfg, time.Since(t0))) {
			return
		}
	}
}

// passGap is the least wait after a pass that took took: MinGap, or
// passGapFactor times the pass when that is longer (at most Interval), so
// that when a pass has much to do (many roles to place, a drain of a big
// node) the engine takes at most about 1/(1+passGapFactor) of a core
// however fast changes arrive; the roles that arrive meanwhile are
// decided together by the next pass.
func passGap(cfg Config, took time.Duration) time.Duration {
	return min(max(cfg.MinGap, passGapFactor*took), cfg.Interval)
}

// passGapFactor: see passGap.
const passGapFactor = 3

// wait returns after gap once changed is closed (the World changed since
// the pass read it), a kick arrives or Interval passes; false when ctx
// ended.
func (e *Engine) wait(ctx context.Context, changed <-chan struct{}, gapFor time.Duration) bool {
	gap := time.NewTimer(gapFor)
	defer gap.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-gap.C:
	}
	idle := time.NewTimer(e.cfg.Interval - min(e.cfg.Interval, gapFor))
	defer idle.Stop()
	select {
	case <-ctx.Done():
	case <-e.kickCh:
	case <-changed:
	case <-idle.C:
	}
	return ctx.Err() == nil
}

// inBackground runs send (a command to a grain: a start, a stop, a move
// step, a create) off the pass, counted by the engine's wait group (settle
// waits for it), and wakes the loop for another pass when it returns: its
// answer usually changes what the next pass decides.
func (e *Engine) inBackground(send func()) {
	e.wg.Go(func() {
		defer e.kick()
		send()
	})
}

// kick wakes the loop for another pass.
func (e *Engine) kick() {
	select {
	case e.kickCh <- struct{}{}:
	default:
	}
}

// Unplaced is why a (job, role) was last found unplaceable: for logs, for
// GetPlacement, and written to the job record (failures.go).
type Unplaced struct {
	// Reason is the text an operator reads: the decision's explanation
	// ("job J role R fits no node: 3 nodes evaluated: capacity exhausted on
	// 3 nodes (needs 2 units)"), an unknown pool, or a refused StartJob.
	Reason string
	// Metrics are the decision's filter counts when no node fitted; nil
	// for the other reasons.
	Metrics *scheduler.Metrics
	// Since is when this reason was first seen (the engine's clock).
	Since time.Time
}

// LastFailure returns why (job, role) was last found unplaceable, and false
// if it was placed since or never failed.
func (e *Engine) LastFailure(job, role string) (Unplaced, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	u, ok := e.failures[key{scheduler.JobID(job), scheduler.Role(role)}]
	return u, ok
}

// InFlight is the number of StartJobs sent and not yet answered.
func (e *Engine) InFlight() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.inflight)
}

// fail keeps text (and m, the filter counts if any) as the last failure
// of k, logging it when it changed.
//
// It counts a failed StartJob every time (each is paced by startRetry), and
// a role no node fits once per change of its explanation, so that a job
// waiting for capacity does not raise the counter at every pass.
func (e *Engine) fail(k key, result, text string, m *scheduler.Metrics, args ...any) {
	e.mu.Lock()
	old, had := e.failures[k]
	same := had && old.Reason == text
	if !same {
		e.failures[k] = Unplaced{Reason: text, Metrics: m, Since: e.cfg.Clock()}
	}
	e.mu.Unlock()
	if !same || result == ResultStartFailed {
		e.cfg.Metrics.count(result)
	}
	if !same {
		e.log.Warn("job not placed", append([]any{"job_id", k.job, "role", k.role, "result", result, "reason", text}, args...)...)
	}
}

// placedOK forgets k's failure.
func (e *Engine) placedOK(k key) {
	e.mu.Lock()
	delete(e.failures, k)
	delete(e.retryAt, k)
	e.mu.Unlock()
}

// settle waits until every StartJob and UpdateJob sent so far was answered
// (tests: a Pass, then settle, then look at the store).
func (e *Engine) settle() { e.wg.Wait() }
