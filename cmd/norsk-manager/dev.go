package main

import (
	"context"
	"log/slog"

	"github.com/norsk-oss/norsk-manager/cluster/agent"
)

// runDev starts the local worker of --dev (and the --run-job walkthrough).
// Filled in once the worker agent lands.
func runDev(ctx context.Context, log *slog.Logger, a *agent.Agent, o *options) error {
	log.Info("dev mode: manager up", "api_addr", a.APIAddr())
	return nil
}
