package membership

import (
	"fmt"
	"slices"
	"testing"
	"time"
)

func TestFencedBy(t *testing.T) {
	t.Parallel()
	self := Member{Name: "m1", Meta: Meta{Name: "m1", ActorID: "A1", ActorPort: 1}}
	peer := func(name string, state MemberState, fenced ...string) Member {
		return Member{Name: name, State: state, Meta: Meta{Name: name, ActorID: "id-" + name, ActorPort: 2, Fenced: fenced}}
	}
	cases := []struct {
		name        string
		members     []Member
		wantFencers []string
		wantOthers  int
		rejoin      bool // a strict majority of the others fences self
	}{
		{"nobody fences", []Member{self, peer("m2", MemberAlive), peer("m3", MemberAlive)}, nil, 2, false},
		{"both others (a freeze)", []Member{self, peer("m2", MemberAlive, "A1"), peer("m3", MemberAlive, "A1", "x")}, []string{"m2", "m3"}, 2, true},
		{"one of two (the far side of a partition)", []Member{self, peer("m2", MemberAlive, "A1"), peer("m3", MemberAlive)}, []string{"m2"}, 2, false},
		{"an old id is not ours", []Member{self, peer("m2", MemberAlive, "A0"), peer("m3", MemberAlive, "A0")}, nil, 2, false},
		{"a failed member does not count", []Member{self, peer("m2", MemberAlive, "A1"), peer("m3", MemberFailed, "A1")}, []string{"m2"}, 1, true},
		{"three of four", []Member{self, peer("m2", MemberAlive, "A1"), peer("m3", MemberAlive, "A1"), peer("m4", MemberAlive, "A1"), peer("m5", MemberAlive)}, []string{"m2", "m3", "m4"}, 4, true},
		{"two of four", []Member{self, peer("m2", MemberAlive, "A1"), peer("m3", MemberAlive, "A1"), peer("m4", MemberAlive), peer("m5", MemberAlive)}, []string{"m2", "m3"}, 4, false},
		{"a member hosting no actors does not count", []Member{self, peer("m2", MemberAlive, "A1"), {Name: "c", State: MemberAlive, Meta: Meta{Name: "c"}}}, []string{"m2"}, 1, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			fencers, others := FencedBy(tc.members, self)
			if !slices.Equal(fencers, tc.wantFencers) || others != tc.wantOthers {
				t.Fatalf("FencedBy = %v, %d; want %v, %d", fencers, others, tc.wantFencers, tc.wantOthers)
			}
			if got := 2*len(fencers) > others; got != tc.rejoin {
				t.Fatalf("majority = %v, want %v", got, tc.rejoin)
			}
		})
	}
}

func TestMeta_EncodeFenced(t *testing.T) {
	t.Parallel()
	in := Meta{Name: "m1", APIAddr: "127.0.0.1:8080", RaftAddr: "127.0.0.1:8300", ActorHost: "127.0.0.1", ActorPort: 9000,
		ActorID: "abcdefghijklmnopqrstuv", Kinds: []string{"bundle", "job", "node", "pool", "prototopic"}, Version: "v1.2.3-dev+abcdef"}
	for i := range MaxFenced {
		in.Fenced = append(in.Fenced, fmt.Sprintf("fencedfencedfencedfen%d", i))
	}
	buf, err := checkedEncode(in)
	if err != nil {
		t.Fatalf("a meta with MaxFenced ids must fit: %v", err)
	}
	out, _, err := decodeMeta(buf)
	if err != nil || !slices.Equal(out.Fenced, in.Fenced) {
		t.Fatalf("round trip: %v, %v", out.Fenced, err)
	}
}

// TestProvider_FencesBlockedAliveMembers blocks a live member's actor id
// on another (what protoactor does once a member left its topology: a
// freeze or a partition declared it failed) and checks that the other
// advertises it in its meta, so that FencedBy tells the blocked member.
func TestProvider_FencesBlockedAliveMembers(t *testing.T) {
	skipUnderRace(t)
	t.Parallel()
	n1 := newActorNode(t, "m1", "")
	n2 := newActorNode(t, "m2", n1.ms.LocalMember().Addr)
	n3 := newActorNode(t, "m3", n1.ms.LocalMember().Addr)
	startAll(t, []*actorNode{n1, n2, n3})
	id1 := n1.c.ActorSystem.ID
	n2.c.Remote.BlockList().Block(id1)
	n3.c.Remote.BlockList().Block(id1)
	eventually(t, 10*time.Second, func() string {
		fencers, others := FencedBy(n1.ms.Members(), n1.ms.LocalMember())
		if len(fencers) != 2 || others != 2 {
			return fmt.Sprintf("m1 sees itself fenced by %v of %d", fencers, others)
		}
		return ""
	})
	if f, _ := FencedBy(n2.ms.Members(), n2.ms.LocalMember()); len(f) != 0 {
		t.Fatalf("m2 fenced by %v", f)
	}
}
