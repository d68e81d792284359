package main

import (
	"context"
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

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
		Long: `List the managers of the cluster as the manager you ask sees them: the
members of its gossip and the servers of its Raft configuration, so a voter
that is down is still listed (gossip "failed", or "unknown" when the gossip
does not know it, with its Raft address).

GOSSIP is the gossip state (alive, leaving, failed, left, unknown). VOTER
comes from the Raft configuration. RAFT (leader, follower, candidate), TERM,
LAST CONTACT (when it last heard from the leader), APPLIED and COMMIT are
what the member reports of itself; when its status cannot be read RAFT is
"unknown" with the reason and those columns are "-".

When no manager serves (no Raft leader), the command still asks one that
answers: its view shows which voters are missing. Whenever no leader is
known it prints the table, then says so on standard error and exits with
code 6. A leader is shown only if that member itself reports being the
leader (in the newest term any member reports): a manager's view can still
name a leader that died or was deposed, and that one is never shown.

A single manager (no cluster) lists itself under its host name with RAFT
"standalone" and its API address; it has no gossip, voters or terms ("-").
--json prints the same response (fields left out when unset).`,
		Args: ctlArgs(),
		RunE: ctlWithClient(func(ctx context.Context, e *ctlEnv, m *client.NorskManager, _ []string) error {
			resp, err := m.ClusterMembers(ctx)
			if status.Code(err) == codes.Unavailable {
				// No manager serves (no Raft leader: no quorum?). The
				// client skips NOT_SERVING managers, but their view of
				// the cluster is what diagnoses the outage: ask one of
				// them anyway.
				if r, ferr := membersAnyHealth(ctx, e); ferr == nil {
					resp, err = r, nil
				}
			}
			if err != nil {
				return err
			}
			leader, why := membersLeader(resp)
			resp.Leader = leader
			if e.jsonOut {
				err = e.printJSON(resp)
			} else {
				err = writeMembersTable(e.out, e.now(), resp, why)
			}
			if err != nil || leader != "" {
				return err
			}
			if why != "" {
				why = " (" + why + ")"
			}
			fmt.Fprintf(e.errOut, "norsk-ctl: no Raft leader is known%s: the cluster has no quorum or is electing a leader; writes fail until a majority of the voters is up\n", why)
			return &exitError{code: ctlExitUnavailable}
		}),
	})
	return cmd
}

// anyHealthServiceConfig is the client's service config without its
// client-side health checking: round robin over the managers that accept
// a connection, NOT_SERVING or not, retrying ClusterMembers on another
// one when one is unavailable.
var anyHealthServiceConfig = fmt.Sprintf(`{
  "loadBalancingConfig": [{"round_robin": {}}],
  "methodConfig": [{
    "name": [{"service": %q, "method": "ClusterMembers"}],
    "retryPolicy": {"maxAttempts": 5, "initialBackoff": "0.05s", "maxBackoff": "1s", "backoffMultiplier": 2, "retryableStatusCodes": ["UNAVAILABLE"]}
  }]
}`, managerpb.Manager_ServiceDesc.ServiceName)

// membersAnyHealth asks ClusterMembers of any manager that answers,
// including those reporting NOT_SERVING.
func membersAnyHealth(ctx context.Context, e *ctlEnv) (*managerpb.ClusterMembersResponse, error) {
	settings := e.settings
	settings.DialOptions = append(slices.Clone(settings.DialOptions), grpc.WithDefaultServiceConfig(anyHealthServiceConfig))
	m, err := client.Connect(ctx, settings)
	if err != nil {
		return nil, err
	}
	defer func() { _ = m.Close() }()
	return m.ClusterMembers(ctx)
}

// membersLeader returns the leader a ClusterMembers response names if its
// own row confirms it (raft state "leader", or "standalone" for a single
// manager), else "" and why a leader it named is not shown ("" when it
// named none). The manager already checks this
// (cluster/agent confirmedLeader); checking again here keeps a dead
// leader named by an older manager off the screen.
func membersLeader(resp *managerpb.ClusterMembersResponse) (leader, why string) {
	named := resp.GetLeader()
	if named == "" {
		return "", ""
	}
	for _, mb := range resp.GetMembers() {
		if mb.GetName() != named {
			continue
		}
		if st := mb.GetRaftState(); st == "leader" || st == "standalone" {
			return named, ""
		}
		return "", fmt.Sprintf("the manager asked names %s, which reports raft state %s", named, dash(mb.GetRaftState()))
	}
	return "", fmt.Sprintf("the manager asked names %s, which is not a member", named)
}

// writeMembersTable renders ClusterMembers as a table ("-": unset or
// unknown); noLeader says why resp has no leader, for the leader line.
func writeMembersTable(w io.Writer, now time.Time, resp *managerpb.ClusterMembersResponse, noLeader string) error {
	rows := make([][]string, 0, len(resp.GetMembers()))
	standalone := false
	for _, mb := range resp.GetMembers() {
		state := mb.GetRaftState()
		// The member's own status was read: its role, term and indexes
		// are known.
		known := state != "" && state != "unknown"
		single := state == "standalone"
		standalone = standalone || single
		contact := "-"
		if mb.GetLastContact() != nil {
			contact = format.Age(now, mb.GetLastContact())
		}
		if mb.GetError() != "" {
			state += " (" + mb.GetError() + ")"
		}
		voter := ctlYesNo(mb.GetVoter())
		if single {
			voter = "-"
		}
		term, applied, commit := "-", "-", "-"
		if known {
			applied, commit = fmt.Sprint(mb.GetAppliedIndex()), fmt.Sprint(mb.GetCommitIndex())
			if !single {
				term = fmt.Sprint(mb.GetTerm())
			}
		}
		rows = append(rows, []string{mb.GetName(), dash(mb.GetApiAddr()), dash(mb.GetRaftAddr()), dash(mb.GetGossipState()), dash(state), voter,
			term, contact, applied, commit, dash(mb.GetVersion())})
	}
	if err := ctlTable(w, []string{"NAME", "API ADDRESS", "RAFT ADDRESS", "GOSSIP", "RAFT", "VOTER", "TERM", "LAST CONTACT", "APPLIED", "COMMIT", "VERSION"}, rows); err != nil {
		return err
	}
	leader := resp.GetLeader()
	switch {
	case standalone:
		leader += " (a single manager: no cluster)"
	case leader == "" && noLeader != "":
		leader = "none (" + noLeader + "; no quorum?)"
	case leader == "":
		leader = "none (no quorum?)"
	}
	_, err := fmt.Fprintf(w, "leader: %s\n", leader)
	return err
}

// dash returns s, or "-" if it is empty.
func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
