package cluster

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/norsk-oss/norsk-manager/cluster/membership"
)

var t0 = time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)

const dst = 20 * time.Second

func raftAddr(name string) raft.ServerAddress { return raft.ServerAddress("127.0.0.1:7" + name[1:]) }

func voter(name string) raft.Server {
	return raft.Server{Suffrage: raft.Voter, ID: raft.ServerID(name), Address: raftAddr(name)}
}

func voterAt(name string, addr raft.ServerAddress) raft.Server {
	return raft.Server{Suffrage: raft.Voter, ID: raft.ServerID(name), Address: addr}
}

func alive(name string) membership.Member { return aliveAt(name, raftAddr(name)) }

func aliveAt(name string, addr raft.ServerAddress) membership.Member {
	return membership.Member{Name: name, State: membership.MemberAlive, Meta: membership.Meta{Name: name, RaftAddr: string(addr)}}
}

func departed(name string, graceful bool) membership.Departure {
	return departedAt(name, raftAddr(name), graceful)
}

func departedAt(name string, addr raft.ServerAddress, graceful bool) membership.Departure {
	return membership.Departure{Name: name, Graceful: graceful, Since: t0, Meta: membership.Meta{Name: name, RaftAddr: string(addr)}}
}

func names(cs []voterChange) []string {
	out := []string{}
	for _, c := range cs {
		out = append(out, fmt.Sprintf("%s@%s", c.ID, c.Addr))
	}
	slices.Sort(out)
	return out
}

func TestPlanVoters(t *testing.T) {
	ghost := raft.ServerAddress("127.0.0.99:7999")
	impostor := raft.ServerAddress("127.0.0.1:7111")
	tests := []struct {
		name      string
		servers   []raft.Server
		members   []membership.Member
		left      []membership.Departure
		missing   map[raft.ServerID]time.Time // first-missing times before the pass
		now       time.Time
		reachable []raft.ServerAddress // the Raft addresses that answer
		add       []string
		remove    []string
		missingAf []string // ids in Missing after the pass
	}{
		{
			name:    "steady three",
			servers: []raft.Server{voter("m1"), voter("m2"), voter("m3")},
			members: []membership.Member{alive("m1"), alive("m2"), alive("m3")},
			now:     t0,
		},
		{
			name:      "new member added once its raft address answers",
			servers:   []raft.Server{voter("m1"), voter("m2"), voter("m3")},
			members:   []membership.Member{alive("m1"), alive("m2"), alive("m3"), alive("m4")},
			reachable: []raft.ServerAddress{raftAddr("m4")},
			now:       t0,
			add:       []string{"m4@" + string(raftAddr("m4"))},
		},
		{
			name:    "repro A: member with an unreachable raft address is never added",
			servers: []raft.Server{voter("m1"), voter("m2"), voter("m3")},
			members: []membership.Member{alive("m1"), alive("m2"), alive("m3"), aliveAt("m9", ghost)},
			now:     t0,
		},
		{
			name:    "leaving member is not added",
			servers: []raft.Server{voter("m1"), voter("m2"), voter("m3")},
			members: []membership.Member{alive("m1"), alive("m2"), alive("m3"),
				{Name: "m4", State: membership.MemberLeaving, Meta: membership.Meta{RaftAddr: string(raftAddr("m4"))}}},
			reachable: []raft.ServerAddress{raftAddr("m4")},
			now:       t0,
		},
		{
			name:      "voter unknown to gossip starts its timer",
			servers:   []raft.Server{voter("m1"), voter("m2"), voter("m3"), voterAt("m9", ghost)},
			members:   []membership.Member{alive("m1"), alive("m2"), alive("m3")},
			now:       t0,
			missingAf: []string{"m9"},
		},
		{
			name:      "voter unknown to gossip kept before the timeout",
			servers:   []raft.Server{voter("m1"), voter("m2"), voter("m3"), voterAt("m9", ghost)},
			members:   []membership.Member{alive("m1"), alive("m2"), alive("m3")},
			missing:   map[raft.ServerID]time.Time{"m9": t0},
			now:       t0.Add(dst - time.Second),
			missingAf: []string{"m9"},
		},
		{
			name:    "voter unknown to gossip removed after the timeout",
			servers: []raft.Server{voter("m1"), voter("m2"), voter("m3"), voterAt("m9", ghost)},
			members: []membership.Member{alive("m1"), alive("m2"), alive("m3")},
			missing: map[raft.ServerID]time.Time{"m9": t0},
			now:     t0.Add(dst),
			remove:  []string{"m9@" + string(ghost)},
		},
		{
			name:    "failed voter removed after the timeout counted from first notice, not its departure",
			servers: []raft.Server{voter("m1"), voter("m2"), voter("m3"), voter("m4"), voter("m5")},
			members: []membership.Member{alive("m1"), alive("m2"), alive("m3"), alive("m5")},
			left:    []membership.Departure{departed("m4", false)},
			missing: map[raft.ServerID]time.Time{"m4": t0.Add(10 * time.Second)},
			now:     t0.Add(dst + 5*time.Second),
			// departed at t0, but this leader noticed at t0+10s
			missingAf: []string{"m4"},
		},
		{
			name:    "failed voter removed after the timeout",
			servers: []raft.Server{voter("m1"), voter("m2"), voter("m3")},
			members: []membership.Member{alive("m1"), alive("m2")},
			left:    []membership.Departure{departed("m3", false)},
			missing: map[raft.ServerID]time.Time{"m3": t0},
			now:     t0.Add(dst),
			remove:  []string{"m3@" + string(raftAddr("m3"))},
		},
		{
			name:    "graceful leave removed at once",
			servers: []raft.Server{voter("m1"), voter("m2"), voter("m3")},
			members: []membership.Member{alive("m1"), alive("m2")},
			left:    []membership.Departure{departed("m3", true)},
			now:     t0,
			remove:  []string{"m3@" + string(raftAddr("m3"))},
		},
		{
			name:      "graceful leave from another raft address (an impostor of the name) only starts the timer",
			servers:   []raft.Server{voter("m1"), voter("m2"), voter("m3")},
			members:   []membership.Member{alive("m1"), alive("m2")},
			left:      []membership.Departure{departedAt("m3", impostor, true)},
			now:       t0,
			missingAf: []string{"m3"},
		},
		{
			name:      "graceful leave whose raft address still answers only starts the timer",
			servers:   []raft.Server{voter("m1"), voter("m2"), voter("m3")},
			members:   []membership.Member{alive("m1"), alive("m2")},
			left:      []membership.Departure{departed("m3", true)},
			reachable: []raft.ServerAddress{raftAddr("m3")},
			now:       t0,
			missingAf: []string{"m3"},
		},
		{
			name:      "impostor alive at another raft address does not move a voter that answers",
			servers:   []raft.Server{voter("m1"), voter("m2"), voter("m3")},
			members:   []membership.Member{alive("m1"), alive("m2"), aliveAt("m3", impostor)},
			reachable: []raft.ServerAddress{raftAddr("m3"), impostor},
			now:       t0,
			missingAf: []string{"m3"},
		},
		{
			name:      "restart at a new raft address moves the voter once the old one is gone",
			servers:   []raft.Server{voter("m1"), voter("m2"), voter("m3")},
			members:   []membership.Member{alive("m1"), alive("m2"), aliveAt("m3", "127.0.0.1:7333")},
			reachable: []raft.ServerAddress{"127.0.0.1:7333"},
			now:       t0,
			add:       []string{"m3@127.0.0.1:7333"},
			missingAf: []string{"m3"},
		},
		{
			name:    "the leader itself is never removed",
			servers: []raft.Server{voter("m1"), voter("m2"), voter("m3")},
			members: []membership.Member{alive("m2"), alive("m3")},
			left:    []membership.Departure{departed("m1", true)},
			missing: map[raft.ServerID]time.Time{"m1": t0},
			now:     t0.Add(time.Hour),
		},
		{
			name:    "two of three dead: never removed (a majority)",
			servers: []raft.Server{voter("m1"), voter("m2"), voter("m3")},
			members: []membership.Member{alive("m1")},
			left:    []membership.Departure{departed("m2", false), departed("m3", false)},
			missing: map[raft.ServerID]time.Time{"m2": t0, "m3": t0},
			now:     t0.Add(time.Hour),
			// (3-1)/2 = 1 may go, but then 1 healthy of 2 is no majority
			missingAf: []string{"m2", "m3"},
		},
		{
			name: "three ghosts next to three managers: two oldest go in one pass",
			servers: []raft.Server{voter("m1"), voter("m2"), voter("m3"),
				voterAt("g1", "127.0.0.99:1"), voterAt("g2", "127.0.0.99:2"), voterAt("g3", "127.0.0.99:3")},
			members:   []membership.Member{alive("m1"), alive("m2"), alive("m3")},
			missing:   map[raft.ServerID]time.Time{"g1": t0.Add(2 * time.Second), "g2": t0, "g3": t0.Add(time.Second)},
			now:       t0.Add(time.Hour),
			remove:    []string{"g2@127.0.0.99:2", "g3@127.0.0.99:3"},
			missingAf: []string{"g1"},
		},
		{
			name:    "two dead of five go together",
			servers: []raft.Server{voter("m1"), voter("m2"), voter("m3"), voter("m4"), voter("m5")},
			members: []membership.Member{alive("m1"), alive("m2"), alive("m3")},
			left:    []membership.Departure{departed("m4", false)},
			missing: map[raft.ServerID]time.Time{"m4": t0, "m5": t0},
			now:     t0.Add(dst),
			remove:  []string{"m4@" + string(raftAddr("m4")), "m5@" + string(raftAddr("m5"))},
		},
		{
			name:      "missing voter that came back is forgotten",
			servers:   []raft.Server{voter("m1"), voter("m2"), voter("m3")},
			members:   []membership.Member{alive("m1"), alive("m2"), alive("m3")},
			missing:   map[raft.ServerID]time.Time{"m3": t0, "gone": t0},
			now:       t0.Add(time.Hour),
			missingAf: nil,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			missing := map[raft.ServerID]time.Time{}
			for k, v := range tt.missing {
				missing[k] = v
			}
			plan := planVoters(voterInputs{
				Self: "m1", Servers: tt.servers, Members: tt.members, Left: tt.left, Now: tt.now,
				Missing: missing, DeadServerTimeout: dst,
				Reachable: func(a raft.ServerAddress) bool { return slices.Contains(tt.reachable, a) },
			})
			if got, want := names(plan.Add), orEmpty(tt.add); !slices.Equal(got, want) {
				t.Errorf("add = %v, want %v", got, want)
			}
			if got, want := names(plan.Remove), orEmpty(tt.remove); !slices.Equal(got, want) {
				t.Errorf("remove = %v, want %v", got, want)
			}
			// A planned removal keeps its timer until RemoveServer succeeds.
			var gotMissing []string
			for id := range missing {
				if !slices.ContainsFunc(plan.Remove, func(c voterChange) bool { return c.ID == id }) {
					gotMissing = append(gotMissing, string(id))
				}
			}
			slices.Sort(gotMissing)
			if want := orEmpty(tt.missingAf); !slices.Equal(orEmpty(gotMissing), want) {
				t.Errorf("missing after = %v, want %v", gotMissing, want)
			}
			for _, c := range plan.Remove {
				if c.Reason == "" {
					t.Errorf("removal of %s has no reason", c.ID)
				}
			}
		})
	}
}

func orEmpty(s []string) []string {
	if s == nil {
		return []string{}
	}
	out := slices.Clone(s)
	slices.Sort(out)
	return out
}
