package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	"github.com/norsk-oss/norsk-manager/client"
	"github.com/norsk-oss/norsk-manager/client/format"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
)

// newClusterCommand builds "norsk-ctl cluster".
func newClusterCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "cluster",
		Short: "Inspect the HA cluster of managers",
	}
	cmd.AddCommand(&cobra.Command{
		Use:   "members",
		Short: "List the managers with their address, Raft role, term, last contact and applied index",
		Long: `List the managers of the cluster as the manager you ask sees them: gossip
state, Raft role (leader, follower, candidate; "unknown" if its status could
not be read), term, when it last heard from the leader, and its applied and
commit indexes. A single manager lists itself.`,
		Args: ctlArgs(),
		RunE: ctlWithClient(func(ctx context.Context, e *ctlEnv, m *client.NorskManager, _ []string) error {
			resp, err := m.ClusterMembers(ctx)
			if err != nil {
				return err
			}
			if e.jsonOut {
				return e.printJSON(resp)
			}
			return writeMembersTable(e.out, e.now(), resp)
		}),
	})
	return cmd
}

// writeMembersTable renders ClusterMembers as a table.
func writeMembersTable(w io.Writer, now time.Time, resp *managerpb.ClusterMembersResponse) error {
	rows := make([][]string, 0, len(resp.GetMembers()))
	for _, mb := range resp.GetMembers() {
		contact := "-"
		if mb.GetLastContact() != nil {
			contact = format.Age(now, mb.GetLastContact())
		}
		state := mb.GetRaftState()
		if mb.GetError() != "" {
			state += " (" + mb.GetError() + ")"
		}
		rows = append(rows, []string{mb.GetName(), mb.GetApiAddr(), mb.GetGossipState(), state, ctlYesNo(mb.GetVoter()),
			fmt.Sprint(mb.GetTerm()), contact, fmt.Sprint(mb.GetAppliedIndex()), fmt.Sprint(mb.GetCommitIndex()), mb.GetVersion()})
	}
	if err := ctlTable(w, []string{"NAME", "API ADDRESS", "GOSSIP", "RAFT", "VOTER", "TERM", "LAST CONTACT", "APPLIED", "COMMIT", "VERSION"}, rows); err != nil {
		return err
	}
	leader := resp.GetLeader()
	if leader == "" {
		leader = "none (no quorum?)"
	}
	_, err := fmt.Fprintf(w, "leader: %s\n", leader)
	return err
}
