package cluster

import (
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/hashicorp/raft"

	"github.com/norsk-oss/norsk-manager/cluster/membership"
)

// voterInputs is what the leader's voter reconciliation decides from
// (planVoters). docs/design/ha.md, "Voter rules".
type voterInputs struct {
	// Self is the leader's own server id: never removed.
	Self raft.ServerID
	// Servers is the current Raft configuration.
	Servers []raft.Server
	// Members are the gossip members (alive and leaving).
	Members []membership.Member
	// Left are the gossip members that left or failed.
	Left []membership.Departure
	// Now is the current time.
	Now time.Time
	// Missing maps a server id to when this leader first noticed it
	// missing from the alive gossip members. planVoters updates it: it
	// adds newly missing voters and drops the ones that are back or no
	// longer in the configuration.
	Missing map[raft.ServerID]time.Time
	// DeadServerTimeout is how long a voter may stay missing before it is
	// removed.
	DeadServerTimeout time.Duration
	// Reachable reports whether a Raft address answers.
	Reachable func(raft.ServerAddress) bool
}

// voterChange is one AddVoter or RemoveServer of a plan.
type voterChange struct {
	ID       raft.ServerID
	Addr     raft.ServerAddress
	Graceful bool // a removal after a graceful leave
	Reason   string
}

// planNote is a log line explaining a decision not to act.
type planNote struct {
	Level slog.Level
	Msg   string
	Args  []any
}

// voterPlan is what planVoters decided.
type voterPlan struct {
	Add    []voterChange
	Remove []voterChange
	Notes  []planNote
}

// planVoters decides how the Raft configuration follows the gossip
// membership. The rules (docs/design/ha.md, "Voter rules"):
//
//   - An alive member with a Raft address that is not in the configuration
//     becomes a voter once its Raft address answers (a manager whose Raft
//     never came up, or that advertises an address nobody can reach, is
//     never added).
//   - An alive member whose name is a voter at another Raft address moves
//     the voter to the new address only if the old one no longer answers
//     (otherwise two managers use one --name, and the voter stays).
//   - A voter (other than the leader) is healthy while an alive or leaving
//     gossip member has its name and its Raft address. Otherwise it is
//     missing since this leader first noticed it: failed, left, unknown to
//     gossip, or its name is alive at another Raft address.
//   - A missing voter whose gossip member left gracefully at the voter's
//     Raft address, and whose Raft address no longer answers, is removed
//     at once.
//   - A voter missing for DeadServerTimeout is removed, oldest first, at
//     most (voters-1)/2 in one pass and only while the healthy voters stay
//     a majority of the voters that remain: never a majority of the
//     configuration at once (Consul autopilot's dead-server cleanup).
func planVoters(in voterInputs) voterPlan {
	var plan voterPlan
	note := func(level slog.Level, msg string, args ...any) {
		plan.Notes = append(plan.Notes, planNote{Level: level, Msg: msg, Args: args})
	}
	reachable := func(addr raft.ServerAddress) bool { return in.Reachable != nil && in.Reachable(addr) }
	inConfig := map[raft.ServerID]raft.Server{}
	voters := 0
	for _, s := range in.Servers {
		inConfig[s.ID] = s
		if s.Suffrage == raft.Voter {
			voters++
		}
	}
	// Gossip members by name: alive (or leaving) ones.
	members := map[raft.ServerID]membership.Member{}
	for _, m := range in.Members {
		members[raft.ServerID(m.Name)] = m
	}
	left := map[raft.ServerID]membership.Departure{}
	for _, d := range in.Left {
		left[raft.ServerID(d.Name)] = d
	}

	// Additions and address moves.
	for _, m := range in.Members {
		if m.Meta.RaftAddr == "" || m.State != membership.MemberAlive {
			continue
		}
		id, addr := raft.ServerID(m.Name), raft.ServerAddress(m.Meta.RaftAddr)
		cur, ok := inConfig[id]
		switch {
		case ok && cur.Address == addr:
			continue
		case ok && reachable(cur.Address):
			note(slog.LevelError, "member advertises another raft address than its voter, whose address still answers: not moving the voter (is --name used twice? --name must be unique)",
				"name", id, "raft_addr", addr, "voter_raft_addr", cur.Address)
			continue
		case !reachable(addr):
			note(slog.LevelDebug, "member not added as a raft voter yet: its raft address does not answer", "name", id, "raft_addr", addr)
			continue
		}
		reason := "alive member, raft address answers"
		if ok {
			reason = fmt.Sprintf("alive member moved from raft address %s, which no longer answers", cur.Address)
		}
		plan.Add = append(plan.Add, voterChange{ID: id, Addr: addr, Reason: reason})
	}

	// Removals.
	type dead struct {
		voterChange
		since time.Time
	}
	var deads []dead
	healthy := 0
	gracefulVoters := 0
	for _, s := range in.Servers {
		if s.ID == in.Self {
			healthy++
			delete(in.Missing, s.ID)
			continue
		}
		m, isMember := members[s.ID]
		if isMember && raft.ServerAddress(m.Meta.RaftAddr) == s.Address {
			if s.Suffrage == raft.Voter {
				healthy++
			}
			delete(in.Missing, s.ID)
			continue
		}
		var why string
		d, departed := left[s.ID]
		switch {
		case isMember:
			why = fmt.Sprintf("its name is alive in gossip at raft address %q", m.Meta.RaftAddr)
		case departed && d.Graceful:
			why = "left"
		case departed:
			why = "failed"
		default:
			why = "unknown to gossip"
		}
		if departed && d.Graceful && !isMember {
			switch {
			case raft.ServerAddress(d.Meta.RaftAddr) != s.Address:
				why = fmt.Sprintf("a manager of its name left from raft address %q", d.Meta.RaftAddr)
			case reachable(s.Address):
				why = "left, but its raft address still answers"
			default:
				plan.Remove = append(plan.Remove, voterChange{ID: s.ID, Addr: s.Address, Graceful: true, Reason: "left gracefully"})
				delete(in.Missing, s.ID)
				if s.Suffrage == raft.Voter {
					gracefulVoters++
				}
				continue
			}
		}
		since, ok := in.Missing[s.ID]
		if !ok {
			since = in.Now
			in.Missing[s.ID] = since
			note(slog.LevelInfo, "raft voter missing from the alive gossip members", "name", s.ID, "raft_addr", s.Address, "state", why, "removal_after", in.DeadServerTimeout)
		}
		if in.Now.Sub(since) < in.DeadServerTimeout {
			continue
		}
		deads = append(deads, dead{voterChange{ID: s.ID, Addr: s.Address,
			Reason: fmt.Sprintf("%s for %s (--dead-server-timeout %s)", why, in.Now.Sub(since).Round(time.Second), in.DeadServerTimeout)}, since})
	}
	for id := range in.Missing {
		if _, ok := inConfig[id]; !ok {
			delete(in.Missing, id)
		}
	}
	slices.SortFunc(deads, func(a, b dead) int {
		if c := a.since.Compare(b.since); c != 0 {
			return c
		}
		return strings.Compare(string(a.ID), string(b.ID))
	})
	remaining := voters - gracefulVoters
	maxRemove := (remaining - 1) / 2
	removed := 0
	for _, d := range deads {
		after := remaining - removed - 1
		if removed >= maxRemove || 2*healthy <= after {
			note(slog.LevelWarn, "not removing dead raft voter: that would remove a majority of the voters at once", "name", d.ID, "raft_addr", d.Addr,
				"voters", remaining, "healthy", healthy, "already_removing", removed)
			continue
		}
		plan.Remove = append(plan.Remove, d.voterChange)
		removed++
	}
	return plan
}
