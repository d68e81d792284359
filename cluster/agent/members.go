package agent

import (
	"context"
	"os"
	"sort"
	"sync"
	"time"

	"github.com/hashicorp/raft"
	"google.golang.org/grpc/status"

	"github.com/norsk-oss/norsk-manager/cluster/membership"
	"github.com/norsk-oss/norsk-manager/proto/internalpb"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
)

// Raft states of ClusterMember beyond raft's own (leader, follower,
// candidate, shutdown).
const (
	// raftStateUnknown: the member's own status could not be read (see
	// its error); its term and indexes are unknown, not 0.
	raftStateUnknown = "unknown"
	// raftStateStandalone: a single manager, without Raft.
	raftStateStandalone = "standalone"
	// raftStateLeader is raft.Leader as a member reports it (lower case).
	raftStateLeader = "leader"
)

// Gossip states of ClusterMember beyond membership.MemberState's.
const (
	// gossipStateUnknown: a server of the Raft configuration the gossip
	// does not know (never seen by this manager, or forgotten).
	gossipStateUnknown = "unknown"
)

// memberStatus is what one member answered to Cluster/Status, or why it
// did not.
type memberStatus struct {
	st  *internalpb.ManagerStatus
	err string
}

// raftView is the Raft configuration as the answering manager has it.
type raftView struct {
	// known is false when the configuration could not be read (this
	// manager is shutting down) or is empty (a manager that has not
	// joined the Raft cluster yet, e.g. one no voter can reach: it knows
	// nothing about who votes).
	known   bool
	servers []raft.Server
}

// mergeMembers builds the ClusterMembers view: the union of the gossip
// members (alive or leaving) and the servers of the Raft configuration,
// sorted by name. A server the gossip does not list as a member is shown
// with its last gossip record if it departed (gossip state "failed" or
// "left") or with "unknown" and its Raft address only. Voter comes from
// the Raft configuration (from the member's own status only if the
// configuration is unknown); raft state, term and indexes from the
// member's own status (statuses, by name), "unknown" and unset with the
// reason in error when there is none. Departed managers outside the Raft
// configuration are not listed.
func mergeMembers(gossip []membership.Member, departed []membership.Departure, conf raftView, statuses map[string]memberStatus) []*managerpb.ClusterMember {
	byName := map[string]*managerpb.ClusterMember{}
	for _, m := range gossip {
		byName[m.Name] = &managerpb.ClusterMember{Name: m.Name, ApiAddr: m.Meta.APIAddr, RaftAddr: m.Meta.RaftAddr, GossipAddr: m.Addr,
			GossipState: m.State.String(), Version: m.Meta.Version}
	}
	inConf := map[string]raft.Server{}
	for _, s := range conf.servers {
		inConf[string(s.ID)] = s
	}
	for _, d := range departed {
		if _, ok := inConf[d.Name]; !ok || byName[d.Name] != nil {
			continue
		}
		st := membership.MemberFailed
		if d.Graceful {
			st = membership.MemberLeft
		}
		byName[d.Name] = &managerpb.ClusterMember{Name: d.Name, ApiAddr: d.Meta.APIAddr, RaftAddr: d.Meta.RaftAddr, GossipAddr: d.Addr,
			GossipState: st.String(), Version: d.Meta.Version}
	}
	for _, s := range conf.servers {
		mb := byName[string(s.ID)]
		if mb == nil {
			mb = &managerpb.ClusterMember{Name: string(s.ID), GossipState: gossipStateUnknown}
			byName[mb.Name] = mb
		}
		// Raft dials the configuration's address.
		mb.RaftAddr = string(s.Address)
		mb.Voter = s.Suffrage == raft.Voter
	}
	out := make([]*managerpb.ClusterMember, 0, len(byName))
	for name, mb := range byName {
		st, ok := statuses[name]
		switch {
		case ok && st.st != nil:
			s := st.st
			mb.RaftState, mb.Term, mb.LastContact = s.GetRaftState(), s.GetTerm(), s.GetLastContact()
			mb.AppliedIndex, mb.CommitIndex = s.GetAppliedIndex(), s.GetCommitIndex()
			if !conf.known {
				mb.Voter = s.GetVoter()
			}
		default:
			mb.RaftState, mb.Error = raftStateUnknown, st.err
			if mb.Error == "" {
				mb.Error = noStatusReason(mb.GetGossipState())
			}
		}
		out = append(out, mb)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].GetName() < out[j].GetName() })
	return out
}

// noStatusReason says why a member's status was not asked for.
func noStatusReason(gossipState string) string {
	switch gossipState {
	case membership.MemberFailed.String():
		return "not asked: declared failed by the gossip"
	case membership.MemberLeft.String():
		return "not asked: left the gossip"
	case gossipStateUnknown:
		return "not asked: not in the gossip membership"
	default:
		return "not asked: no API address"
	}
}

// clusterMembers answers Manager/ClusterMembers in a cluster: the gossip
// members and the Raft configuration's servers (mergeMembers), with the
// status each gossip member reports of itself over the internal service
// (2 s each, in parallel).
func (a *Agent) clusterMembers(ctx context.Context) (*managerpb.ClusterMembersResponse, error) {
	c := a.cl
	self := a.cfg.Cluster.Name
	gossip := c.members.Members()
	hasSelf := false
	for _, m := range gossip {
		hasSelf = hasSelf || m.Name == self
	}
	if !hasSelf {
		gossip = append(gossip, c.members.LocalMember())
	}
	var conf raftView
	if f := c.rep.Raft().GetConfiguration(); f.Error() == nil && len(f.Configuration().Servers) > 0 {
		conf = raftView{known: true, servers: f.Configuration().Servers}
	}
	statuses := make(map[string]memberStatus, len(gossip))
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, m := range gossip {
		if m.Name != self && m.Meta.APIAddr == "" {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			sctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			defer cancel()
			var st *internalpb.ManagerStatus
			var err error
			if m.Name == self {
				st, err = c.status(sctx)
			} else {
				var cl internalpb.ClusterClient
				if cl, err = c.forward(sctx, m.Name); err == nil {
					st, err = cl.Status(sctx, &internalpb.StatusRequest{})
				}
			}
			ms := memberStatus{st: st}
			if err != nil {
				ms = memberStatus{err: "unreachable: " + status.Code(err).String()}
			}
			mu.Lock()
			statuses[m.Name] = ms
			mu.Unlock()
		}()
	}
	wg.Wait()
	members := mergeMembers(gossip, c.members.Left(), conf, statuses)
	return &managerpb.ClusterMembersResponse{Leader: confirmedLeader(c.rep.Leader(), members), Members: members}, nil
}

// confirmedLeader returns named, the leader in this manager's Raft view,
// if the members' own statuses confirm it: its row reports raft state
// "leader", in a term no member reports beyond. Otherwise "". A view can
// name a leader that is gone: a follower keeps the last leader it heard
// from until it starts an election, and a cut-off leader believes in
// itself until its lease runs out; ClusterMembers must never present
// either as the leader.
func confirmedLeader(named string, members []*managerpb.ClusterMember) string {
	if named == "" {
		return ""
	}
	var leader *managerpb.ClusterMember
	var newest uint64
	for _, mb := range members {
		newest = max(newest, mb.GetTerm())
		if mb.GetName() == named {
			leader = mb
		}
	}
	if leader == nil || leader.GetRaftState() != raftStateLeader || leader.GetTerm() < newest {
		return ""
	}
	return named
}

// standaloneMembers answers Manager/ClusterMembers on a single manager:
// itself, under its name (standaloneName), with its API address, raft
// state "standalone" (no Raft: no term, no voters) and its applied index.
// Leader is its name.
func (a *Agent) standaloneMembers(context.Context) (*managerpb.ClusterMembersResponse, error) {
	name := a.standaloneName()
	applied := a.store.FSM().AppliedIndex()
	return &managerpb.ClusterMembersResponse{Leader: name, Members: []*managerpb.ClusterMember{{
		Name: name, ApiAddr: a.APIAddr(), RaftState: raftStateStandalone,
		AppliedIndex: applied, CommitIndex: applied, Version: a.cfg.Version,
	}}}, nil
}

// standaloneName is a single manager's name: Cluster.Name if set, else
// the host name, else "standalone".
func (a *Agent) standaloneName() string {
	if n := a.cfg.Cluster.Name; n != "" {
		return n
	}
	if h, err := os.Hostname(); err == nil && h != "" {
		return h
	}
	return raftStateStandalone
}
