package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/norsk-oss/norsk-manager/client"
	"github.com/norsk-oss/norsk-manager/client/format"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
)

// newNodeGetCommand builds "node get".
func newNodeGetCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "get NODE_ID",
		Short: "Show one node: state, session, load, runtime conditions and jobs",
		Long: `Show one node as "node list" knows it, with the runtime conditions its
worker reports in full: a Docker worker whose engine does not answer shows
"docker: down since …: docker engine at … unreachable: …" (and refuses new
jobs until it answers). Exit code 3 if the manager knows no such node.`,
		Args: ctlArgs("NODE_ID"),
		RunE: ctlWithClient(func(ctx context.Context, e *ctlEnv, m *client.NorskManager, args []string) error {
			nodes, err := m.ListNodes(ctx)
			if err != nil {
				return err
			}
			for _, n := range nodes {
				if n.GetMetadata().GetNodeId().GetNodeId() != args[0] {
					continue
				}
				if e.jsonOut {
					return e.printJSON(n)
				}
				return writeNodeDetails(e.out, e.now(), n)
			}
			fmt.Fprintf(e.errOut, "norsk-ctl: not found: node %s\n", args[0])
			return &exitError{code: ctlExitNotFound}
		}),
	}
}

// writeNodeDetails renders one NodeInfo for a terminal.
func writeNodeDetails(w io.Writer, now time.Time, n *managerpb.NodeInfo) error {
	var b strings.Builder
	field := func(name, value string) { fmt.Fprintf(&b, "%-11s %s\n", name+":", value) }
	field("Node", format.NodeOf(n.GetMetadata()))
	field("Provider", format.Enum(n.GetProvider().String(), "NODE_PROVIDER_"))
	state := format.Enum(n.GetState().String(), "NODE_LIFECYCLE_")
	if n.StopReason != nil {
		state += " (" + format.Enum(n.GetStopReason().String(), "") + ")"
	}
	field("State", state)
	field("Connected", ctlYesNo(n.GetConnected()))
	field("Address", format.NodeAddress(n.GetRunningMetadata()))
	field("Last seen", format.Age(now, n.GetLastSeen()))
	field("Load", fmt.Sprintf("%.0f%% CPU, %.0f MiB memory", n.GetCpuPercentage(), n.GetMemoryUsedMib()))
	field("Tags", format.Tags(n.GetMetadata().GetTags()))
	b.WriteString("Runtime:\n")
	if len(n.GetRuntimeConditions()) == 0 {
		b.WriteString("  (nothing reported)\n")
	}
	for _, c := range n.GetRuntimeConditions() {
		fmt.Fprintf(&b, "  %s\n", format.RuntimeCondition(now, c))
	}
	field("Jobs", format.Instances(n.GetInstances()))
	_, err := io.WriteString(w, b.String())
	return err
}
