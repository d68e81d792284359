package ha

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/norsk-oss/norsk-manager/client"
	"github.com/norsk-oss/norsk-manager/persistence"
	"github.com/norsk-oss/norsk-manager/proto/commonpb"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
	"github.com/norsk-oss/norsk-manager/test/testproc"
)

// TestHA_PartitionedWorkerFences (issue 21 §10): three managers; three
// auto-placed jobs of a pool with the default disconnect settings (fence
// on, replace at once) run on worker fw1, and fw2 stands by. fw1 is cut
// off from every manager by port rules (every packet to or from its
// listening port is dropped: the managers' sessions and re-dials; its
// registrations still reach them, but no manager can dial it back). The
// managers declare fw1 lost and start the jobs on fw2; fw1 must have
// stopped its copies first. The copies of each job (its sleep processes)
// are counted every 100 ms from the cut until well after the heal: never
// two. After the heal fw1 is taken back and runs nothing.
func TestHA_PartitionedWorkerFences(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cluster of real managers and workers")
	}
	ctx := context.Background()
	fw := testproc.NewFirewall(t)
	c := testproc.NewCluster(t, 3)
	c.StartAll()
	cl := clientOf(t, 10*time.Second, c.Managers...)
	testproc.Await(t, 60*time.Second, "pool created", func() error {
		err := cl.CreatePool(ctx, &managerpb.Pool{Name: "live", Tiers: []*managerpb.PoolTier{{Name: "any"}}})
		if err != nil && !strings.Contains(err.Error(), "already exists") {
			return err
		}
		return nil
	})
	p, err := cl.GetPool(ctx, "live")
	if err != nil {
		t.Fatal(err)
	}
	if d := p.GetDisconnect(); d.GetFence() != managerpb.PoolDisconnect_FENCE_ON || d.GetReplace() != managerpb.PoolDisconnect_REPLACE_IMMEDIATELY {
		t.Fatalf("pool live stored disconnect %v; want the defaults (fence on, replace at once)", d)
	}
	worker := func(name string) (client.NodeID, *testproc.Worker) {
		var nodeID client.NodeID
		var token string
		testproc.Await(t, 60*time.Second, "slot "+name+" registered", func() error {
			var err error
			nodeID, token, err = cl.RegisterClusterNode(ctx, name, nil)
			return err
		})
		w := testproc.StartWorker(t, name, string(nodeID), token, c.URLs(), "--capacity", "100")
		testproc.Await(t, 60*time.Second, "node "+name+" started", func() error {
			if !testproc.NodeStarted(cl, string(nodeID)) {
				return fmt.Errorf("not connected and STARTED")
			}
			return nil
		})
		return nodeID, w
	}
	n1, w1 := worker("fw1")

	const n = 3
	base := 70_000_000 + os.Getpid()%1000*1000
	arg := func(i int) string { return fmt.Sprint(base + i) }
	id := func(i int) string { return fmt.Sprintf("fence-%d", i) }
	t.Cleanup(func() {
		for i := range n {
			testproc.KillProcessesMentioning("sleep\x00" + arg(i) + "\x00")
		}
	})
	for i := range n {
		createJobAcked(t, cl, &managerpb.Job{JobId: &commonpb.JobId{JobId: id(i)}, Tags: map[string]string{persistence.PoolTag: "live"},
			Services:      []*commonpb.Service{{Name: "idle", Command: "exec sleep " + arg(i), Restart: commonpb.Service_NEVER}},
			AutoPlacement: &managerpb.AutoPlacement{Requirements: &managerpb.JobRequirements{RequiredCapacity: 1}}})
	}
	runsOn := func(node client.NodeID) error {
		for i := range n {
			r, err := cl.JobByID(ctx, client.JobID(id(i)))
			if err != nil {
				return err
			}
			if got := len(r.GetInstances()); got != 1 {
				return fmt.Errorf("%s has %d instances, want 1", id(i), got)
			}
			if on := r.GetInstances()[0].GetNodeId().GetNodeId(); on != string(node) {
				return fmt.Errorf("%s runs on %s", id(i), on)
			}
			if got := processesWithArgs("sleep", arg(i)); got != 1 {
				return fmt.Errorf("%s runs %d processes, want 1", id(i), got)
			}
		}
		return nil
	}
	testproc.Await(t, 90*time.Second, "every job runs on fw1", func() error { return runsOn(n1) })
	n2, _ := worker("fw2")

	// Count the copies every 100 ms from the cut on.
	counter := newCopyCounter(n, func(i int) int { return processesWithArgs("sleep", arg(i)) })
	counter.start()
	defer counter.stop()

	port := w1.Addr[strings.LastIndexByte(w1.Addr, ':')+1:]
	cutWorkerPort(t, fw, port)
	cut := time.Now()
	t.Logf("cut fw1 (port %s) off from every manager: %d rules in %s", port, strings.Count(fw.Rules(), "\n-A "), fw.Chain)

	testproc.Await(t, 120*time.Second, "every job runs on fw2", func() error { return runsOn(n2) })
	moved := time.Since(cut)
	first := counter.firstZero()
	t.Logf("fenced copies gone %s after the cut; every job running on fw2 %s after it", since(first, cut), moved.Round(time.Millisecond))

	fw.Heal()
	healed := time.Now()
	testproc.Await(t, 60*time.Second, "fw1 taken back after the heal", func() error {
		if !testproc.NodeStarted(cl, string(n1)) {
			return fmt.Errorf("fw1 not connected and STARTED")
		}
		return nil
	})
	// Thirty more samples with fw1 back (nothing may start twice there).
	for s := counter.samples() + 30; counter.samples() < s; {
		counter.waitSample(t)
	}
	if err := runsOn(n2); err != nil {
		t.Errorf("after the heal: %v", err)
	}
	counter.stop()
	t.Logf("fw1 taken back %s after the heal; %d samples", time.Since(healed).Round(time.Millisecond), counter.samples())
	if bad := counter.doubles(); len(bad) > 0 {
		t.Fatalf("a job ran twice: %s", strings.Join(bad, "; "))
	}
}

// since formats at - from ("never" for a zero at).
func since(at, from time.Time) string {
	if at.IsZero() {
		return "never"
	}
	return at.Sub(from).Round(time.Millisecond).String()
}

// cutWorkerPort drops every TCP packet to or from the worker's listening
// port on loopback: the managers' sessions with it and their re-dials.
// The rules go in fw's chain (OUTPUT), so Heal removes them.
func cutWorkerPort(t *testing.T, fw *testproc.Firewall, port string) {
	t.Helper()
	if _, err := strconv.Atoi(port); err != nil {
		t.Fatalf("worker port %q", port)
	}
	for _, dir := range []string{"--dport", "--sport"} {
		args := []string{"-w", "5", "-A", fw.Chain, "-p", "tcp", "-d", "127.0.0.1", dir, port, "-j", "DROP"}
		if out, err := exec.Command("iptables", args...).CombinedOutput(); err != nil {
			t.Fatalf("iptables %s: %v: %s", strings.Join(args, " "), err, out)
		}
	}
}

// copyCounter samples how many copies of each of n jobs run, every
// 100 ms, and remembers every sample with more than one.
type copyCounter struct {
	n     int
	count func(i int) int
	done  chan struct{}
	wg    sync.WaitGroup
	once  sync.Once

	mu struct {
		sync.Mutex
		samples int
		bad     []string
		zero    time.Time     // first sample with a job at zero copies
		tick    chan struct{} // closed and replaced at every sample
	}
}

func newCopyCounter(n int, count func(i int) int) *copyCounter {
	c := &copyCounter{n: n, count: count, done: make(chan struct{})}
	c.mu.tick = make(chan struct{})
	return c
}

func (c *copyCounter) start() {
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-c.done:
				return
			case <-t.C:
			}
			c.sample()
		}
	}()
}

func (c *copyCounter) sample() {
	now := time.Now()
	var bad []string
	zero := false
	for i := range c.n {
		switch k := c.count(i); {
		case k > 1:
			bad = append(bad, fmt.Sprintf("job %d: %d copies at %s", i, k, now.Format("15:04:05.000")))
		case k == 0:
			zero = true
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.mu.samples++
	c.mu.bad = append(c.mu.bad, bad...)
	if zero && c.mu.zero.IsZero() {
		c.mu.zero = now
	}
	close(c.mu.tick)
	c.mu.tick = make(chan struct{})
}

func (c *copyCounter) stop() {
	c.once.Do(func() { close(c.done) })
	c.wg.Wait()
}

func (c *copyCounter) samples() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.mu.samples
}

// waitSample waits for the next sample (at most 10 s).
func (c *copyCounter) waitSample(t *testing.T) {
	t.Helper()
	c.mu.Lock()
	tick := c.mu.tick
	c.mu.Unlock()
	select {
	case <-tick:
	case <-time.After(10 * time.Second):
		t.Fatal("the copy counter took no sample in 10 s")
	}
}

func (c *copyCounter) firstZero() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.mu.zero
}

func (c *copyCounter) doubles() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.mu.bad...)
}
