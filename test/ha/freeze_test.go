package ha

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	pacluster "github.com/asynkron/protoactor-go/cluster"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/norsk-oss/norsk-manager/client"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
	"github.com/norsk-oss/norsk-manager/test/testproc"
)

// freezeFor is how long a manager stays frozen (SIGSTOP): far longer
// than the gossip takes to declare it failed (about 1.5 s with
// --cluster-timings local), so the others move its grains and sessions.
const freezeFor = 20 * time.Second

// falseAnswerBound is how long after SIGCONT a manager may still give a
// false answer (ARCHITECTURE §7.7: an activation that is no longer its
// grain's owner stops answering within seconds of running again).
const falseAnswerBound = 5 * time.Second

// stopEffectBound bounds the time from an acknowledged StopJob to the
// job's process being gone on the worker (the "within 10 s").
const stopEffectBound = 10 * time.Second

// TestHA_FrozenManager freezes one manager for 20 s (SIGSTOP, then
// SIGCONT) — the Raft leader, the follower holding the worker session,
// and the manager hosting the job grain — while a client cycles a job
// through StartJob and StopJob through every manager in turn, before,
// during and after the freeze. At once after SIGCONT a StopJob of a
// second running job goes through the thawed manager. Required:
//
//   - every acknowledged StopJob takes effect on the worker within 10 s
//     (the job's process is gone) and the record ends without the
//     instance (nothing left "stopping");
//   - every acknowledged StartJob takes effect (the job serves HTTP);
//   - no false answer (a refusal that contradicts the state the client
//     itself made: "not online", "no instance with role", "already
//     running") later than a few seconds after SIGCONT.
func TestHA_FrozenManager(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cluster of real managers and a worker")
	}
	for _, victim := range []string{"leader", "session-holder", "job-host"} {
		t.Run(victim, func(t *testing.T) { testFrozenManager(t, victim) })
	}
}

func testFrozenManager(t *testing.T, which string) {
	ctx := context.Background()
	c := testproc.NewCluster(t, 3)
	c.StartAll()
	hc := newWatchedCluster(t, c)
	cl := clientOf(t, 10*time.Second, c.Managers...)

	// The node grain (and so the worker session) on a follower: slots are
	// registered until one's node id is owned by a follower.
	leader := hc.leader(t, 60*time.Second)
	var nodeID client.NodeID
	var token string
	for i := 0; ; i++ {
		id, tok, err := registerSlot(cl, fmt.Sprintf("w%d", i))
		if err != nil {
			t.Fatal(err)
		}
		if owner(c, "node", string(id)) != leader {
			nodeID, token = id, tok
			break
		}
	}
	testproc.StartWorker(t, "w1", string(nodeID), token, c.URLs())
	testproc.Await(t, 60*time.Second, "node started", func() error {
		if !testproc.NodeStarted(cl, string(nodeID)) {
			return errors.New("not connected and STARTED")
		}
		return nil
	})
	holder := sessionHolder(t, hc, string(nodeID))
	var victim *testproc.Manager
	switch which {
	case "leader":
		victim = leader
	case "session-holder":
		victim = holder
		if victim == leader {
			t.Fatalf("the leader %s holds the session of node %s, owned by %s", leader.Name, nodeID, owner(c, "node", string(nodeID)).Name)
		}
	case "job-host":
		// A follower that neither leads nor holds the session, if any.
		for _, m := range c.Managers {
			if m != leader && m != holder {
				victim = m
			}
		}
		if victim == nil {
			victim = others(c.Managers, leader)[0]
		}
	}
	// The cycled job's grain and the stopped job's grain live on the
	// victim for "job-host" (and wherever disthash puts them otherwise).
	cycled := jobOwnedBy(c, victim, "cycle")
	if which != "job-host" {
		cycled = jobOwnedBy(c, others(c.Managers, victim)[0], "cycle")
	}
	stopped := jobOwnedBy(c, victim, "stopme")
	t.Logf("victim %s (%s); leader %s; session on %s; jobs %s, %s", victim.Name, which, leader.Name, holder.Name, cycled, stopped)

	cyc := &cycler{t: t, node: string(nodeID), id: cycled, port: testproc.FreePort(t), pidFile: filepath.Join(testproc.JobFilesDir(t), "cycle.pid"), ms: c.Managers}
	createJobAcked(t, cl, testproc.WebJob(cyc.id, cyc.pidFile, cyc.port))
	stopPID := filepath.Join(testproc.JobFilesDir(t), "stop.pid")
	stopPort := testproc.FreePort(t)
	createJobAcked(t, cl, testproc.WebJob(stopped, stopPID, stopPort))
	if err := cl.StartJob(ctx, client.JobID(stopped), "primary", nodeID); err != nil {
		t.Fatalf("StartJob(%s): %v", stopped, err)
	}
	testproc.Await(t, 60*time.Second, stopped+" serving", func() error {
		if !testproc.HTTPOK(stopPort) {
			return errors.New("no HTTP answer")
		}
		return nil
	})

	// Cycle before the freeze: everything must be right.
	cyc.run(3*len(c.Managers), time.Time{})

	proc := victim.Proc()
	if err := proc.Cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	frozen := time.Now()
	t.Cleanup(func() { _ = proc.Cmd.Process.Signal(syscall.SIGCONT) })
	t.Logf("%s frozen", victim.Name)
	// During the freeze: calls through the victim time out (unknown
	// outcomes); the others must keep serving.
	for time.Since(frozen) < freezeFor {
		cyc.step(time.Time{})
	}
	if err := proc.Cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	thawed := time.Now()
	t.Logf("%s thawed after %s", victim.Name, thawed.Sub(frozen).Round(time.Millisecond))

	// At once: stop the second job through the thawed manager, retried
	// while it gives no answer (it reports NOT_SERVING until it hears of
	// the new leader, and a call may time out).
	vc := clientOf(t, 10*time.Second, victim)
	pid, _ := testproc.ReadPID(stopPID)
	var stopErr error
	for attempt := 1; ; attempt++ {
		stopErr = vc.StopJob(ctx, client.JobID(stopped), "primary", nodeID)
		if stopErr == nil || !isUnavailable(stopErr) || time.Since(thawed) > 20*time.Second {
			break
		}
		t.Logf("StopJob(%s) through %s, attempt %d (+%s): %v", stopped, victim.Name, attempt,
			time.Since(thawed).Round(time.Millisecond), stopErr)
		time.Sleep(100 * time.Millisecond) // pace the retries of a caller, not synchronisation
	}
	switch {
	case stopErr == nil:
		acked := time.Now()
		testproc.Await(t, stopEffectBound, "acknowledged StopJob("+stopped+") reaching the worker", func() error {
			if testproc.PIDAlive(pid) {
				return fmt.Errorf("process %d still runs", pid)
			}
			return nil
		})
		t.Logf("StopJob(%s) through %s: acknowledged %s after SIGCONT, process gone %s later", stopped, victim.Name,
			acked.Sub(thawed).Round(time.Millisecond), time.Since(acked).Round(time.Millisecond))
	case isUnavailable(stopErr):
		t.Logf("StopJob(%s) through %s gave no answer twice: %v", stopped, victim.Name, stopErr)
	default:
		t.Errorf("StopJob(%s) through %s right after SIGCONT: %v (the job ran: a false answer)", stopped, victim.Name, stopErr)
	}

	// The thawed manager learnt that the others declared it failed and
	// rejoined the actor cluster under a new id, dropping the grains it
	// hosted (what makes its stale activations stop answering).
	testproc.Await(t, 30*time.Second, victim.Name+" rejoining the actor cluster", func() error {
		if !strings.Contains(proc.Output(), "rejoined the actor cluster") {
			return errors.New("not logged yet")
		}
		return nil
	})
	t.Logf("%s rejoined the actor cluster %s after SIGCONT", victim.Name, time.Since(thawed).Round(time.Millisecond))

	// After the thaw: keep cycling through every manager.
	cyc.run(6*len(c.Managers), thawed)
	if cyc.lastFalse.After(thawed.Add(falseAnswerBound)) {
		t.Errorf("false answers until %s after SIGCONT (bound %s): %s", cyc.lastFalse.Sub(thawed).Round(time.Millisecond),
			falseAnswerBound, strings.Join(cyc.falses, "; "))
	} else if len(cyc.falses) > 0 {
		t.Logf("false answers (all within %s of SIGCONT): %s", falseAnswerBound, strings.Join(cyc.falses, "; "))
	}
	if os.Getenv("HB_DEBUG") != "" {
		defer t.Error("HB_DEBUG: failing to keep the logs")
	}
	// Nothing is left stopping, on every manager.
	for _, m := range c.Managers {
		mc := clientOf(t, 10*time.Second, m)
		for _, id := range []string{cyc.id, stopped} {
			testproc.Await(t, 30*time.Second, id+" settled on "+m.Name, func() error {
				r, err := mc.JobByID(ctx, client.JobID(id))
				if err != nil {
					return err
				}
				if k := lastHistoryKind(r); k == "Stopping" {
					return fmt.Errorf("history ends with %s", k)
				}
				switch want := id == cyc.id && cyc.running; {
				case want && len(r.GetInstances()) != 1:
					return fmt.Errorf("running, but instances %v", r.GetInstances())
				case !want && (id == cyc.id && !cyc.uncertain || id == stopped && stopErr == nil) && len(r.GetInstances()) > 0:
					return fmt.Errorf("stopped, but instances %v", r.GetInstances())
				}
				return nil
			})
		}
	}
}

// registerSlot registers a cluster slot, retrying while the cluster
// forms.
func registerSlot(cl *client.NorskManager, name string) (client.NodeID, string, error) {
	deadline := time.Now().Add(60 * time.Second)
	for {
		id, token, err := cl.RegisterClusterNode(context.Background(), name, nil)
		if err == nil || time.Now().After(deadline) {
			return id, token, err
		}
	}
}

// sessionHolder returns the manager holding node's worker session.
func sessionHolder(t *testing.T, hc *watchedCluster, node string) *testproc.Manager {
	t.Helper()
	var holder *testproc.Manager
	testproc.Await(t, 30*time.Second, "one manager holding the session of "+node, func() error {
		holder = nil
		for name, nodes := range hc.sessionsByManager() {
			for _, n := range nodes {
				if n == node {
					if holder != nil {
						return errors.New("two holders")
					}
					for _, m := range hc.Managers {
						if m.Name == name {
							holder = m
						}
					}
				}
			}
		}
		if holder == nil {
			return errors.New("no holder")
		}
		return nil
	})
	return holder
}

// jobOwnedBy returns a job id starting with prefix whose grain disthash
// places on m while every manager of c is a member.
func jobOwnedBy(c *testproc.Cluster, m *testproc.Manager, prefix string) string {
	for i := 0; ; i++ {
		id := fmt.Sprintf("%s-%d", prefix, i)
		if owner(c, "job", id) == m {
			return id
		}
	}
}

// owner returns the manager of c that disthash makes the owner of the
// grain (kind, id) while every manager is a member: protoactor's
// rendezvous hash over the managers' actor addresses.
func owner(c *testproc.Cluster, kind, id string) *testproc.Manager {
	rdv := pacluster.NewRendezvous()
	var members []*pacluster.Member
	for _, x := range c.Managers {
		host, port := splitHostPort(x.ActorAddr)
		members = append(members, &pacluster.Member{Id: x.Name, Host: host, Port: int32(port), Kinds: []string{kind}})
	}
	rdv.UpdateMembers(members)
	addr := rdv.GetByClusterIdentity(pacluster.NewClusterIdentity(id, kind))
	for _, x := range c.Managers {
		if x.ActorAddr == addr {
			return x
		}
	}
	return nil
}

func splitHostPort(addr string) (string, int) {
	i := strings.LastIndexByte(addr, ':')
	var port int
	fmt.Sscan(addr[i+1:], &port)
	return addr[:i], port
}

// cycler starts and stops one job on one node through each manager in
// turn and checks every answer against the state its own acknowledged
// calls made (it is the job's only writer).
type cycler struct {
	t       *testing.T
	node    string
	id      string
	port    int
	pidFile string
	ms      []*testproc.Manager
	next    int

	running   bool // the job runs after the last acknowledged call
	uncertain bool // the last call's outcome is unknown
	lastFalse time.Time
	falses    []string
}

// run takes n steps.
func (c *cycler) run(n int, since time.Time) {
	for range n {
		c.step(since)
	}
}

// step makes one StartJob or StopJob through the next manager and checks
// the answer; an acknowledged call must take effect.
func (c *cycler) step(since time.Time) {
	t := c.t
	m := c.ms[c.next%len(c.ms)]
	c.next++
	mc := clientOf(t, 3*time.Second, m)
	defer mc.Close()
	ctx := context.Background()
	start := time.Now()
	var err error
	op := "start"
	if c.running {
		op = "stop"
		err = mc.StopJob(ctx, client.JobID(c.id), "primary", client.NodeID(c.node))
	} else {
		err = mc.StartJob(ctx, client.JobID(c.id), "primary", client.NodeID(c.node))
	}
	when := ""
	if !since.IsZero() {
		when = fmt.Sprintf(" (+%s)", start.Sub(since).Round(time.Millisecond))
	}
	switch code := status.Code(err); {
	case err == nil:
		c.uncertain = false
		c.running = op == "start"
		c.awaitEffect(mc, op, m.Name+when)
	case code == codes.Unavailable || code == codes.DeadlineExceeded || code == codes.Canceled:
		c.uncertain = true
	case code == codes.Aborted:
		// "Modified concurrently; retry": nothing was done, no claim made.
	case c.uncertain && op == "start" && code == codes.AlreadyExists:
		c.uncertain, c.running = false, true // the earlier unknown start happened
	case c.uncertain && op == "stop" && code == codes.FailedPrecondition && strings.Contains(err.Error(), "no instance"):
		c.uncertain, c.running = false, false // the earlier unknown stop happened
		c.awaitEffect(mc, "stop", m.Name+when)
	default:
		c.lastFalse = time.Now()
		c.falses = append(c.falses, fmt.Sprintf("%s via %s%s: %v", op, m.Name, when, err))
		t.Logf("false answer: %s via %s%s: %v", op, m.Name, when, err)
	}
}

// awaitEffect waits for an acknowledged start (HTTP answers) or stop
// (the process is gone) to take effect on the worker.
func (c *cycler) awaitEffect(mc *client.NorskManager, op, via string) {
	if op == "start" {
		testproc.Await(c.t, 30*time.Second, "acknowledged StartJob("+c.id+") via "+via+" serving", func() error {
			if !testproc.HTTPOK(c.port) {
				return errors.New("no HTTP answer")
			}
			return nil
		})
		return
	}
	pid, _ := testproc.ReadPID(c.pidFile)
	testproc.Await(c.t, stopEffectBound, "acknowledged StopJob("+c.id+") via "+via+" reaching the worker", func() error {
		if testproc.PIDAlive(pid) || testproc.HTTPOK(c.port) {
			return fmt.Errorf("process %d still runs", pid)
		}
		return nil
	})
	// The worker's job_stopped reaches the record a moment later.
	testproc.Await(c.t, stopEffectBound, c.id+"'s instance gone after the stop via "+via, func() error {
		r, err := mc.JobByID(context.Background(), client.JobID(c.id))
		if err != nil {
			return err
		}
		if len(r.GetInstances()) > 0 {
			return fmt.Errorf("instances %v (history ends with %s)", r.GetInstances(), lastHistoryKind(r))
		}
		return nil
	})
}

// lastHistoryKind names the type of r's last history entry ("Running",
// "Stopping", …), "" if none.
func lastHistoryKind(r *managerpb.JobByIdResponse) string {
	h := r.GetJob().GetHistoryEntry()
	if len(h) == 0 {
		return ""
	}
	return strings.TrimPrefix(fmt.Sprintf("%T", h[len(h)-1].GetHistoryEntry()), "*managerpb.JobHistoryEntry_Job")
}
