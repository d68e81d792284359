package simfleet

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"path/filepath"
	"sync"
	"time"

	"github.com/norsk-oss/norsk-manager/proto/commonpb"
	"github.com/norsk-oss/norsk-manager/worker"
)

// Registrar creates one cluster slot named name with tags on the managers
// (RegisterClusterNode) and returns its node id and registration token.
// It is called concurrently; a caller that talks to a cluster retries it
// across managers itself.
type Registrar func(ctx context.Context, name string, tags map[string]string) (nodeID, token string, err error)

// Config configures a Fleet.
type Config struct {
	// ManagerURLs are the managers' API addresses (host:port) the workers
	// register with, tried in order (required).
	ManagerURLs []string
	// Register creates the cluster slots (required).
	Register Registrar
	// Nodes is the number of simulated workers (at least 1).
	Nodes int
	// Name prefixes the slot names: "<Name>-0000", "<Name>-0001"…
	// Default "sim".
	Name string
	// Capacity is each node's capacity in reference units (hello's
	// resources.capacity). Default 100.
	Capacity float64
	// Zones are given to the nodes round-robin (resources.zone); empty:
	// no zone.
	Zones []string
	// Tags are put on every slot and reported in every hello.
	Tags map[string]string
	// StateDir is the parent of the workers' state directories
	// (required; one subdirectory per node).
	StateDir string
	// HealthInterval is the workers' health period. Default 2 s, as a
	// real worker's.
	HealthInterval time.Duration
	// Parallel bounds the slot registrations in flight. Default 16.
	Parallel int
	// Logger receives the workers' logs. Nil: warnings and errors only,
	// discarded (a fleet of 1,000 logs a line per job otherwise).
	Logger *slog.Logger
}

// Node is one simulated worker.
type Node struct {
	// Name is the slot's name, ID the node id the manager gave it.
	Name, ID string
	// Zone is the zone it reports ("" for none).
	Zone string
}

// Fleet is a running simulated fleet. Start it with Start, end it with
// Close. Its methods are safe for concurrent use.
type Fleet struct {
	nodes    []Node
	ledger   *ledger
	runtimes []*simRuntime
	cancel   context.CancelFunc
	wg       sync.WaitGroup

	mu struct {
		sync.Mutex
		// errs holds the agents whose Run returned before Close, by name.
		errs map[string]error
	}
}

// Start registers cfg.Nodes cluster slots and runs a worker agent with a
// simulated runtime for each, listening on 127.0.0.1. It returns once
// every agent listens and has been given its slot's token; the caller
// waits for the nodes to be STARTED on the manager (ListNodes or
// node_started events). It returns an error naming the field for a bad
// config, or the first slot that could not be registered (the agents
// already started are stopped). Run stops when ctx ends or Close is
// called.
func Start(ctx context.Context, cfg Config) (*Fleet, error) {
	if err := cfg.fill(); err != nil {
		return nil, err
	}
	slots, err := registerSlots(ctx, cfg)
	if err != nil {
		return nil, err
	}
	runCtx, cancel := context.WithCancel(ctx)
	f := &Fleet{ledger: newLedger(), cancel: cancel}
	f.mu.errs = map[string]error{}
	for i, s := range slots {
		if err := f.startAgent(runCtx, cfg, i, s); err != nil {
			f.Close()
			return nil, err
		}
	}
	return f, nil
}

// fill checks c and sets the defaults.
func (c *Config) fill() error {
	switch {
	case len(c.ManagerURLs) == 0:
		return errors.New("simfleet: ManagerURLs is empty")
	case c.Register == nil:
		return errors.New("simfleet: Register is nil")
	case c.Nodes < 1:
		return fmt.Errorf("simfleet: Nodes (%d) must be at least 1", c.Nodes)
	case c.StateDir == "":
		return errors.New("simfleet: StateDir is empty")
	case c.Capacity < 0:
		return fmt.Errorf("simfleet: Capacity (%g) must not be negative", c.Capacity)
	}
	if c.Name == "" {
		c.Name = "sim"
	}
	if c.Capacity == 0 {
		c.Capacity = 100
	}
	if c.HealthInterval <= 0 {
		c.HealthInterval = 2 * time.Second
	}
	if c.Parallel <= 0 {
		c.Parallel = 16
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return nil
}

// slot is a registered cluster slot.
type slot struct {
	node        Node
	token, zone string
}

// registerSlots creates the slots, cfg.Parallel at a time.
func registerSlots(ctx context.Context, cfg Config) ([]slot, error) {
	slots := make([]slot, cfg.Nodes)
	errs := make([]error, cfg.Nodes)
	sem := make(chan struct{}, cfg.Parallel)
	var wg sync.WaitGroup
	for i := range slots {
		zone := ""
		if len(cfg.Zones) > 0 {
			zone = cfg.Zones[i%len(cfg.Zones)]
		}
		name := fmt.Sprintf("%s-%04d", cfg.Name, i)
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			id, token, err := cfg.Register(ctx, name, cfg.Tags)
			if err != nil {
				errs[i] = fmt.Errorf("simfleet: register slot %s: %w", name, err)
				return
			}
			slots[i] = slot{node: Node{Name: name, ID: id, Zone: zone}, token: token, zone: zone}
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return slots, nil
}

// startAgent runs the worker agent of slot s (the i-th node) until ctx
// ends.
func (f *Fleet) startAgent(ctx context.Context, cfg Config, i int, s slot) error {
	rt := newSimRuntime(s.node.ID, f.ledger)
	wc := worker.DefaultConfig()
	wc.Listen = "127.0.0.1:0"
	wc.ManagerURLs = cfg.ManagerURLs
	wc.Token = s.token
	wc.StateDir = filepath.Join(cfg.StateDir, s.node.Name)
	wc.HealthInterval = cfg.HealthInterval
	wc.StopGrace = 0
	wc.Tags = maps.Clone(cfg.Tags)
	wc.Resources = &commonpb.NodeResources{Capacity: cfg.Capacity, Zone: s.zone}
	wc.Version = "simfleet"
	wc.Logger = cfg.Logger.With("node", s.node.Name)
	wc.Runtime = rt
	a, err := worker.New(wc)
	if err != nil {
		return fmt.Errorf("simfleet: node %s: %w", s.node.Name, err)
	}
	f.nodes = append(f.nodes, s.node)
	f.runtimes = append(f.runtimes, rt)
	runDone := make(chan struct{})
	f.wg.Add(1)
	go func() {
		defer f.wg.Done()
		defer close(runDone)
		defer rt.close()
		if err := a.Run(ctx); err != nil {
			f.mu.Lock()
			f.mu.errs[s.node.Name] = err
			f.mu.Unlock()
		}
	}()
	select {
	case <-a.Ready():
		return nil
	case <-runDone:
		return fmt.Errorf("simfleet: node %s stopped before listening: %w", s.node.Name, f.Errors()[s.node.Name])
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Nodes returns the simulated nodes, in slot order.
func (f *Fleet) Nodes() []Node { return append([]Node(nil), f.nodes...) }

// Stats returns what the fleet received so far.
func (f *Fleet) Stats() Stats { return f.ledger.stats() }

// RunningOn returns the ids of the nodes on which (job, role) runs now.
func (f *Fleet) RunningOn(job, role string) []string {
	return f.ledger.nodesOf(worker.JobKey{JobID: worker.JobID(job), Role: role})
}

// FirstStart returns when the fleet first received a start of (job,
// role), and false if it never did.
func (f *Fleet) FirstStart(job, role string) (time.Time, bool) {
	return f.ledger.firstStart(worker.JobKey{JobID: worker.JobID(job), Role: role})
}

// Errors returns, by node name, the agents that stopped on their own
// with an error (a refused registration, a lost listener).
func (f *Fleet) Errors() map[string]error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return maps.Clone(f.mu.errs)
}

// Close stops every agent and waits for them. The simulated jobs end with
// them: nothing ran. Idempotent.
func (f *Fleet) Close() {
	f.cancel()
	for _, rt := range f.runtimes {
		rt.close()
	}
	f.wg.Wait()
}
