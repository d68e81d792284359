package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/norsk-oss/norsk-manager/client"
	"github.com/norsk-oss/norsk-manager/client/format"
	"github.com/norsk-oss/norsk-manager/proto/commonpb"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
)

// newNodeCommand builds "norsk-ctl node".
func newNodeCommand() *cobra.Command {
	cmd := withExitCodes(&cobra.Command{
		Use:   "node",
		Short: "List, show, create (mock), cordon, drain and terminate nodes; list and stop orphans",
		Long:  `Nodes are the machines that run jobs: cloud instances, cluster slots with a worker, and test-only mock nodes.`,
	})
	cmd.AddCommand(newNodeListCommand(), newNodeGetCommand(), newNodeOrphansCommand(), newNodeStopOrphanCommand(),
		newNodeTerminateCommand(), newNodeMockCreateCommand(),
		newNodeCordonCommand(), newNodeUncordonCommand(), newNodeDrainCommand())
	return cmd
}

// newNodeListCommand builds "node list".
func newNodeListCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "list",
		Short: "List every node the manager knows about",
		Args:  ctlArgs(),
		RunE: ctlWithClient(func(ctx context.Context, e *ctlEnv, m *client.NorskManager, _ []string) error {
			nodes, err := m.ListNodes(ctx)
			if err != nil {
				return err
			}
			if e.jsonOut {
				return e.printJSON(&managerpb.ListNodesResponse{Nodes: nodes})
			}
			return writeNodeTable(e.out, e.now(), nodes)
		}),
	}
}

// writeNodeTable renders ListNodes as a table.
func writeNodeTable(w io.Writer, now time.Time, nodes []*managerpb.NodeInfo) error {
	if len(nodes) == 0 {
		_, err := fmt.Fprintln(w, "no nodes")
		return err
	}
	rows := make([][]string, 0, len(nodes))
	for _, n := range nodes {
		rows = append(rows, []string{
			format.NodeOf(n.GetMetadata()),
			format.Enum(n.GetProvider().String(), "NODE_PROVIDER_"),
			format.NodeState(n),
			ctlYesNo(n.GetConnected()),
			format.NodeAddress(n.GetRunningMetadata()),
			format.Instances(n.GetInstances()),
			format.Capacity(n),
			format.Zone(n.GetZone()),
			format.Age(now, n.GetLastSeen()),
			fmt.Sprintf("%.0f%%", n.GetCpuPercentage()),
			fmt.Sprintf("%.0fMiB", n.GetMemoryUsedMib()),
			format.RuntimeConditions(n.GetRuntimeConditions()),
			format.Templates(n.GetResources().GetTemplates()),
			format.Tags(n.GetMetadata().GetTags()),
			nodeAlerts(n),
		})
	}
	return ctlTable(w, []string{"NODE ID", "PROVIDER", "STATE", "CONNECTED", "ADDRESS", "JOBS", "CAPACITY", "ZONE", "LAST SEEN", "CPU", "MEM", "RUNTIME", "TEMPLATES", "TAGS", "ALERTS"}, rows)
}

// ctlYesNo renders a bool.
func ctlYesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

// newNodeTerminateCommand builds "node terminate".
func newNodeTerminateCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "terminate NODE_ID",
		Short: "Forcibly stop a node and the jobs running on it",
		Args:  ctlArgs("NODE_ID"),
		RunE: ctlWithClient(func(ctx context.Context, e *ctlEnv, m *client.NorskManager, args []string) error {
			if err := m.TerminateNode(ctx, client.NodeID(args[0])); err != nil {
				return ctlAbout(err, "node %s", args[0])
			}
			if e.jsonOut {
				return e.printJSON(&emptypb.Empty{})
			}
			_, err := fmt.Fprintf(e.out, "terminating node %s\n", args[0])
			return err
		}),
	}
}

// newNodeMockCreateCommand builds "node mock-create".
func newNodeMockCreateCommand() *cobra.Command {
	var tags []string
	cmd := &cobra.Command{
		Use:   "mock-create NODE_ID [--tag k=v]",
		Short: "Create a node from the manager's mock pool (tests only)",
		Long: `Create a node from the manager's test-only mock pool: the manager takes the
next worker URL of NORSK_MOCK_WORKER_URLS. Fails with exit code 1
(resource exhausted) when the pool is empty.`,
		Args: ctlArgs("NODE_ID"),
		RunE: ctlWithClient(func(ctx context.Context, e *ctlEnv, m *client.NorskManager, args []string) error {
			t, err := ctlParseTags("tag", tags)
			if err != nil {
				return err
			}
			if err := m.CreateMockNode(ctx, client.NodeID(args[0]), t); err != nil {
				return ctlAbout(err, "mock node %s", args[0])
			}
			if e.jsonOut {
				return e.printJSON(&emptypb.Empty{})
			}
			_, err = fmt.Fprintf(e.out, "created mock node %s\n", args[0])
			return err
		}),
	}
	cmd.Flags().StringArrayVar(&tags, "tag", nil, "node tag key=value (repeatable)")
	return cmd
}

// newSlotCommand builds "norsk-ctl slot".
func newSlotCommand() *cobra.Command {
	cmd := withExitCodes(&cobra.Command{
		Use:   "slot",
		Short: "Register, list and deregister cluster slots (on-prem workers)",
		Long: `A cluster slot is a pre-registered on-prem node. "slot register" mints its
node id and a registration token; a worker started with that token
(norsk-ctl --mode=worker --token=…) binds to the slot and the manager dials
it back.`,
	})
	cmd.AddCommand(newSlotRegisterCommand(), newSlotListCommand(), newSlotDeregisterCommand())
	return cmd
}

// newSlotRegisterCommand builds "slot register".
func newSlotRegisterCommand() *cobra.Command {
	var tags []string
	cmd := &cobra.Command{
		Use:   "register NAME [--tag k=v]",
		Short: "Register a cluster slot; prints its node id, token and the worker command line",
		Args:  ctlArgs("NAME"),
		RunE: ctlWithClient(func(ctx context.Context, e *ctlEnv, m *client.NorskManager, args []string) error {
			t, err := ctlParseTags("tag", tags)
			if err != nil {
				return err
			}
			id, token, err := m.RegisterClusterNode(ctx, args[0], t)
			if err != nil {
				return ctlAbout(err, "cluster slot %s", args[0])
			}
			if e.jsonOut {
				return e.printJSON(&managerpb.RegisterClusterNodeResponse{NodeId: &commonpb.NodeId{NodeId: string(id)}, Token: token})
			}
			return writeSlotRegistered(e.out, args[0], string(id), token, e.url, ctlTLSFiles(e.cmd).CACert)
		}),
	}
	cmd.Flags().StringArrayVar(&tags, "tag", nil, "tag of the slot's node key=value (repeatable)")
	return cmd
}

// ctlWorkerStateDir is the --state-dir of the worker command line that
// "slot register" prints (as in the README).
const ctlWorkerStateDir = "/var/lib/norsk-worker"

// writeSlotRegistered prints a new slot and the worker command line for it.
// The worker listens on loopback when every manager is on this host;
// otherwise the operator fills in an address the managers can reach, for
// the placeholder WORKER-IP (as in the README). caCert is the CA this
// command verified the manager with ("" without TLS): then the worker
// needs it too, and a worker certificate of that CA for its dial-back port
// (a manager with --tls-ca requires one), with placeholders to fill in.
func writeSlotRegistered(w io.Writer, name, id, token, managerURL, caCert string) error {
	listen := "127.0.0.1:7001"
	note := ""
	if !ctlAllLoopback(managerURL) {
		listen = "WORKER-IP:7001"
		note = "\nReplace WORKER-IP by an address of the worker host that the managers can reach.\n"
	}
	tlsLine := ""
	if caCert != "" {
		tlsLine = fmt.Sprintf(" \\\n    --ca-cert=%s --tls-cert=WORKER.pem --tls-key=WORKER-key.pem", ctlShellQuote(caCert))
		note += "\nWORKER.pem and WORKER-key.pem: a worker certificate of that CA for this host " +
			"(norsk-manager tls cert create --worker), needed when the manager has --tls-ca.\n"
	}
	_, err := fmt.Fprintf(w, `registered cluster slot %q
node id: %s
token:   %s

Run the worker on the slot's host with:

  norsk-ctl --mode=worker --token=%s --manager-url=%s \
    --listen=%s --state-dir=%s%s
%s`, name, id, token, ctlShellQuote(token), ctlShellQuote(managerURL), listen, ctlWorkerStateDir, tlsLine, note)
	return err
}

// ctlAllLoopback reports whether every address of a --manager-url is on this
// host.
func ctlAllLoopback(managerURL string) bool {
	addrs, err := client.ParseURL(managerURL)
	if err != nil {
		return false
	}
	for _, a := range addrs {
		host, _, err := net.SplitHostPort(a)
		if err != nil {
			return false
		}
		ip := net.ParseIP(host)
		if host != "localhost" && (ip == nil || !ip.IsLoopback()) {
			return false
		}
	}
	return true
}

// newSlotListCommand builds "slot list".
func newSlotListCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "list",
		Short: "List cluster slots with their workers and tokens",
		Args:  ctlArgs(),
		RunE: ctlWithClient(func(ctx context.Context, e *ctlEnv, m *client.NorskManager, _ []string) error {
			slots, err := m.ListClusterNodes(ctx)
			if err != nil {
				return err
			}
			if e.jsonOut {
				return e.printJSON(&managerpb.ListClusterNodesResponse{Nodes: slots})
			}
			return writeSlotTable(e.out, e.now(), slots)
		}),
	}
}

// writeSlotTable renders ListClusterNodes as a table.
func writeSlotTable(w io.Writer, now time.Time, slots []*managerpb.ClusterNode) error {
	if len(slots) == 0 {
		_, err := fmt.Fprintln(w, "no cluster slots (register one with: norsk-ctl slot register NAME)")
		return err
	}
	rows := make([][]string, 0, len(slots))
	for _, s := range slots {
		addr := "-"
		if s.GetAddress() != "" || s.GetPort() != 0 {
			addr = net.JoinHostPort(s.GetAddress(), strconv.FormatUint(uint64(s.GetPort()), 10))
		}
		token := s.GetToken()
		if token == "" {
			token = "-"
		}
		rows = append(rows, []string{
			s.GetName(), s.GetNodeId().GetNodeId(), ctlYesNo(s.GetActive()), ctlYesNo(s.GetTokenUsed()),
			addr, format.Age(now, s.GetLastSeen()), token,
		})
	}
	return ctlTable(w, []string{"NAME", "NODE ID", "ACTIVE", "TOKEN USED", "ADDRESS", "LAST SEEN", "TOKEN"}, rows)
}

// newSlotDeregisterCommand builds "slot deregister".
func newSlotDeregisterCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "deregister NODE_ID",
		Short: "Remove a cluster slot: its worker is disconnected, its jobs stopped, its token revoked",
		Args:  ctlArgs("NODE_ID"),
		RunE: ctlWithClient(func(ctx context.Context, e *ctlEnv, m *client.NorskManager, args []string) error {
			if err := m.DeregisterClusterNode(ctx, client.NodeID(args[0])); err != nil {
				return ctlAbout(err, "cluster slot %s", args[0])
			}
			if e.jsonOut {
				return e.printJSON(&emptypb.Empty{})
			}
			_, err := fmt.Fprintf(e.out, "deregistered cluster slot %s\n", strings.TrimSpace(args[0]))
			return err
		}),
	}
}
