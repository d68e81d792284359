package main

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/norsk-oss/norsk-manager/proto/managerpb"
)

func TestWriteMembersTable(t *testing.T) {
	t.Parallel()
	lc := timestamppb.New(ctlTestNow.Add(-2 * time.Second))
	for _, tc := range []struct {
		name string
		resp *managerpb.ClusterMembersResponse
		want []string // rows after the header, then the leader line
		json []string // substrings of the --json rendering
	}{
		{
			name: "the view names a dead leader",
			resp: &managerpb.ClusterMembersResponse{Leader: "m2", Members: []*managerpb.ClusterMember{
				{Name: "m1", ApiAddr: "a1", RaftAddr: "r1", GossipState: "alive", RaftState: "follower", Voter: true, Term: 4, AppliedIndex: 7, CommitIndex: 7, Version: "v1"},
				{Name: "m2", ApiAddr: "a2", RaftAddr: "r2", GossipState: "failed", RaftState: "unknown", Voter: true, Error: "not asked: declared failed by the gossip", Version: "v1"},
			}},
			want: []string{
				"m1  a1  r1  alive  follower  yes  4  -  7  7  v1",
				"m2  a2  r2  failed  unknown (not asked: declared failed by the gossip)  yes  -  -  -  -  v1",
				"leader: none (the manager asked names m2, which reports raft state unknown; no quorum?)",
			},
		},
		{
			name: "2 of 3 down",
			resp: &managerpb.ClusterMembersResponse{Members: []*managerpb.ClusterMember{
				{Name: "m1", ApiAddr: "127.0.0.1:6790", RaftAddr: "127.0.0.1:7948", GossipState: "alive", RaftState: "candidate", Voter: true, Term: 9, AppliedIndex: 40, CommitIndex: 40, Version: "v1"},
				{Name: "m2", ApiAddr: "127.0.0.1:6791", RaftAddr: "127.0.0.1:7958", GossipState: "failed", RaftState: "unknown", Voter: true, Error: "not asked: declared failed by the gossip", Version: "v1"},
				{Name: "m3", RaftAddr: "127.0.0.1:7968", GossipState: "unknown", RaftState: "unknown", Voter: true, Error: "not asked: not in the gossip membership"},
			}},
			want: []string{
				"m1  127.0.0.1:6790  127.0.0.1:7948  alive    candidate  yes  9  -  40  40  v1",
				"m2  127.0.0.1:6791  127.0.0.1:7958  failed   unknown (not asked: declared failed by the gossip)  yes  -  -  -  -  v1",
				"m3  -  127.0.0.1:7968  unknown  unknown (not asked: not in the gossip membership)  yes  -  -  -  -  -",
				"leader: none (no quorum?)",
			},
			json: []string{`"name": "m3"`, `"raftAddr": "127.0.0.1:7968"`, `"gossipState": "unknown"`, `"raftState": "unknown"`, `"voter": true`},
		},
		{
			name: "stopped voter: unknown role, still a voter",
			resp: &managerpb.ClusterMembersResponse{Leader: "m1", Members: []*managerpb.ClusterMember{
				{Name: "m1", ApiAddr: "a1", RaftAddr: "r1", GossipState: "alive", RaftState: "leader", Voter: true, Term: 3, AppliedIndex: 7, CommitIndex: 7, Version: "v1"},
				{Name: "m2", ApiAddr: "a2", RaftAddr: "r2", GossipState: "alive", RaftState: "follower", Voter: true, Term: 3, LastContact: lc, AppliedIndex: 7, CommitIndex: 7, Version: "v1"},
				{Name: "m3", ApiAddr: "a3", RaftAddr: "r3", GossipState: "alive", RaftState: "unknown", Voter: true, Error: "unreachable: DeadlineExceeded", Version: "v1"},
			}},
			want: []string{
				"m1  a1  r1  alive  leader    yes  3  -  7  7  v1",
				"m2  a2  r2  alive  follower  yes  3  2s ago  7  7  v1",
				"m3  a3  r3  alive  unknown (unreachable: DeadlineExceeded)  yes  -  -  -  -  v1",
				"leader: m1",
			},
		},
		{
			name: "single manager",
			resp: &managerpb.ClusterMembersResponse{Leader: "host1", Members: []*managerpb.ClusterMember{
				{Name: "host1", ApiAddr: "127.0.0.1:6790", RaftState: "standalone", AppliedIndex: 5, CommitIndex: 5, Version: "v1"},
			}},
			want: []string{
				"host1  127.0.0.1:6790  -  -  standalone  -  -  -  5  5  v1",
				"leader: host1 (a single manager: no cluster)",
			},
			json: []string{`"apiAddr": "127.0.0.1:6790"`, `"raftState": "standalone"`},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var buf bytes.Buffer
			resp := proto.Clone(tc.resp).(*managerpb.ClusterMembersResponse)
			leader, why := membersLeader(resp)
			resp.Leader = leader
			if err := writeMembersTable(&buf, ctlTestNow, resp, why); err != nil {
				t.Fatal(err)
			}
			lines := strings.Split(strings.TrimRight(buf.String(), "\n"), "\n")
			if !strings.HasPrefix(lines[0], "NAME") || !strings.Contains(lines[0], "RAFT ADDRESS") {
				t.Fatalf("header: %q", lines[0])
			}
			got := make([]string, 0, len(lines)-1)
			for _, l := range lines[1:] {
				got = append(got, strings.Join(strings.Fields(l), "  "))
			}
			want := make([]string, 0, len(tc.want))
			for _, l := range tc.want {
				want = append(want, strings.Join(strings.Fields(l), "  "))
			}
			if strings.Join(got, "\n") != strings.Join(want, "\n") {
				t.Fatalf("got:\n%s\nwant:\n%s\n\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"), buf.String())
			}
			js, err := ctlJSON(tc.resp, "  ")
			if err != nil {
				t.Fatal(err)
			}
			for _, s := range tc.json {
				if !strings.Contains(string(js), s) {
					t.Errorf("JSON lacks %s:\n%s", s, js)
				}
			}
		})
	}
}

// TestCtl_ClusterMembersExitCode: "cluster members" prints the table and
// exits 0 when a leader is confirmed; with no leader known, or a leader
// named by the view that does not report itself leader (dead), it still
// prints the table, never names that leader, and exits 6 saying why.
func TestCtl_ClusterMembersExitCode(t *testing.T) {
	members := func(m1, m2 string) []*managerpb.ClusterMember {
		return []*managerpb.ClusterMember{
			{Name: "m1", ApiAddr: "a1", GossipState: "alive", RaftState: m1, Voter: true, Term: 4},
			{Name: "m2", ApiAddr: "a2", GossipState: "failed", RaftState: m2, Voter: true, Term: 3},
		}
	}
	cases := []struct {
		name     string
		resp     *managerpb.ClusterMembersResponse
		code     int
		leader   string // the leader line
		stderr   string
		jsonLead bool // the --json output names a leader
	}{
		{"leader", &managerpb.ClusterMembersResponse{Leader: "m1", Members: members("leader", "follower")}, 0, "leader: m1\n", "", true},
		{"no leader", &managerpb.ClusterMembersResponse{Members: members("candidate", "unknown")}, ctlExitUnavailable,
			"leader: none (no quorum?)\n", "norsk-ctl: no Raft leader is known: the cluster has no quorum", false},
		{"dead leader named", &managerpb.ClusterMembersResponse{Leader: "m2", Members: members("follower", "unknown")}, ctlExitUnavailable,
			"leader: none (the manager asked names m2, which reports raft state unknown; no quorum?)\n",
			"norsk-ctl: no Raft leader is known (the manager asked names m2, which reports raft state unknown)", false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			fake, addr := newTestFake(t)
			fake.SetClusterMembers(tc.resp)
			r := runCtl(t, testCtx(), "", "--manager-url", addr, "cluster", "members")
			if r.code != tc.code {
				t.Fatalf("exit %d, want %d; stderr %q", r.code, tc.code, r.stderr)
			}
			if !strings.HasSuffix(r.stdout, tc.leader) || !strings.Contains(r.stdout, "NAME") {
				t.Errorf("stdout %q does not end with %q", r.stdout, tc.leader)
			}
			if !strings.Contains(r.stderr, tc.stderr) {
				t.Errorf("stderr %q does not say %q", r.stderr, tc.stderr)
			}
			r = runCtl(t, testCtx(), "", "--manager-url", addr, "--output", "json", "cluster", "members")
			if r.code != tc.code || strings.Contains(r.stdout, `"leader"`) != tc.jsonLead {
				t.Errorf("--json: exit %d, stdout %q; want exit %d, a leader named: %v", r.code, r.stdout, tc.code, tc.jsonLead)
			}
		})
	}
}
