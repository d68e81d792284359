package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/norsk-oss/norsk-manager/client"
	"github.com/norsk-oss/norsk-manager/client/format"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
	"github.com/norsk-oss/norsk-manager/proto/noderesources"
)

// findNode returns node id as ListNodes shows it; for a node the manager
// does not know it says so on standard error and returns exit code 3
// (ctlExitNotFound), as a NotFound answer would.
func findNode(ctx context.Context, e *ctlEnv, m *client.NorskManager, id string) (*managerpb.NodeInfo, error) {
	nodes, err := m.ListNodes(ctx)
	if err != nil {
		return nil, err
	}
	for _, n := range nodes {
		if n.GetMetadata().GetNodeId().GetNodeId() == id {
			return n, nil
		}
	}
	fmt.Fprintf(e.errOut, "norsk-ctl: not found: node %s\n", id)
	return nil, &exitError{code: ctlExitNotFound}
}

// newNodeGetCommand builds "node get".
func newNodeGetCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "get NODE_ID",
		Short: "Show one node: state, scheduling, session, load, runtime conditions, jobs, orphans and alerts",
		Long: `Show one node as "node list" knows it, with the runtime conditions its
worker reports in full: a Docker worker whose engine does not answer shows
"docker: down since …: docker engine at … unreachable: …" (and refuses new
jobs until it answers); the orphans it runs (jobs the store does not know,
see "node orphans"); and whether its worker session is contested (taken by a
manager outside this cluster). Exit code 3 if the manager knows no such node.`,
		Args: ctlArgs("NODE_ID"),
		RunE: ctlWithClient(func(ctx context.Context, e *ctlEnv, m *client.NorskManager, args []string) error {
			n, err := findNode(ctx, e, m, args[0])
			if err != nil {
				return err
			}
			if e.jsonOut {
				return e.printJSON(n)
			}
			return writeNodeDetails(e.out, e.now(), n)
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
	field("Scheduling", format.SchedulingDetails(now, n.GetScheduling()))
	field("Connected", ctlYesNo(n.GetConnected()))
	field("Address", format.NodeAddress(n.GetRunningMetadata()))
	field("Last seen", format.Age(now, n.GetLastSeen()))
	field("Load", fmt.Sprintf("%.0f%% CPU, %.0f MiB memory", n.GetCpuPercentage(), n.GetMemoryUsedMib()))
	field("Tags", format.Tags(n.GetMetadata().GetTags()))
	writeNodeCapacity(field, n)
	b.WriteString("Runtime:\n")
	if len(n.GetRuntimeConditions()) == 0 {
		b.WriteString("  (nothing reported)\n")
	}
	for _, c := range n.GetRuntimeConditions() {
		fmt.Fprintf(&b, "  %s\n", format.RuntimeCondition(now, c))
	}
	field("Jobs", format.Instances(n.GetInstances()))
	if c := n.GetContested(); c != "" {
		field("Contested", c)
	}
	if _, err := io.WriteString(w, b.String()); err != nil {
		return err
	}
	if len(n.GetOrphans()) == 0 {
		return nil
	}
	if _, err := fmt.Fprintln(w, "Orphans (jobs the worker runs that the store does not know):"); err != nil {
		return err
	}
	return writeOrphans(w, now, []*managerpb.NodeInfo{n})
}

// writeNodeCapacity renders what a node offers for placement and what its
// job instances take of it, one field per line.
func writeNodeCapacity(field func(name, value string), n *managerpb.NodeInfo) {
	res := n.GetResources()
	if res == nil {
		field("Capacity", fmt.Sprintf("unknown (the worker reported none), %s units allocated", format.Units(n.GetAllocatedCapacity())))
	} else {
		field("Capacity", fmt.Sprintf("%s units, %s allocated, %s free", format.Units(res.GetCapacity()),
			format.Units(n.GetAllocatedCapacity()), format.Units(n.GetFreeCapacity())))
	}
	gpu := "none"
	if res.GetGpuCapacity() > 0 || n.GetAllocatedGpuCapacity() > 0 {
		gpu = fmt.Sprintf("%s units, %s allocated, %s free", format.Units(res.GetGpuCapacity()),
			format.Units(n.GetAllocatedGpuCapacity()), format.Units(n.GetFreeGpuCapacity()))
	}
	if m := res.GetGpuModel(); m != "" {
		gpu += " (" + m + ")"
	}
	field("GPU", gpu)
	field("Capability", format.Tags(res.GetCapabilities()))
	field("Cores", nodeCores(n))
	field("Zone", format.Zone(n.GetZone()))
	field("Cloud", format.Enum(n.GetCloud().String(), "CLOUD_"))
	field("Machine", fmt.Sprintf("%s; shape %s; subnet %s", unknownDash(n.GetArchitecture()), unknownDash(n.GetShape()), unknownDash(n.GetSubnet())))
	field("Templates", noderesources.DescribeTemplates(res.GetTemplates()))
}

// nodeCores renders the cores a node offers to pinned jobs and those
// pinned: "0-7, 2 pinned (2-3)", "0-7, none pinned", "none offered".
func nodeCores(n *managerpb.NodeInfo) string {
	if len(n.GetCores()) == 0 {
		return "none offered (no job requiring cores is placed here)"
	}
	s := noderesources.FormatCPURanges(n.GetCores())
	if p := n.GetPinnedCores(); len(p) > 0 {
		return fmt.Sprintf("%s, %d pinned (%s)", s, len(p), noderesources.FormatCPURanges(p))
	}
	return s + ", none pinned"
}

// unknownDash is s, or "-" when it is empty (unknown).
func unknownDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// writeOrphans renders the orphans of nodes as a table.
func writeOrphans(w io.Writer, now time.Time, nodes []*managerpb.NodeInfo) error {
	var rows [][]string
	for _, n := range nodes {
		for _, o := range n.GetOrphans() {
			rows = append(rows, []string{
				n.GetMetadata().GetNodeId().GetNodeId(),
				o.GetJobKey().GetJobId().GetJobId(),
				o.GetJobKey().GetRole(),
				format.Age(now, o.GetFirstSeen()),
				stopIn(now, o),
			})
		}
	}
	if len(rows) == 0 {
		_, err := fmt.Fprintln(w, "no orphans")
		return err
	}
	return ctlTable(w, []string{"NODE ID", "JOB ID", "ROLE", "FIRST SEEN", "STOPPED IN"}, rows)
}

// stopIn says when an orphan will be stopped.
func stopIn(now time.Time, o *managerpb.Orphan) string {
	if o.GetStopAt() == nil {
		return "-"
	}
	d := o.GetStopAt().AsTime().Sub(now).Round(time.Second)
	if d <= 0 {
		return "due"
	}
	return d.String()
}

// nodeAlerts summarises what an operator must look at on a node (node
// list's ALERTS column).
func nodeAlerts(n *managerpb.NodeInfo) string {
	var parts []string
	if k := len(n.GetOrphans()); k > 0 {
		parts = append(parts, fmt.Sprintf("%d orphan(s)", k))
	}
	if n.GetContested() != "" {
		parts = append(parts, "contested")
	}
	if len(parts) == 0 {
		return "-"
	}
	return strings.Join(parts, ", ")
}

// newNodeOrphansCommand builds "node orphans".
func newNodeOrphansCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "orphans [NODE_ID]",
		Short: "List jobs workers run that the manager's store does not know",
		Long: `List orphans: job instances a worker runs that the manager's store does not
know (a store restored from an old backup, a job deleted while its worker
was offline is not one: that is stopped). An orphan keeps running for the
manager's --orphan-grace (default 10 minutes), then it is stopped, unless its
job is created or restored meanwhile (then it is adopted). Stop one earlier
with "norsk-ctl node stop-orphan".`,
		Args: cobra.MaximumNArgs(1),
		RunE: ctlWithClient(func(ctx context.Context, e *ctlEnv, m *client.NorskManager, args []string) error {
			nodes, err := m.ListNodes(ctx)
			if err != nil {
				return err
			}
			if len(args) == 1 {
				n, err := findNode(ctx, e, m, args[0])
				if err != nil {
					return err
				}
				nodes = []*managerpb.NodeInfo{n}
			}
			if e.jsonOut {
				var out []*managerpb.Orphan
				for _, n := range nodes {
					out = append(out, n.GetOrphans()...)
				}
				return e.printJSON(&managerpb.NodeInfo{Orphans: out})
			}
			return writeOrphans(e.out, e.now(), nodes)
		}),
	}
}

// newNodeStopOrphanCommand builds "node stop-orphan".
func newNodeStopOrphanCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "stop-orphan NODE_ID JOB_ID ROLE",
		Short: "Stop an orphan job instance on its node now",
		Args:  ctlArgs("NODE_ID", "JOB_ID", "ROLE"),
		RunE: ctlWithClient(func(ctx context.Context, e *ctlEnv, m *client.NorskManager, args []string) error {
			if err := m.StopOrphan(ctx, client.NodeID(args[0]), client.JobID(args[1]), args[2]); err != nil {
				return ctlAbout(err, "orphan %s role %s on node %s", args[1], args[2], args[0])
			}
			if e.jsonOut {
				return e.printJSON(&emptypb.Empty{})
			}
			_, err := fmt.Fprintf(e.out, "stopping orphan %s role %s on node %s\n", args[1], args[2], args[0])
			return err
		}),
	}
}
