// Command norsk-ctl is the Norsk Manager's one client binary: with
// --mode=worker it runs the worker agent on this host; otherwise its
// subcommands are the operator CLI (jobs, nodes, cluster slots, events).
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := newRootCommand().ExecuteContext(ctx); err != nil {
		var ee *exitError
		if errors.As(err, &ee) {
			os.Exit(ee.code)
		}
		fmt.Fprintln(os.Stderr, "norsk-ctl:", err)
		os.Exit(1)
	}
}

// exitError ends the process with a specific exit code after the command has
// already reported what went wrong.
type exitError struct{ code int }

func (e *exitError) Error() string { return fmt.Sprintf("exit status %d", e.code) }

func newRootCommand() *cobra.Command {
	var mode string
	wopts := &workerOptions{}
	root := &cobra.Command{
		Use:   "norsk-ctl",
		Short: "Operate a Norsk Manager, or run a Norsk worker (--mode=worker)",
		Long: `norsk-ctl is the client of a Norsk Manager.

With --mode=worker it runs the worker agent: it registers with the manager
using a cluster-slot token, serves the worker stream the manager dials back,
and runs the jobs the manager provisions:

  norsk-ctl --mode=worker --token=TOKEN --manager-url=127.0.0.1:6790 --listen=127.0.0.1:7001 \
    --state-dir=/var/lib/norsk-worker

--manager-url defaults to $NORSK_MANAGER_URL when --token is given. The token
is needed at the first start only: the worker stores its node identity in
--state-dir, and restarted on it comes back as the same node with its jobs:

  norsk-ctl --mode=worker --manager-url=127.0.0.1:6790 --listen=127.0.0.1:7001 \
    --state-dir=/var/lib/norsk-worker

Only one worker may use a --state-dir at a time: a second one exits with code 2.

Without --mode, use the subcommands below to manage jobs, nodes, cluster
slots and to follow the event stream.`,
		SilenceUsage:  true,
		SilenceErrors: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			switch mode {
			case "worker":
				wopts.managerURLsSet = cmd.Flags().Changed(ctlFlagManagerURL)
				wopts.tls.read(cmd)
				return runWorker(cmd.Context(), cmd.ErrOrStderr(), wopts)
			case "":
				return cmd.Help()
			default:
				return ctlFail(cmd, ctlUsagef("--mode: unknown mode %q (the only mode is \"worker\")", mode))
			}
		},
	}
	root.Flags().StringVar(&mode, "mode", "", `run mode: "worker" runs the worker agent`)
	addWorkerFlags(root, wopts)
	addClientCommands(root)
	root.Long += "\n" + workerExitCodesHelp
	return root
}
