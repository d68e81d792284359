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

// newBundleCommand builds "norsk-ctl bundle".
func newBundleCommand() *cobra.Command {
	cmd := withExitCodes(&cobra.Command{
		Use:   "bundle",
		Short: "Create, inspect, update, delete bundles and start or stop their jobs",
		Long: `A bundle (AutoManager v1) is a set of job templates that the manager expands
into derived jobs, one per job and replica ("<bundle id>.<replica>.<job name>";
replica 1 exists when the bundle has a resiliencePolicy). A bundle file is the
protojson form of a norsk.api.manager.Bundle. Jobs with "startMode": "manual"
stay dormant (tag dormant=true) until "bundle start".`,
	})
	cmd.AddCommand(
		newBundleCreateCommand(),
		newBundleUpdateCommand(),
		newBundleGetCommand(),
		newBundleListCommand(),
		newBundleDeleteCommand(),
		newBundleJobCommand("start", "Activate a dormant job of a bundle (removes its dormant tag)"),
		newBundleJobCommand("stop", "Make a job of a bundle dormant again (stamps its dormant tag)"),
	)
	return cmd
}

// ctlReadBundleFile reads a protojson Bundle from path (ctlReadProtoFile).
func ctlReadBundleFile(cmd *cobra.Command, path string) (*managerpb.Bundle, error) {
	b := &managerpb.Bundle{}
	if err := ctlReadProtoFile(cmd, path, "bundle", b); err != nil {
		return nil, err
	}
	return b, nil
}

// newBundleCreateCommand builds "bundle create".
func newBundleCreateCommand() *cobra.Command {
	var file string
	cmd := &cobra.Command{
		Use:   "create -f BUNDLE.json",
		Short: "Create a bundle from a protojson file; prints its id once its jobs exist",
		Args:  ctlArgs(),
		RunE: ctlWithClient(func(ctx context.Context, e *ctlEnv, m *client.NorskManager, _ []string) error {
			b, err := ctlReadBundleFile(e.cmd, file)
			if err != nil {
				return err
			}
			id, err := m.CreateBundle(ctx, b)
			if err != nil {
				if b.GetBundleId().GetBundleId() == "" {
					return ctlAbout(err, "new bundle") // the manager assigns the id
				}
				return ctlAbout(err, "bundle %s", b.GetBundleId().GetBundleId())
			}
			if e.jsonOut {
				return e.printJSON(&managerpb.CreateBundleResponse{BundleId: &managerpb.BundleId{BundleId: string(id)}})
			}
			_, err = fmt.Fprintf(e.out, "created bundle %s\n", id)
			return err
		}),
	}
	cmd.Flags().StringVarP(&file, "file", "f", "", `bundle file (protojson norsk.api.manager.Bundle); "-" reads standard input`)
	return cmd
}

// newBundleUpdateCommand builds "bundle update".
func newBundleUpdateCommand() *cobra.Command {
	var file string
	cmd := &cobra.Command{
		Use:   "update -f BUNDLE.json",
		Short: "Replace a bundle by the one in a protojson file (its bundleId names it)",
		Args:  ctlArgs(),
		RunE: ctlWithClient(func(ctx context.Context, e *ctlEnv, m *client.NorskManager, _ []string) error {
			b, err := ctlReadBundleFile(e.cmd, file)
			if err != nil {
				return err
			}
			id := b.GetBundleId().GetBundleId()
			if id == "" {
				return ctlUsagef(`--file %s: the bundle has no id (set "bundleId": {"bundleId": "…"})`, file)
			}
			if err := m.UpdateBundle(ctx, b); err != nil {
				return ctlAbout(err, "bundle %s", id)
			}
			if e.jsonOut {
				return e.printJSON(&emptypb.Empty{})
			}
			_, err = fmt.Fprintf(e.out, "updated bundle %s\n", id)
			return err
		}),
	}
	cmd.Flags().StringVarP(&file, "file", "f", "", `bundle file (protojson norsk.api.manager.Bundle); "-" reads standard input`)
	return cmd
}

// newBundleGetCommand builds "bundle get".
func newBundleGetCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "get BUNDLE_ID",
		Short: "Show a bundle and the state of its derived jobs",
		Long: `Show a bundle and the state of its derived jobs: per job its replica,
whether it is dormant, the node its role runs on (replica 0 as primary, 1 as
backup), the failure domains it shares with the other replica against the
resilience policy (DEGRADED; "fix available" when a node sharing less has
room now, the job not being moved; "resolved" once the other replica moved
away), and for a job the placement engine could not place, why.`,
		Args: ctlArgs("BUNDLE_ID"),
		RunE: ctlWithClient(func(ctx context.Context, e *ctlEnv, m *client.NorskManager, args []string) error {
			info, err := m.GetBundle(ctx, client.BundleID(args[0]))
			if err != nil {
				return ctlAbout(err, "bundle %s", args[0])
			}
			if e.jsonOut {
				return e.printJSON(info)
			}
			return writeBundleDetails(e.out, info)
		}),
	}
}

// writeBundleDetails renders a GetBundle answer for a terminal.
func writeBundleDetails(w io.Writer, info *managerpb.BundleInfo) error {
	b := info.GetBundle()
	var sb strings.Builder
	field := func(name, value string) { fmt.Fprintf(&sb, "%-11s %s\n", name+":", value) }
	field("Bundle", b.GetBundleId().GetBundleId())
	field("State", bundleState(info))
	field("Generation", strconv.FormatUint(info.GetGeneration(), 10))
	if b.GetPool() != "" {
		field("Pool", b.GetPool())
	}
	field("Replicas", map[bool]string{false: "1 (primary only)", true: "2 (primary and backup)"}[b.GetResiliencePolicy() != nil])
	field("Updates", updateStrategyText(b.GetUpdateStrategy()))
	sb.WriteString("Jobs:\n")
	if _, err := io.WriteString(w, sb.String()); err != nil {
		return err
	}
	return writeBundleJobs(w, info.GetBundle().GetUpdateStrategy(), info.GetJobs())
}

// bundleState is "live", "deleting", with ", converging" while work is left.
func bundleState(info *managerpb.BundleInfo) string {
	s := format.Enum(info.GetBundle().GetState().String(), "BUNDLE_STATE_")
	if !info.GetConverged() {
		s += ", converging"
	}
	return s
}

func writeBundleJobs(w io.Writer, strategy managerpb.UpdateStrategy, jobs []*managerpb.BundleJobStatus) error {
	rows := make([][]string, 0, len(jobs))
	for _, j := range jobs {
		status := "synced"
		switch {
		case j.GetRemoving():
			status = "removing"
		case !j.GetSynced():
			status = "syncing"
		}
		status += bundleDriftNote(strategy, j)
		if j.GetLastError() != "" {
			status += ": " + j.GetLastError()
		}
		node := orDash(j.GetNodeId())
		if j.GetLastAttempt() != nil {
			node = "(not placed)"
		}
		rows = append(rows, []string{strconv.FormatUint(uint64(j.GetReplicaIndex()), 10), j.GetJobName(),
			j.GetJobId().GetJobId(), ctlYesNo(j.GetDormant()), node, format.Degradation(j.GetDegradedDomains(), j.GetDegradation()), status})
	}
	if err := ctlTable(w, []string{"REPLICA", "JOB NAME", "JOB ID", "DORMANT", "NODE", "DEGRADED", "STATUS"}, rows); err != nil {
		return err
	}
	var b strings.Builder
	for _, j := range jobs {
		if a := j.GetLastAttempt(); a != nil {
			fmt.Fprintf(&b, "\nNot placed (%s): %s\n", j.GetJobId().GetJobId(), a.GetReason())
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// newBundleListCommand builds "bundle list".
func newBundleListCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "list",
		Short: "List every bundle",
		Args:  ctlArgs(),
		RunE: ctlWithClient(func(ctx context.Context, e *ctlEnv, m *client.NorskManager, _ []string) error {
			resp, err := m.ListBundles(ctx)
			if err != nil {
				return err
			}
			if e.jsonOut {
				return e.printJSON(resp)
			}
			if len(resp.GetBundles()) == 0 {
				_, err := fmt.Fprintln(e.out, "no bundles")
				return err
			}
			rows := make([][]string, 0, len(resp.GetBundles()))
			for _, info := range resp.GetBundles() {
				rows = append(rows, []string{info.GetBundle().GetBundleId().GetBundleId(), bundleState(info),
					strconv.Itoa(len(info.GetBundle().GetJobs())), strconv.Itoa(len(info.GetJobs())), info.GetBundle().GetPool()})
			}
			return ctlTable(e.out, []string{"BUNDLE ID", "STATE", "JOB SPECS", "DERIVED JOBS", "POOL"}, rows)
		}),
	}
}

// newBundleDeleteCommand builds "bundle delete".
func newBundleDeleteCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "delete BUNDLE_ID",
		Short: "Delete a bundle: its jobs are completed and deleted, then the bundle",
		Args:  ctlArgs("BUNDLE_ID"),
		RunE: ctlWithClient(func(ctx context.Context, e *ctlEnv, m *client.NorskManager, args []string) error {
			id := client.BundleID(args[0])
			if err := m.DeleteBundle(ctx, id); err != nil {
				return ctlAbout(err, "bundle %s", id)
			}
			if e.jsonOut {
				return e.printJSON(&emptypb.Empty{})
			}
			_, err := fmt.Fprintf(e.out, "deleting bundle %s (bundle_deleted on norsk-ctl events marks the end)\n", id)
			return err
		}),
	}
}

// newBundleJobCommand builds "bundle start" and "bundle stop".
func newBundleJobCommand(verb, short string) *cobra.Command {
	var replica uint32
	cmd := &cobra.Command{
		Use:   verb + " BUNDLE_ID JOB_NAME [--replica N]",
		Short: short,
		Args:  ctlArgs("BUNDLE_ID", "JOB_NAME"),
		RunE: ctlWithClient(func(ctx context.Context, e *ctlEnv, m *client.NorskManager, args []string) error {
			id, name := client.BundleID(args[0]), args[1]
			call, done := m.StartBundleJob, "started"
			if verb == "stop" {
				call, done = m.StopBundleJob, "stopped (dormant)"
			}
			if err := call(ctx, id, replica, name); err != nil {
				return ctlAbout(err, "bundle %s job %s replica %d", id, name, replica)
			}
			if e.jsonOut {
				return e.printJSON(&emptypb.Empty{})
			}
			_, err := fmt.Fprintf(e.out, "%s job %s of bundle %s, replica %d\n", done, name, id, replica)
			return err
		}),
	}
	cmd.Flags().Uint32Var(&replica, "replica", 0, "replica index (0 primary, 1 backup)")
	return cmd
}
