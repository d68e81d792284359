package agent

import (
	"context"
	"time"

	"github.com/norsk-oss/norsk-manager/actors/placement"
	"github.com/norsk-oss/norsk-manager/actors/provisioner"
	"github.com/norsk-oss/norsk-manager/cluster/gateway"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
)

// runPlacement runs the placement engine until ctx ends: on the Raft
// leader only in a cluster (a leader singleton), always on a single
// manager. A new Engine per run: nothing of a previous term's memory
// carries over (docs/design/placement.md, "The engine"). None with
// Config.NoPlacementEngine.
func (a *Agent) runPlacement(ctx context.Context) {
	if a.cfg.NoPlacementEngine {
		return
	}
	cfg := placement.DefaultConfig()
	cfg.Store, cfg.Router, cfg.Logger, cfg.Metrics = a.store, a.router, a.log, a.metrics.placement
	if a.cfg.NodeBootTime > 0 {
		cfg.NodeBootTime = a.cfg.NodeBootTime
	}
	// A node the engine created is given up only well after the node
	// grain's own cloud timeouts (--node-pending-timeout and
	// --node-startup-timeout) would have ended it.
	cfg.NodeCreateTimeout = max(provisioner.CreateTimeout, a.cfg.Node.PendingTimeout+a.cfg.Node.StartupTimeout+10*time.Minute)
	// The AWS provider looks a node's security groups up before the
	// engine creates it (a job naming a missing group waits alone).
	if c, ok := a.cfg.Node.Providers[managerpb.NodeProvider_NODE_PROVIDER_AWS].(placement.SecurityGroupChecker); ok {
		cfg.SecurityGroups = c
	}
	e, err := placement.New(cfg)
	if err != nil {
		a.log.Error("placement engine not started", "error", err)
		return
	}
	a.engine.Store(e)
	defer a.engine.CompareAndSwap(e, nil)
	e.Run(ctx)
}

// placementEngine returns the placement engine running on this manager,
// or nil (an untyped nil, so the gateway sees none) when it runs none.
func (a *Agent) placementEngine() gateway.PlacementExplainer {
	if e := a.engine.Load(); e != nil {
		return e
	}
	return nil
}
