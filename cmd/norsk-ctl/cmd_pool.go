package main

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/spf13/cobra"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/norsk-oss/norsk-manager/client"
	"github.com/norsk-oss/norsk-manager/client/format"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
)

// newPoolCommand builds "norsk-ctl pool".
func newPoolCommand() *cobra.Command {
	cmd := withExitCodes(&cobra.Command{
		Use:   "pool",
		Short: "Create, inspect, update and delete placement pools",
		Long: `A pool is a set of nodes the placement engine places jobs into, as tiers
ordered cheap to expensive: a node is in a tier when it carries every tag of
the tier's nodeSelector, and the engine fills the first tier with room before
the next. A bundle names its pool (Bundle.pool, resiliencePolicy.pool for the
backups); a plain job with autoPlacement names it with the tag pool=NAME.
A pool file is the protojson form of a norsk.api.manager.Pool (see
examples/pools/). A tier may carry a provisioner (aws, oci or mock): when
jobs of the pool wait and no node has room, the engine creates nodes of that
tier (at most maxNodes), and terminates them after lingerSeconds (default
300) without a job; pool get shows what it created and the offerings it
keeps out after capacity errors.`,
	})
	cmd.AddCommand(
		newPoolCreateCommand(),
		newPoolUpdateCommand(),
		newPoolGetCommand(),
		newPoolListCommand(),
		newPoolDeleteCommand(),
	)
	return cmd
}

// ctlReadPoolFile reads a protojson Pool from path (ctlReadProtoFile) and
// requires its name.
func ctlReadPoolFile(cmd *cobra.Command, path string) (*managerpb.Pool, error) {
	p := &managerpb.Pool{}
	if err := ctlReadProtoFile(cmd, path, "pool", p); err != nil {
		return nil, err
	}
	if p.GetName() == "" {
		return nil, ctlUsagef(`--file %s: the pool has no name (set "name": "…")`, path)
	}
	return p, nil
}

// newPoolCreateCommand builds "pool create".
func newPoolCreateCommand() *cobra.Command {
	var file string
	cmd := &cobra.Command{
		Use:   "create -f POOL.json",
		Short: "Create a pool from a protojson file",
		Long: `Create a pool from a protojson file. Without a restartCeiling the pool gets
the default, 5 failures in 10 minutes ("pool get" shows it). Priority
settings (examples/pools/priorities.json): lowPriorityMaxWaitSeconds gives up
on a LOW priority job unplaced for longer (0: never), preemptionDisabled keeps
HIGH priority jobs from stopping LOW ones, highPriorityProvisionWaitSeconds is
how long a HIGH job waits for a node being provisioned before it does.`,
		Args: ctlArgs(),
		RunE: ctlWithClient(func(ctx context.Context, e *ctlEnv, m *client.NorskManager, _ []string) error {
			p, err := ctlReadPoolFile(e.cmd, file)
			if err != nil {
				return err
			}
			if err := m.CreatePool(ctx, p); err != nil {
				return ctlAbout(err, "pool %s", p.GetName())
			}
			if e.jsonOut {
				return e.printJSON(&emptypb.Empty{})
			}
			_, err = fmt.Fprintf(e.out, "created pool %s\n", p.GetName())
			return err
		}),
	}
	cmd.Flags().StringVarP(&file, "file", "f", "", `pool file (protojson norsk.api.manager.Pool); "-" reads standard input`)
	return cmd
}

// newPoolUpdateCommand builds "pool update".
func newPoolUpdateCommand() *cobra.Command {
	var file string
	var version uint64
	cmd := &cobra.Command{
		Use:   "update -f POOL.json [--version N]",
		Short: "Replace a pool by the one in a protojson file (its name names it)",
		Long: `Replace a pool by the one in a protojson file. The manager accepts the update
only if the pool has not changed since it was read: the file's version, or
--version, must be the pool's current version. The usual way is to start from
"norsk-ctl pool get NAME -o json > POOL.json", which carries it.`,
		Args: ctlArgs(),
		RunE: ctlWithClient(func(ctx context.Context, e *ctlEnv, m *client.NorskManager, _ []string) error {
			p, err := ctlReadPoolFile(e.cmd, file)
			if err != nil {
				return err
			}
			if e.cmd.Flags().Changed("version") {
				p.Version = version
			}
			if p.GetVersion() == 0 {
				return ctlUsagef("the pool has no version: pass --version (norsk-ctl pool get %s shows it)", p.GetName())
			}
			if err := m.UpdatePool(ctx, p); err != nil {
				return ctlAbout(err, "pool %s at version %d", p.GetName(), p.GetVersion())
			}
			if e.jsonOut {
				return e.printJSON(&emptypb.Empty{})
			}
			_, err = fmt.Fprintf(e.out, "updated pool %s\n", p.GetName())
			return err
		}),
	}
	cmd.Flags().StringVarP(&file, "file", "f", "", `pool file (protojson norsk.api.manager.Pool); "-" reads standard input`)
	cmd.Flags().Uint64Var(&version, "version", 0, "the pool's current version (overrides version in the file)")
	return cmd
}

// newPoolGetCommand builds "pool get".
func newPoolGetCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "get NAME",
		Short: "Show a pool: its version, restart ceiling and tiers in order",
		Args:  ctlArgs("NAME"),
		RunE: ctlWithClient(func(ctx context.Context, e *ctlEnv, m *client.NorskManager, args []string) error {
			p, err := m.GetPool(ctx, args[0])
			if err != nil {
				return ctlAbout(err, "pool %s", args[0])
			}
			if e.jsonOut {
				return e.printJSON(p)
			}
			return writePoolDetails(e.out, p)
		}),
	}
}

// writePoolDetails renders a GetPool answer for a terminal.
func writePoolDetails(w io.Writer, p *managerpb.Pool) error {
	var sb strings.Builder
	field := func(name, value string) { fmt.Fprintf(&sb, "%-16s %s\n", name+":", value) }
	field("Pool", p.GetName())
	field("Version", strconv.FormatUint(p.GetVersion(), 10))
	if p.GetDescription() != "" {
		field("Description", p.GetDescription())
	}
	field("Restart ceiling", format.RestartCeiling(p.GetRestartCeiling()))
	field("Preemption", format.Preemption(p))
	field("Bronze drop", format.BronzeDrop(p.GetLowPriorityMaxWaitSeconds()))
	sb.WriteString("Tiers (cheap to expensive):\n")
	if _, err := io.WriteString(w, sb.String()); err != nil {
		return err
	}
	rows := make([][]string, 0, len(p.GetTiers()))
	for i, t := range p.GetTiers() {
		sel := format.Tags(t.GetNodeSelector())
		if sel == "-" {
			sel = "(every node)"
		}
		rows = append(rows, []string{strconv.Itoa(i + 1), t.GetName(), sel, format.MaxNodes(t.GetMaxNodes()),
			tierProvisioner(t), tierLinger(t), tierNodes(p, t)})
	}
	if err := ctlTable(w, []string{"#", "TIER", "NODE SELECTOR", "MAX NODES", "PROVISIONER", "LINGER", "ENGINE NODES"}, rows); err != nil {
		return err
	}
	if err := writeTierTemplates(w, p); err != nil {
		return err
	}
	return writeBackoffs(w, p)
}

// newPoolListCommand builds "pool list".
func newPoolListCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "list",
		Short: "List every pool",
		Args:  ctlArgs(),
		RunE: ctlWithClient(func(ctx context.Context, e *ctlEnv, m *client.NorskManager, _ []string) error {
			resp, err := m.ListPools(ctx)
			if err != nil {
				return err
			}
			if e.jsonOut {
				return e.printJSON(resp)
			}
			if len(resp.GetPools()) == 0 {
				_, err := fmt.Fprintln(e.out, "no pools")
				return err
			}
			rows := make([][]string, 0, len(resp.GetPools()))
			for _, p := range resp.GetPools() {
				rows = append(rows, []string{p.GetName(), strconv.FormatUint(p.GetVersion(), 10),
					format.PoolTiers(p), format.RestartCeiling(p.GetRestartCeiling())})
			}
			return ctlTable(e.out, []string{"POOL", "VERSION", "TIERS", "RESTART CEILING"}, rows)
		}),
	}
}

// newPoolDeleteCommand builds "pool delete".
func newPoolDeleteCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "delete NAME",
		Short: "Delete a pool that no bundle or auto-placed job names",
		Args:  ctlArgs("NAME"),
		RunE: ctlWithClient(func(ctx context.Context, e *ctlEnv, m *client.NorskManager, args []string) error {
			if err := m.DeletePool(ctx, args[0]); err != nil {
				return ctlAbout(err, "pool %s", args[0])
			}
			if e.jsonOut {
				return e.printJSON(&emptypb.Empty{})
			}
			_, err := fmt.Fprintf(e.out, "deleted pool %s\n", args[0])
			return err
		}),
	}
}
