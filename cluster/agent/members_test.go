package agent

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/norsk-oss/norsk-manager/cluster/membership"
	"github.com/norsk-oss/norsk-manager/proto/internalpb"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
)

func TestMergeMembers(t *testing.T) {
	t.Parallel()
	gm := func(name string, st membership.MemberState) membership.Member {
		return membership.Member{Name: name, Addr: "127.0.0.1:7" + name[1:] + "46", State: st,
			Meta: membership.Meta{Name: name, APIAddr: "127.0.0.1:6" + name[1:] + "90", RaftAddr: "127.0.0.1:7" + name[1:] + "48", Version: "v1"}}
	}
	dep := func(name string, graceful bool) membership.Departure {
		m := gm(name, membership.MemberAlive)
		return membership.Departure{Name: name, Addr: m.Addr, Meta: m.Meta, Graceful: graceful}
	}
	voter := func(name string) raft.Server {
		return raft.Server{Suffrage: raft.Voter, ID: raft.ServerID(name), Address: raft.ServerAddress("127.0.0.1:7" + name[1:] + "48")}
	}
	nonvoter := func(name string) raft.Server {
		s := voter(name)
		s.Suffrage = raft.Nonvoter
		return s
	}
	lc := timestamppb.New(time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC))
	ok := func(state string, term uint64, voter bool) memberStatus {
		return memberStatus{st: &internalpb.ManagerStatus{RaftState: state, Term: term, AppliedIndex: 10, CommitIndex: 11, Voter: voter, LastContact: lc}}
	}
	three := raftView{known: true, servers: []raft.Server{voter("m1"), voter("m2"), voter("m3")}}

	type want struct {
		gossip, raftState string
		voter             bool
		term              uint64
		raftAddr, apiAddr string
		err               string
	}
	for _, tc := range []struct {
		name     string
		gossip   []membership.Member
		departed []membership.Departure
		conf     raftView
		statuses map[string]memberStatus
		want     map[string]want
	}{
		{
			name:     "healthy three",
			gossip:   []membership.Member{gm("m3", membership.MemberAlive), gm("m1", membership.MemberAlive), gm("m2", membership.MemberAlive)},
			conf:     three,
			statuses: map[string]memberStatus{"m1": ok("leader", 3, true), "m2": ok("follower", 3, true), "m3": ok("follower", 3, true)},
			want: map[string]want{
				"m1": {"alive", "leader", true, 3, "127.0.0.1:7148", "127.0.0.1:6190", ""},
				"m2": {"alive", "follower", true, 3, "127.0.0.1:7248", "127.0.0.1:6290", ""},
				"m3": {"alive", "follower", true, 3, "127.0.0.1:7348", "127.0.0.1:6390", ""},
			},
		},
		{
			name:     "2 of 3 down: dead voters still listed",
			gossip:   []membership.Member{gm("m1", membership.MemberAlive)},
			departed: []membership.Departure{dep("m2", false)},
			conf:     three,
			statuses: map[string]memberStatus{"m1": ok("candidate", 7, true)},
			want: map[string]want{
				"m1": {"alive", "candidate", true, 7, "127.0.0.1:7148", "127.0.0.1:6190", ""},
				"m2": {"failed", "unknown", true, 0, "127.0.0.1:7248", "127.0.0.1:6290", "not asked: declared failed by the gossip"},
				"m3": {"unknown", "unknown", true, 0, "127.0.0.1:7348", "", "not asked: not in the gossip membership"},
			},
		},
		{
			name:     "stopped voter: alive in gossip, status times out, still a voter",
			gossip:   []membership.Member{gm("m1", membership.MemberAlive), gm("m2", membership.MemberAlive), gm("m3", membership.MemberAlive)},
			conf:     three,
			statuses: map[string]memberStatus{"m1": ok("leader", 3, true), "m2": ok("follower", 3, true), "m3": {err: "unreachable: DeadlineExceeded"}},
			want: map[string]want{
				"m1": {"alive", "leader", true, 3, "127.0.0.1:7148", "127.0.0.1:6190", ""},
				"m2": {"alive", "follower", true, 3, "127.0.0.1:7248", "127.0.0.1:6290", ""},
				"m3": {"alive", "unknown", true, 0, "127.0.0.1:7348", "127.0.0.1:6390", "unreachable: DeadlineExceeded"},
			},
		},
		{
			name:     "voter from the configuration, not from the member's status",
			gossip:   []membership.Member{gm("m1", membership.MemberAlive), gm("m4", membership.MemberAlive)},
			conf:     raftView{known: true, servers: []raft.Server{voter("m1"), nonvoter("m4")}},
			statuses: map[string]memberStatus{"m1": ok("leader", 2, false), "m4": ok("follower", 2, true)},
			want: map[string]want{
				"m1": {"alive", "leader", true, 2, "127.0.0.1:7148", "127.0.0.1:6190", ""},
				"m4": {"alive", "follower", false, 2, "127.0.0.1:7448", "127.0.0.1:6490", ""},
			},
		},
		{
			name:     "new manager not yet in the configuration",
			gossip:   []membership.Member{gm("m1", membership.MemberAlive), gm("m5", membership.MemberAlive)},
			conf:     raftView{known: true, servers: []raft.Server{voter("m1")}},
			statuses: map[string]memberStatus{"m1": ok("leader", 2, true), "m5": ok("follower", 0, false)},
			want: map[string]want{
				"m1": {"alive", "leader", true, 2, "127.0.0.1:7148", "127.0.0.1:6190", ""},
				"m5": {"alive", "follower", false, 0, "127.0.0.1:7548", "127.0.0.1:6590", ""},
			},
		},
		{
			name:     "departed manager outside the configuration is not listed; a left voter is",
			gossip:   []membership.Member{gm("m1", membership.MemberAlive)},
			departed: []membership.Departure{dep("m2", true), dep("m6", true)},
			conf:     raftView{known: true, servers: []raft.Server{voter("m1"), voter("m2")}},
			statuses: map[string]memberStatus{"m1": ok("leader", 2, true)},
			want: map[string]want{
				"m1": {"alive", "leader", true, 2, "127.0.0.1:7148", "127.0.0.1:6190", ""},
				"m2": {"left", "unknown", true, 0, "127.0.0.1:7248", "127.0.0.1:6290", "not asked: left the gossip"},
			},
		},
		{
			name:     "configuration unknown: voter from the status",
			gossip:   []membership.Member{gm("m1", membership.MemberAlive), gm("m2", membership.MemberLeaving)},
			statuses: map[string]memberStatus{"m1": ok("shutdown", 2, true), "m2": {err: "unreachable: Unavailable"}},
			want: map[string]want{
				"m1": {"alive", "shutdown", true, 2, "127.0.0.1:7148", "127.0.0.1:6190", ""},
				"m2": {"leaving", "unknown", false, 0, "127.0.0.1:7248", "127.0.0.1:6290", "unreachable: Unavailable"},
			},
		},
		{
			name: "configuration address wins over the gossip meta",
			gossip: []membership.Member{func() membership.Member {
				m := gm("m1", membership.MemberAlive)
				m.Meta.RaftAddr = "127.0.0.1:9999"
				return m
			}()},
			conf:     raftView{known: true, servers: []raft.Server{voter("m1")}},
			statuses: map[string]memberStatus{"m1": ok("leader", 1, true)},
			want:     map[string]want{"m1": {"alive", "leader", true, 1, "127.0.0.1:7148", "127.0.0.1:6190", ""}},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := mergeMembers(tc.gossip, tc.departed, tc.conf, tc.statuses)
			require.Len(t, got, len(tc.want))
			for i, mb := range got {
				if i > 0 {
					require.Less(t, got[i-1].GetName(), mb.GetName(), "sorted by name")
				}
				w, ok := tc.want[mb.GetName()]
				require.True(t, ok, "unexpected member %s", mb.GetName())
				g := want{mb.GetGossipState(), mb.GetRaftState(), mb.GetVoter(), mb.GetTerm(), mb.GetRaftAddr(), mb.GetApiAddr(), mb.GetError()}
				require.Equal(t, w, g, mb.GetName())
				if mb.GetRaftState() == raftStateUnknown {
					require.Zero(t, mb.GetAppliedIndex(), mb.GetName())
					require.Nil(t, mb.GetLastContact(), mb.GetName())
				} else {
					require.Equal(t, uint64(10), mb.GetAppliedIndex(), mb.GetName())
					require.Equal(t, uint64(11), mb.GetCommitIndex(), mb.GetName())
				}
			}
		})
	}
}

// TestClusterMembers_Standalone: a single manager lists itself under its
// host name with its real API address.
func TestClusterMembers_Standalone(t *testing.T) {
	a, c := startAgent(t, t.TempDir())
	resp, err := c.ClusterMembers(context.Background(), &managerpb.ClusterMembersRequest{})
	require.NoError(t, err)
	host, err := os.Hostname()
	require.NoError(t, err)
	require.Len(t, resp.GetMembers(), 1)
	mb := resp.GetMembers()[0]
	require.Equal(t, host, mb.GetName())
	require.Equal(t, host, resp.GetLeader())
	require.Equal(t, a.APIAddr(), mb.GetApiAddr())
	require.Equal(t, raftStateStandalone, mb.GetRaftState())
	require.False(t, mb.GetVoter())
	require.Zero(t, mb.GetTerm())
	require.Equal(t, "0.1.0-dev", mb.GetVersion())
}

// TestConfirmedLeader: the leader of the answering manager's Raft view is
// named only if that member reports itself leader in the newest term any
// member reports (issue 10 §6: a view still naming a dead leader).
func TestConfirmedLeader(t *testing.T) {
	t.Parallel()
	mb := func(name, state string, term uint64) *managerpb.ClusterMember {
		return &managerpb.ClusterMember{Name: name, RaftState: state, Term: term}
	}
	cases := []struct {
		name    string
		named   string
		members []*managerpb.ClusterMember
		want    string
	}{
		{"healthy", "m1", []*managerpb.ClusterMember{mb("m1", "leader", 3), mb("m2", "follower", 3), mb("m3", "follower", 3)}, "m1"},
		{"no leader in the view", "", []*managerpb.ClusterMember{mb("m1", "candidate", 9)}, ""},
		{"named leader is dead", "m2", []*managerpb.ClusterMember{mb("m1", "candidate", 9), mb("m2", "unknown", 0), mb("m3", "unknown", 0)}, ""},
		{"named leader is a follower now", "m2", []*managerpb.ClusterMember{mb("m1", "leader", 5), mb("m2", "follower", 5)}, ""},
		{"named leader was deposed in a newer term", "m2", []*managerpb.ClusterMember{mb("m1", "leader", 6), mb("m2", "leader", 5)}, ""},
		{"named leader is not a member", "m9", []*managerpb.ClusterMember{mb("m1", "follower", 2)}, ""},
		{"a stale follower's older term does not matter", "m1", []*managerpb.ClusterMember{mb("m1", "leader", 4), mb("m2", "follower", 3)}, "m1"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, confirmedLeader(tc.named, tc.members))
		})
	}
}
