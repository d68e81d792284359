package robustness

import (
	"context"
	"fmt"
	"math/rand/v2"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/norsk-oss/norsk-manager/proto/internalpb"
	"github.com/norsk-oss/norsk-manager/test/testproc"
)

// FaultKind is what the nemesis does to a manager.
type FaultKind uint8

// Faults.
const (
	// KillRestart SIGKILLs the manager and starts it again on the same
	// data dir and ports after Hold.
	KillRestart FaultKind = iota + 1
	// Freeze SIGSTOPs the manager and SIGCONTs it after Hold: it keeps its
	// memory (grain activations, Raft state, connections) while the
	// others declare it dead and move on.
	Freeze
	// Partition cuts the manager off from the others (every manager port,
	// both ways; clients still reach it) for Hold. Needs root and
	// iptables (testproc.Firewall).
	Partition
)

// String names the fault as logs and the visualisation show it.
func (k FaultKind) String() string {
	switch k {
	case KillRestart:
		return "SIGKILL+restart"
	case Freeze:
		return "SIGSTOP+SIGCONT"
	case Partition:
		return "partition"
	}
	return fmt.Sprintf("FaultKind(%d)", uint8(k))
}

// Target says which manager an Action hits, as the cluster sees it when
// the action starts.
type Target uint8

// Targets.
const (
	// Leader is the Raft leader.
	Leader Target = iota + 1
	// Follower is a manager other than the leader, chosen at random.
	Follower
)

// String is "leader" or "follower".
func (t Target) String() string {
	if t == Leader {
		return "leader"
	}
	return "follower"
}

// Action is one step of a nemesis schedule: the fault, held for Hold,
// then Then of undisturbed traffic before the next step.
type Action struct {
	Kind   FaultKind
	Target Target
	Hold   time.Duration
	Then   time.Duration
}

// String describes the action in one line.
func (a Action) String() string {
	return fmt.Sprintf("%s of the %s for %s, then %s", a.Kind, a.Target, a.Hold, a.Then)
}

// CISchedule is the short run's schedule (about 50 s of faults and
// traffic after them): a frozen follower — the clients bound to it write
// through it right after SIGCONT, which is what exposes grain activations
// that kept a stale record while the others moved on —, a leader
// SIGKILLed and restarted, a frozen leader, and, with partitions, a
// follower cut off.
func CISchedule(partitions bool) []Action {
	s := []Action{
		{Kind: Freeze, Target: Follower, Hold: 8 * time.Second, Then: 8 * time.Second},
		{Kind: KillRestart, Target: Leader, Hold: 2 * time.Second, Then: 8 * time.Second},
		{Kind: Freeze, Target: Leader, Hold: 6 * time.Second, Then: 6 * time.Second},
	}
	if partitions {
		s = append(s, Action{Kind: Partition, Target: Follower, Hold: 8 * time.Second, Then: 6 * time.Second})
	}
	return s
}

// RandomSchedule draws actions until their holds and gaps add up to at
// least total: kinds and targets uniformly (Partition only with
// partitions), holds of 1–5 s for a kill, 3–20 s for a freeze, 3–15 s for
// a partition, and 3–15 s of traffic after each.
func RandomSchedule(rng *rand.Rand, total time.Duration, partitions bool) []Action {
	kinds := []FaultKind{KillRestart, Freeze}
	if partitions {
		kinds = append(kinds, Partition)
	}
	between := func(lo, hi time.Duration) time.Duration {
		return (lo + time.Duration(rng.Int64N(int64(hi-lo)))).Round(100 * time.Millisecond)
	}
	var s []Action
	for sum := time.Duration(0); sum < total; {
		a := Action{Kind: kinds[rng.IntN(len(kinds))], Target: Target(1 + rng.IntN(2)), Then: between(3*time.Second, 15*time.Second)}
		switch a.Kind {
		case KillRestart:
			a.Hold = between(time.Second, 5*time.Second)
		case Freeze:
			a.Hold = between(3*time.Second, 20*time.Second)
		case Partition:
			a.Hold = between(3*time.Second, 15*time.Second)
		}
		s = append(s, a)
		sum += a.Hold + a.Then
	}
	return s
}

// Nemesis carries out actions on a cluster. Its methods must be called
// from the goroutine running the test (they may fail it).
type Nemesis struct {
	t   testing.TB
	c   *testproc.Cluster
	fw  *testproc.Firewall // nil: no partitions
	uid map[string]int     // manager name → uid, with fw
	rec *Recorder
	rng *rand.Rand
	log func(format string, args ...any)
	// status is each manager's internal Cluster service (its own view).
	status map[string]internalpb.ClusterClient
}

// NewNemesis returns a nemesis for c; fw and uids (testproc.RunAs) may be
// nil when partitions are not used. Faults are recorded into rec.
func NewNemesis(t testing.TB, c *testproc.Cluster, fw *testproc.Firewall, uids map[string]int, rec *Recorder,
	rng *rand.Rand, logf func(format string, args ...any)) *Nemesis {
	n := &Nemesis{t: t, c: c, fw: fw, uid: uids, rec: rec, rng: rng, log: logf, status: map[string]internalpb.ClusterClient{}}
	for _, m := range c.Managers {
		conn, err := grpc.NewClient(m.APIAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatalf("dial %s: %v", m.Name, err)
		}
		t.Cleanup(func() { conn.Close() })
		n.status[m.Name] = internalpb.NewClusterClient(conn)
	}
	return n
}

// Do waits until every manager serves, then carries out a, then lets the
// traffic run for a.Then. It returns the fault as recorded, or ctx's
// error (the fault is healed first).
func (n *Nemesis) Do(ctx context.Context, a Action) (Fault, error) {
	n.t.Helper()
	for _, m := range n.c.Managers {
		m.WaitServing(2 * time.Minute)
	}
	victim, role := n.pick(a.Target)
	f := Fault{Desc: fmt.Sprintf("%s %s (%s) %s", a.Kind, victim.Name, role, a.Hold), Start: n.rec.Now()}
	n.log("nemesis: %s of %s (%s) for %s", a.Kind, victim.Name, role, a.Hold)
	var err error
	switch a.Kind {
	case KillRestart:
		victim.Kill()
		err = sleepCtx(ctx, a.Hold)
		victim.Start()
		f.End = n.rec.Now()
		victim.WaitServing(2 * time.Minute)
		n.log("nemesis: %s restarted, serving %s after the restart", victim.Name, (n.rec.Now() - f.End).Round(time.Millisecond))
	case Freeze:
		n.signal(victim, syscall.SIGSTOP)
		err = sleepCtx(ctx, a.Hold)
		n.signal(victim, syscall.SIGCONT)
		f.End = n.rec.Now()
	case Partition:
		if n.fw == nil {
			n.t.Fatalf("nemesis: a partition needs the firewall (root and iptables)")
		}
		var others []*testproc.Manager
		for _, m := range n.c.Managers {
			if m != victim {
				others = append(others, m)
			}
		}
		n.fw.Isolate(n.uid, victim, others...)
		err = sleepCtx(ctx, a.Hold)
		n.fw.Heal()
		f.End = n.rec.Now()
	}
	n.rec.AddFault(f)
	if err != nil {
		return f, err
	}
	return f, sleepCtx(ctx, a.Then)
}

func (n *Nemesis) signal(m *testproc.Manager, sig syscall.Signal) {
	n.t.Helper()
	if err := m.Proc().Cmd.Process.Signal(sig); err != nil {
		n.t.Fatalf("nemesis: %s to %s: %v", sig, m.Name, err)
	}
}

// pick returns the manager the target names and its role now: the one
// that says it is the Raft leader (asked for up to 10 s), or one of the
// others at random. Without an answer from a leader it picks at random.
func (n *Nemesis) pick(t Target) (*testproc.Manager, string) {
	leader := n.leader(10 * time.Second)
	if leader == nil {
		return n.c.Managers[n.rng.IntN(len(n.c.Managers))], "no leader known"
	}
	if t == Leader {
		return leader, "leader"
	}
	var followers []*testproc.Manager
	for _, m := range n.c.Managers {
		if m != leader {
			followers = append(followers, m)
		}
	}
	return followers[n.rng.IntN(len(followers))], "follower"
}

// leader asks every manager for its own Raft state until one says
// leader; nil after timeout.
func (n *Nemesis) leader(timeout time.Duration) *testproc.Manager {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		for _, m := range n.c.Managers {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			st, err := n.status[m.Name].Status(ctx, &internalpb.StatusRequest{})
			cancel()
			if err == nil && st.GetRaftState() == "leader" {
				return m
			}
		}
		time.Sleep(50 * time.Millisecond) // polling the managers' own view, with a deadline
	}
	return nil
}

// sleepCtx waits d, or until ctx ends (its error).
func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
