package agent

import (
	"context"

	"github.com/norsk-oss/norsk-manager/actors/placement"
)

// runPlacement runs the placement engine until ctx ends: on the Raft
// leader only in a cluster (a leader singleton), always on a single
// manager. A new Engine per run: nothing of a previous term's memory
// carries over (docs/design/placement.md, "The engine").
func (a *Agent) runPlacement(ctx context.Context) {
	cfg := placement.DefaultConfig()
	cfg.Store, cfg.Router, cfg.Logger, cfg.Metrics = a.store, a.router, a.log, a.metrics.placement
	e, err := placement.New(cfg)
	if err != nil {
		a.log.Error("placement engine not started", "error", err)
		return
	}
	e.Run(ctx)
}
