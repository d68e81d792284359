package main

import (
	"context"
	"errors"

	"github.com/spf13/cobra"
)

// workerOptions holds the flags of --mode=worker. Placeholder until the
// worker agent lands.
type workerOptions struct{}

func addWorkerFlags(cmd *cobra.Command, o *workerOptions) {}

func runWorker(ctx context.Context, o *workerOptions) error {
	return errors.New("worker mode is not built yet")
}
