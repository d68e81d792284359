package main

import (
	"bytes"
	"strings"
	"testing"
	"time"

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
			if err := writeMembersTable(&buf, ctlTestNow, tc.resp); err != nil {
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
