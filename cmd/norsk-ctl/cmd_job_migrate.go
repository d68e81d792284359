package main

import (
	"context"
	"fmt"
	"strings"

	"github.com/spf13/cobra"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/norsk-oss/norsk-manager/client"
	"github.com/norsk-oss/norsk-manager/client/format"
)

// newJobMigrateCommand builds "job migrate".
func newJobMigrateCommand() *cobra.Command {
	var to, reason string
	cmd := &cobra.Command{
		Use:   "migrate JOB_ID ROLE --to NODE_ID|any [--reason TEXT]",
		Short: "Move a running role of a job to another node make-before-break",
		Long: `Move a running role of a job to another node without taking it off air: the
placement engine starts a second instance under the target role
"<logical role>~<n>" (e.g. primary~1) on the target node, waits until its
worker reports it running, and only then stops the source. --to any lets the
placement chain choose (the job's requirements, pool and constraints; never
the source's node). The command returns once the move is recorded; follow it
with "norsk-ctl events" (migration_started / migration_completed /
migration_aborted) or "norsk-ctl job get". A target that fails, never runs
(5 min), or fits no node backs the move out: the source keeps running.
Abort a move with "norsk-ctl job abort-migration".`,
		Args: ctlArgs("JOB_ID", "ROLE"),
		RunE: ctlWithClient(func(ctx context.Context, e *ctlEnv, m *client.NorskManager, args []string) error {
			if strings.TrimSpace(to) == "" {
				return ctlUsagef("--to is required: a node id, or any")
			}
			id := client.JobID(args[0])
			mv, err := m.MigrateJob(ctx, id, args[1], client.NodeID(to), reason)
			if err != nil {
				return ctlAbout(err, "job %s role %s", id, args[1])
			}
			if e.jsonOut {
				return e.printJSON(mv)
			}
			_, err = fmt.Fprintf(e.out, "move begun: %s (follow with: norsk-ctl events)\n", format.MigrationDetails(string(id), mv))
			return err
		}),
	}
	cmd.Flags().StringVar(&to, "to", "", `target node id (norsk-ctl node list), or "any"`)
	cmd.Flags().StringVar(&reason, "reason", "", "why, for operators (kept with the move and its events)")
	return cmd
}

// newJobAbortMigrationCommand builds "job abort-migration".
func newJobAbortMigrationCommand() *cobra.Command {
	var reason string
	cmd := &cobra.Command{
		Use:   "abort-migration JOB_ID SOURCE_ROLE TARGET_ROLE [--reason TEXT]",
		Short: "Abort a move in progress: the source keeps running, the target is stopped",
		Long: `Abort a make-before-break move (norsk-ctl job get shows the moves in progress
with their source and target roles). The source keeps running and the target
is stopped. Aborting a move that already ended, or is already backing out,
succeeds and changes nothing. Once the move has begun stopping its source it
is too late (FailedPrecondition): the target is the instance that runs.`,
		Args: ctlArgs("JOB_ID", "SOURCE_ROLE", "TARGET_ROLE"),
		RunE: ctlWithClient(func(ctx context.Context, e *ctlEnv, m *client.NorskManager, args []string) error {
			id := client.JobID(args[0])
			if err := m.AbortMigration(ctx, id, args[1], args[2], reason); err != nil {
				return ctlAbout(err, "job %s move %s → %s", id, args[1], args[2])
			}
			if e.jsonOut {
				return e.printJSON(&emptypb.Empty{})
			}
			_, err := fmt.Fprintf(e.out, "abort requested: job %s move %s → %s (follow with: norsk-ctl events)\n", id, args[1], args[2])
			return err
		}),
	}
	cmd.Flags().StringVar(&reason, "reason", "", "why, for operators (kept with the move and its events)")
	return cmd
}
