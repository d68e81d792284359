package main

import (
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/norsk-oss/norsk-manager/client"
	"github.com/norsk-oss/norsk-manager/client/format"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
)

// newJobPlacementCommand builds "job placement".
func newJobPlacementCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "placement JOB_ID",
		Short: "Show where a job's roles run, or why the placement engine could not place them",
		Long: `Show where each role of an auto-placed job runs (node, pool tier, degraded
failure domains) or, for a role not placed, the placement engine's last
attempt: when it was first seen, the reason, and the nodes each filter
removed ("constraint cloud filtered 3 nodes; capacity exhausted on 2
nodes"). Any manager answers from its replica of the job record; the
leader's engine knows a failure first (the record is written at most once
per 30 s per role, on a change of the reason). DEGRADED names the failure
domains shared with the other replica against the bundle's resilience
policy, with the engine's re-check: "fix available" when a node sharing
less has room now (the job is not moved), "resolved" once the other
replica moved away.`,
		Args: ctlArgs("JOB_ID"),
		RunE: ctlWithClient(func(ctx context.Context, e *ctlEnv, m *client.NorskManager, args []string) error {
			p, err := m.GetPlacement(ctx, client.JobID(args[0]))
			if err != nil {
				return ctlAbout(err, "job %s", args[0])
			}
			if e.jsonOut {
				return e.printJSON(p)
			}
			return writePlacement(e.out, p)
		}),
	}
}

// writePlacement renders a GetPlacement answer for a terminal: a table of
// the roles, then each failed attempt's reason and filter counts.
func writePlacement(w io.Writer, p *managerpb.PlacementInfo) error {
	var b strings.Builder
	fmt.Fprintf(&b, "%-13s %s\n", "Job:", p.GetJobId())
	auto := "no (placed by hand)"
	if p.GetAutoPlaced() {
		auto = "yes"
	}
	fmt.Fprintf(&b, "%-13s %s\n", "Auto-placed:", auto)
	if r := p.GetTerminalReason(); r != "" {
		fmt.Fprintf(&b, "%-13s %s (never placed again until UpdateJob clears it)\n", "Terminal:", r)
	}
	if _, err := io.WriteString(w, b.String()); err != nil {
		return err
	}
	if len(p.GetRoles()) == 0 {
		_, err := io.WriteString(w, "No role placed and no attempt recorded yet.\n")
		return err
	}
	rows := make([][]string, 0, len(p.GetRoles()))
	for _, r := range p.GetRoles() {
		node, tier, degraded := orDash(r.GetNodeId()), orDash(r.GetTier()), format.Degradation(r.GetDegradedDomains(), r.GetDegradation())
		if r.GetNodeId() == "" {
			node = "(not placed)"
		}
		rows = append(rows, []string{r.GetRole(), node, tier, degraded})
	}
	if err := ctlTable(w, []string{"ROLE", "NODE", "TIER", "DEGRADED"}, rows); err != nil {
		return err
	}
	b.Reset()
	for _, r := range p.GetRoles() {
		a := r.GetLastAttempt()
		if a == nil {
			continue
		}
		fmt.Fprintf(&b, "\nPlacement failure (%s), since %s:\n  %s\n", r.GetRole(), a.GetSince().AsTime().UTC().Format("2006-01-02T15:04:05Z"), a.GetReason())
		if len(a.GetFilters()) > 0 {
			fmt.Fprintf(&b, "  %d nodes evaluated:\n", a.GetNodesEvaluated())
			for _, f := range a.GetFilters() {
				fmt.Fprintf(&b, "    * %s\n", f.GetDetail())
			}
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
