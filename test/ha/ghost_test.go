package ha

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/norsk-oss/norsk-manager/test/testproc"
)

// startLoneManager starts a manager named name that joins c (no
// --bootstrap-expect) on fresh ports, with the given Raft address ("":
// a fresh one) and extra flags, without waiting for it to serve.
func startLoneManager(t *testing.T, c *testproc.Cluster, name, raftAddr string, extra ...string) *testproc.Proc {
	t.Helper()
	if raftAddr == "" {
		raftAddr = testproc.Addr(testproc.FreePort(t))
	}
	args := append([]string{"--data-dir", t.TempDir() + "/" + name, "--api-addr", testproc.Addr(testproc.FreePort(t)), "--name", name,
		"--gossip-addr", testproc.Addr(testproc.FreePort(t)), "--cluster-addr", testproc.Addr(testproc.FreePort(t)),
		"--raft-addr", raftAddr, "--cluster-timings", "local", "--log-level", "debug", "--join", c.Join()}, extra...)
	return testproc.Start(t, name, "norsk-manager", args...)
}

// outputsMention reports the managers managers whose output has all of subs on
// one line.
func outputsMention(ms []*testproc.Manager, subs ...string) []string {
	var out []string
	for _, m := range ms {
		for _, line := range strings.Split(m.Proc().Output(), "\n") {
			all := true
			for _, s := range subs {
				all = all && strings.Contains(line, s)
			}
			if all {
				out = append(out, m.Name)
				break
			}
		}
	}
	return out
}

// TestCluster_GhostManagersNeverVote: a manager whose Raft address nobody
// can reach (--advertise 127.0.0.99, where nothing listens) shows up in
// gossip but never becomes a Raft voter; a manager whose --raft-addr is
// taken exits non-zero before it gossips, so the others never see it. The
// proof that neither votes: with one of the three managers managers killed,
// the other two still commit writes (had a ghost been added, two of four
// or five voters would be no quorum).
func TestCluster_GhostManagersNeverVote(t *testing.T) {
	skipShort(t)
	c := testproc.NewCluster(t, 3, "--dead-server-timeout", "5s")
	c.StartAll()
	leader := awaitFormed(t, c.Managers)
	managers := append([]*testproc.Manager(nil), c.Managers...)

	// Repro B: the Raft address is in use (m1's). It must fail before it
	// joins the gossip.
	busy := startLoneManager(t, c, "m8", c.Managers[0].RaftAddr)
	code, exited := busy.Exited(60 * time.Second)
	require.True(t, exited, "m8 (raft address in use) still runs:\n%s", busy.Output())
	require.NotZero(t, code, "m8 (raft address in use) exited 0:\n%s", busy.Output())
	require.Contains(t, busy.Output(), "raft transport", "m8 names the failing listener")
	require.NotContains(t, busy.Output(), "joined the cluster", "m8 joined the gossip before failing")

	// Repro A: a manager advertising an address nobody can reach.
	ghost := startLoneManager(t, c, "m9", "", "--advertise", "127.0.0.99")
	testproc.Await(t, 60*time.Second, "the leader to decide on m9 as a voter", func() error {
		if !ghost.Running() {
			return fmt.Errorf("m9 exited:\n%s", ghost.Output())
		}
		for _, msg := range []string{"not added as a raft voter yet", "raft voter added", "add raft voter"} {
			if len(outputsMention(managers, msg, "name=m9")) > 0 {
				return nil
			}
		}
		return fmt.Errorf("no manager's log shows a voter decision on m9 yet")
	})
	for _, name := range []string{"m8", "m9"} {
		require.Empty(t, outputsMention(managers, "raft voter added", "name="+name), "%s was added as a raft voter", name)
	}
	require.Empty(t, outputsMention(managers, "member joined", "member=m8"), "m8 was seen in gossip")

	// Kill one managers manager that does not lead: the other two are a
	// quorum only if neither ghost votes.
	var victim *testproc.Manager
	for _, m := range managers {
		if m != leader {
			victim = m
			break
		}
	}
	victim.Kill()
	var rest []*testproc.Manager
	for _, m := range managers {
		if m != victim {
			rest = append(rest, m)
		}
	}
	cl := haConnect(t, rest[0].APIAddr+","+rest[1].APIAddr, callTimeout)
	createAcked(t, cl, "after-ghosts")
	for _, m := range rest {
		require.True(t, testproc.Serving(m.APIAddr), "%s serving", m.Name)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := haConnect(t, rest[1].APIAddr, callTimeout).JobByID(ctx, "after-ghosts")
	require.NoError(t, err, "the job is readable on %s", rest[1].Name)
	require.Empty(t, outputsMention(rest, "raft voter added", "name=m9"), "m9 was added as a raft voter")
}

// TestCluster_DuplicateNameExits: a manager started with the --name of a
// live manager finds the conflict when it joins, exits non-zero with an
// error naming both addresses, and the managers manager of that name stays a
// voter (the cluster keeps its quorum when another manager is killed).
func TestCluster_DuplicateNameExits(t *testing.T) {
	skipShort(t)
	c := testproc.NewCluster(t, 3)
	c.StartAll()
	leader := awaitFormed(t, c.Managers)
	managers := append([]*testproc.Manager(nil), c.Managers...)
	var dupOf *testproc.Manager
	for _, m := range managers {
		if m != leader {
			dupOf = m
			break
		}
	}
	imp := startLoneManager(t, c, dupOf.Name, "")
	code, exited := imp.Exited(60 * time.Second)
	require.True(t, exited, "the second %s still runs:\n%s", dupOf.Name, imp.Output())
	require.NotZero(t, code, "the second %s exited 0:\n%s", dupOf.Name, imp.Output())
	require.Contains(t, imp.Output(), "--name must be unique")
	require.Contains(t, imp.Output(), dupOf.GossipAddr, "the error names the live manager's address")

	// The managers one is still a voter: kill the third manager and write.
	awaitFormed(t, managers)
	var third *testproc.Manager
	for _, m := range managers {
		if m != leader && m != dupOf {
			third = m
		}
	}
	third.Kill()
	cl := haConnect(t, leader.APIAddr+","+dupOf.APIAddr, callTimeout)
	createAcked(t, cl, "after-duplicate-name")
	require.Empty(t, outputsMention([]*testproc.Manager{leader, dupOf}, "raft voter removed", "name="+dupOf.Name))
}
