package main

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/norsk-oss/norsk-manager/client"
)

// schedulingLong is the shared part of the cordon, uncordon and drain help.
const schedulingLong = `
A node's scheduling state (ELIGIBLE, CORDONED or DRAINING) is an operator's
say on whether the placement engine may put new job instances on it; it is
stored with the node, survives manager restarts and failovers, and is shown
by "node list" (STATE "started,cordoned") and "node get" (who, when, why).
Each change emits a node_alert event (kind cordoned, draining or uncordoned;
see "norsk-ctl events"). Asking for the state a node is already in changes
nothing. Jobs started by hand with "job start --node" are not refused.
Exit code 3 for an unknown node; a terminated node is refused.`

// newNodeCordonCommand builds "node cordon".
func newNodeCordonCommand() *cobra.Command {
	var reason string
	cmd := &cobra.Command{
		Use:   "cordon NODE_ID [--reason TEXT]",
		Short: "Stop new placements on a node; its running jobs stay",
		Long: `Cordon a node: the placement engine puts no new job instances on it, and
the ones running there keep running. Cordoning a draining node stops its
drain (the jobs not yet moved stay). Undo with "node uncordon".
` + schedulingLong,
		Args: ctlArgs("NODE_ID"),
		RunE: ctlWithClient(func(ctx context.Context, e *ctlEnv, m *client.NorskManager, args []string) error {
			if err := m.CordonNode(ctx, client.NodeID(args[0]), reason); err != nil {
				return ctlAbout(err, "node %s", args[0])
			}
			return schedulingDone(e, "node %s cordoned: no new placements; its running jobs stay\n", args[0])
		}),
	}
	cmd.Flags().StringVar(&reason, "reason", "", "why, shown with the node and in its event (at most 1024 bytes)")
	return cmd
}

// newNodeUncordonCommand builds "node uncordon".
func newNodeUncordonCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "uncordon NODE_ID",
		Short: "Allow new placements on a cordoned or draining node again",
		Long: `Uncordon a node: it is eligible for new placements again. A drain in
progress ends; jobs already moved stay where they went (nothing moves back).
` + schedulingLong,
		Args: ctlArgs("NODE_ID"),
		RunE: ctlWithClient(func(ctx context.Context, e *ctlEnv, m *client.NorskManager, args []string) error {
			if err := m.UncordonNode(ctx, client.NodeID(args[0])); err != nil {
				return ctlAbout(err, "node %s", args[0])
			}
			return schedulingDone(e, "node %s uncordoned: eligible for new placements\n", args[0])
		}),
	}
}

// newNodeDrainCommand builds "node drain".
func newNodeDrainCommand() *cobra.Command {
	var reason string
	cmd := &cobra.Command{
		Use:   "drain NODE_ID [--reason TEXT]",
		Short: "Cordon a node and have its placed jobs moved elsewhere",
		Long: `Drain a node: cordon it and mark it draining. The placement engine moves
the auto-placed job instances on it to other nodes, one replica of a bundle
at a time, never a primary and its backup together, so a bundle keeps one
replica running throughout (break-before-make: the instance is stopped, then
placed again elsewhere; make-before-break moves come later). Jobs started by
hand ("job start --node") are not moved. The placement engine is the next
step of the manager: until it runs, a drained node acts as cordoned.
Watch the node with "norsk-ctl node get NODE_ID"; end the drain with "node
uncordon" (eligible again) or "node cordon" (stay cordoned).
` + schedulingLong,
		Args: ctlArgs("NODE_ID"),
		RunE: ctlWithClient(func(ctx context.Context, e *ctlEnv, m *client.NorskManager, args []string) error {
			if err := m.DrainNode(ctx, client.NodeID(args[0]), reason); err != nil {
				return ctlAbout(err, "node %s", args[0])
			}
			return schedulingDone(e, "node %s draining: no new placements; the placement engine moves its placed jobs elsewhere\n", args[0])
		}),
	}
	cmd.Flags().StringVar(&reason, "reason", "", "why, shown with the node and in its event (at most 1024 bytes)")
	return cmd
}

// schedulingDone prints the outcome of a scheduling change.
func schedulingDone(e *ctlEnv, format, node string) error {
	if e.jsonOut {
		return e.printJSON(&emptypb.Empty{})
	}
	_, err := fmt.Fprintf(e.out, format, node)
	return err
}
