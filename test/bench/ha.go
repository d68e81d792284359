package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/norsk-oss/norsk-manager/proto/internalpb"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
)

// The HA scenarios run clusters of norsk-manager processes on loopback,
// each manager with its own API, gossip, actor and Raft ports and its own
// data dir, all started with --cluster-timings e.timings. The bench watches
// them through three views:
//
//   - the gRPC health service (SERVING only while the manager knows a
//     leader; the manager re-checks every 250 ms);
//   - the internal Cluster/Status RPC, one manager's own view (its Raft
//     state, leader, term, applied and commit index, whether it is a voter):
//     cheap, and answered by a manager alone, so it can be polled every few
//     ms without waiting on dead peers as ClusterMembers does;
//   - the public ClusterMembers (gossip state of every member, as the
//     asked manager sees it, with each member's own status).
//
// Control connections reconnect with a short backoff (at most 250 ms), so
// that a restarted manager is seen within a poll or two rather than after
// gRPC's default backoff of up to 2 minutes.

// pollEvery is the period of the bench's status polls during a
// measurement: the measured times carry up to this much (plus the RPC)
// of delay.
const pollEvery = 10 * time.Millisecond

// haManager is one manager of a bench cluster. It can be killed and started
// again on the same data dir and ports.
type haManager struct {
	name                       string
	dir                        string // data dir; logs are dir-runN.log
	api, gossip, actor, raftAd string
	flags                      []string // cluster flags after the common ones (--join, --bootstrap-expect)
	proc                       *child
	starts                     int

	conn     *grpc.ClientConn
	health   healthpb.HealthClient
	internal internalpb.ClusterClient
	mgr      managerpb.ManagerClient
}

// haCluster is a set of managers started by the bench.
type haCluster struct {
	e        *env
	dir      string
	logLevel string
	opts     clusterOpts
	ms       []*haManager
}

// clusterOpts change how a bench cluster's managers start and how the
// bench watches them; the zero value is a plaintext cluster.
type clusterOpts struct {
	// flags returns more flags for manager m (after its cluster flags),
	// e.g. TLS; nil: none.
	flags func(m *haManager) ([]string, error)
	// control opens the bench's control connection to an API address;
	// nil: dialFast (plaintext).
	control func(addr string) (*grpc.ClientConn, error)
}

// newCluster prepares (does not start) n managers m1…mn with free ports
// under a fresh scratch dir.
func (e *env) newCluster(name string, n int, logLevel string) (*haCluster, error) {
	return e.newClusterOpts(name, n, logLevel, clusterOpts{})
}

// newClusterOpts is newCluster with opts.
func (e *env) newClusterOpts(name string, n int, logLevel string, opts clusterOpts) (*haCluster, error) {
	c := &haCluster{e: e, dir: e.dir(name), logLevel: logLevel, opts: opts}
	for i := 1; i <= n; i++ {
		if _, err := c.add(fmt.Sprintf("m%d", i)); err != nil {
			c.close()
			return nil, err
		}
	}
	return c, nil
}

// add prepares one more manager (not started).
func (c *haCluster) add(name string) (*haManager, error) {
	m := &haManager{name: name, dir: filepath.Join(c.dir, name)}
	for _, p := range []*string{&m.api, &m.gossip, &m.actor, &m.raftAd} {
		port, err := listenPort()
		if err != nil {
			return nil, err
		}
		*p = fmt.Sprintf("127.0.0.1:%d", port)
	}
	control := c.opts.control
	if control == nil {
		control = dialFast
	}
	conn, err := control(m.api)
	if err != nil {
		return nil, err
	}
	m.conn, m.health, m.internal, m.mgr = conn, healthpb.NewHealthClient(conn), internalpb.NewClusterClient(conn), managerpb.NewManagerClient(conn)
	c.ms = append(c.ms, m)
	return m, nil
}

// listenPorts are the ports listenPort handed out in this process.
var listenPorts = struct {
	sync.Mutex
	used map[int]bool
}{used: map[int]bool{}}

// listenPort returns a free TCP port on 127.0.0.1 below the kernel's
// ephemeral range, for a manager to listen on. freePort's ports come from
// the ephemeral range, where an outgoing connection (one manager dialling
// another, or anything else on the box) can take the port between the
// check and the manager's bind, and a manager restarted on its ports
// needs them again later. Never the same port twice in one bench run.
func listenPort() (int, error) {
	lo := 32768 // Linux's default ip_local_port_range
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if n, err := strconv.Atoi(f[0]); err == nil {
				lo = n
			}
		}
	}
	const base = 10000
	if lo <= base+1000 {
		return freePort()
	}
	listenPorts.Lock()
	defer listenPorts.Unlock()
	for range 1000 {
		port := base + rand.IntN(lo-base)
		if listenPorts.used[port] {
			continue
		}
		l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err != nil {
			continue
		}
		l.Close()
		listenPorts.used[port] = true
		return port, nil
	}
	return 0, errors.New("no free port below the ephemeral range")
}

// dialFast opens a connection that retries a refused connect after at most
// 250 ms.
func dialFast(addr string) (*grpc.ClientConn, error) {
	return dialFastWith(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
}

// dialFastWith is dialFast with other options (transport credentials are
// required among them).
func dialFastWith(addr string, opts ...grpc.DialOption) (*grpc.ClientConn, error) {
	conn, err := grpc.NewClient(addr, append(opts,
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: 20 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: 250 * time.Millisecond},
			MinConnectTimeout: time.Second,
		}))...)
	if err != nil {
		return nil, err
	}
	conn.Connect()
	return conn, nil
}

// joinList is every manager's gossip address, comma-separated.
func (c *haCluster) joinList() string {
	var a []string
	for _, m := range c.ms {
		a = append(a, m.gossip)
	}
	return strings.Join(a, ",")
}

// urls is every manager's API address, comma-separated (a worker's
// --manager-url).
func (c *haCluster) urls() string {
	var a []string
	for _, m := range c.ms {
		a = append(a, m.api)
	}
	return strings.Join(a, ",")
}

// startAll starts every manager with --join (all gossip addresses) and
// --bootstrap-expect len(ms), one right after the other, without waiting.
func (c *haCluster) startAll() error {
	for _, m := range c.ms {
		m.flags = []string{"--join", c.joinList(), "--bootstrap-expect", fmt.Sprint(len(c.ms))}
	}
	for _, m := range c.ms {
		if err := c.start(m); err != nil {
			return err
		}
	}
	return nil
}

// start starts (or restarts) m with its cluster flags, without waiting.
func (c *haCluster) start(m *haManager) error {
	bin, err := c.e.binaries(context.Background())
	if err != nil {
		return err
	}
	m.starts++
	args := append([]string{"--data-dir", m.dir, "--api-addr", m.api, "--name", m.name,
		"--gossip-addr", m.gossip, "--cluster-addr", m.actor, "--raft-addr", m.raftAd,
		"--cluster-timings", c.e.timings, "--log-level", c.logLevel}, m.flags...)
	if c.opts.flags != nil {
		more, err := c.opts.flags(m)
		if err != nil {
			return err
		}
		args = append(args, more...)
	}
	if c.e.noSync {
		args = append(args, "--unsafe-no-fsync")
	}
	p, err := startChild("norsk-manager "+m.name, fmt.Sprintf("%s-run%d.log", m.dir, m.starts), filepath.Join(bin, "norsk-manager"), args...)
	if err != nil {
		return err
	}
	m.proc = p
	return nil
}

func (m *haManager) running() bool {
	if m.proc == nil {
		return false
	}
	select {
	case <-m.proc.done:
		return false
	default:
		return true
	}
}

// kill SIGKILLs m and waits until it has exited.
func (m *haManager) kill() {
	if !m.running() {
		return
	}
	_ = m.proc.cmd.Process.Signal(syscall.SIGKILL)
	<-m.proc.done
}

func (m *haManager) pid() int { return m.proc.cmd.Process.Pid }

// running returns the managers whose process runs.
func (c *haCluster) running() []*haManager {
	var out []*haManager
	for _, m := range c.ms {
		if m.running() {
			out = append(out, m)
		}
	}
	return out
}

func (c *haCluster) byName(name string) *haManager {
	for _, m := range c.ms {
		if m.name == name {
			return m
		}
	}
	return nil
}

// close stops every running manager (SIGTERM, in parallel) and closes the
// control connections.
func (c *haCluster) close() error {
	var wg sync.WaitGroup
	errs := make([]error, len(c.ms))
	for i, m := range c.ms {
		if m.running() {
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs[i] = m.proc.stop()
			}()
		}
	}
	wg.Wait()
	for _, m := range c.ms {
		if m.conn != nil {
			m.conn.Close()
		}
	}
	return errors.Join(errs...)
}

// closeNote stops c at the end of a measurement (close) and describes a
// failure to stop cleanly (a manager that did not exit within 15 s of
// SIGTERM was killed), "" if none: the measurement stands, the note goes
// next to it.
func (c *haCluster) closeNote() string {
	if err := c.close(); err != nil {
		return fmt.Sprintf("Stopping the cluster %s: %v", filepath.Base(c.dir), err)
	}
	return ""
}

// printNote prints a non-empty note as a paragraph.
func printNote(e *env, note string) {
	if note != "" {
		fmt.Fprintf(e.out, "Note: %s\n\n", note)
	}
}

// serving reports whether m's health service answers SERVING.
func (m *haManager) serving(ctx context.Context) bool {
	ctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	defer cancel()
	r, err := m.health.Check(ctx, &healthpb.HealthCheckRequest{})
	return err == nil && r.GetStatus() == healthpb.HealthCheckResponse_SERVING
}

// status is m's own view of the cluster (internal Cluster/Status).
func (m *haManager) status(ctx context.Context) (*internalpb.ManagerStatus, error) {
	ctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	defer cancel()
	return m.internal.Status(ctx, &internalpb.StatusRequest{})
}

// members is ClusterMembers as m answers it.
func (m *haManager) members(ctx context.Context) (*managerpb.ClusterMembersResponse, error) {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	return m.mgr.ClusterMembers(ctx, &managerpb.ClusterMembersRequest{})
}

// poll calls cond every period until it returns true (→ the time it did),
// ctx ends or timeout passes.
func poll(ctx context.Context, timeout, period time.Duration, what string, cond func() (bool, error)) (time.Time, error) {
	deadline := time.Now().Add(timeout)
	var last error
	for {
		ok, err := cond()
		if ok {
			return time.Now(), nil
		}
		var f fatal
		if errors.As(err, &f) {
			return time.Time{}, fmt.Errorf("%s: %w", what, f.error)
		}
		if err != nil {
			last = err
		}
		if time.Now().After(deadline) {
			if last != nil {
				return time.Time{}, fmt.Errorf("%s: not within %s (last error: %w)", what, timeout, last)
			}
			return time.Time{}, fmt.Errorf("%s: not within %s", what, timeout)
		}
		select {
		case <-ctx.Done():
			return time.Time{}, ctx.Err()
		case <-time.After(period):
		}
	}
}

// fatal is an error that ends a poll at once.
type fatal struct{ error }

// exitedErr reports a manager of ms that is not running (it crashed) as
// fatal.
func exitedErr(ms []*haManager) error {
	for _, m := range ms {
		if m.proc != nil && !m.running() {
			return fatal{fmt.Errorf("%s exited: %v\n%s", m.name, m.proc.err, m.proc.tail())}
		}
	}
	return nil
}

// waitServing waits until every manager of ms answers SERVING.
func waitServing(ctx context.Context, ms []*haManager, timeout time.Duration) (time.Time, error) {
	return poll(ctx, timeout, pollEvery, "every manager SERVING", func() (bool, error) {
		if err := exitedErr(ms); err != nil {
			return false, err
		}
		for _, m := range ms {
			if !m.serving(ctx) {
				return false, nil
			}
		}
		return true, nil
	})
}

// agreedLeader returns the leader every manager of ms reports in its own
// status, if they all report the same one and it is among ms; and the
// statuses.
func agreedLeader(ctx context.Context, ms []*haManager) (*haManager, []*internalpb.ManagerStatus, error) {
	sts := make([]*internalpb.ManagerStatus, len(ms))
	errs := make([]error, len(ms))
	var wg sync.WaitGroup
	for i, m := range ms {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sts[i], errs[i] = m.status(ctx)
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, nil, err
	}
	l := sts[0].GetLeader()
	for _, st := range sts {
		if st.GetLeader() == "" || st.GetLeader() != l {
			return nil, sts, nil
		}
	}
	for _, m := range ms {
		if m.name == l {
			return m, sts, nil
		}
	}
	return nil, sts, nil
}

// waitStable waits until the managers (all running) all serve, agree on a leader
// among them, are all voters and have applied what the leader had applied
// when they first agreed (the leader's applied index, as the read index
// is: Raft's commit index also counts no-op and barrier entries the FSM
// never reports, so an idle cluster would never reach it), and the
// leader's ClusterMembers lists every running manager alive and readable.
// It returns the leader.
func (c *haCluster) waitStable(ctx context.Context, timeout time.Duration) (*haManager, error) {
	var leader *haManager
	var target uint64
	haveTarget := false
	_, err := poll(ctx, timeout, 50*time.Millisecond, "a stable cluster", func() (bool, error) {
		if err := exitedErr(c.ms); err != nil {
			return false, err
		}
		ms := c.ms
		for _, m := range ms {
			if !m.serving(ctx) {
				return false, fmt.Errorf("%s not serving", m.name)
			}
		}
		l, sts, err := agreedLeader(ctx, ms)
		if err != nil || l == nil {
			haveTarget = false
			return false, err
		}
		if l != leader || !haveTarget {
			leader, haveTarget = l, true
			for i, m := range ms {
				if m == l {
					target = sts[i].GetAppliedIndex()
				}
			}
		}
		for i, st := range sts {
			if !st.GetVoter() {
				return false, fmt.Errorf("%s is not a voter", ms[i].name)
			}
			if st.GetAppliedIndex() < target {
				return false, fmt.Errorf("%s applied %d < %d", ms[i].name, st.GetAppliedIndex(), target)
			}
		}
		resp, err := l.members(ctx)
		if err != nil {
			return false, err
		}
		alive := 0
		for _, mb := range resp.GetMembers() {
			if mb.GetGossipState() == "alive" && mb.GetError() == "" && c.byName(mb.GetName()) != nil {
				alive++
			}
		}
		if alive != len(ms) {
			return false, fmt.Errorf("the leader's ClusterMembers lists %d of %d running managers alive", alive, len(ms))
		}
		return true, nil
	})
	return leader, err
}

// durs collects a measurement over trials: the values of the trials that
// produced one, and the number of trials that did not.
type durs struct {
	vals  []time.Duration
	fails int
}

func (d *durs) add(v time.Duration, ok bool) {
	if ok {
		d.vals = append(d.vals, v)
	} else {
		d.fails++
	}
}

// row prints d as a latencyHeader row; the errors column counts the trials
// without a value.
func (d *durs) row(e *env, label string) {
	if len(d.vals) == 0 {
		fmt.Fprintf(e.out, "| %s | 0 | – | – | – | – | – | %d |\n", label, d.fails)
		return
	}
	latencyRow(e.out, label, d.vals, d.fails)
}

// perTrial formats the values of d in trial order, in ms.
func (d *durs) perTrial() string {
	var s []string
	for _, v := range d.vals {
		s = append(s, fmtMs(ms(v)))
	}
	return strings.Join(s, ", ")
}

// p99 is the nearest-rank p99 of d's values (0 if none).
func (d *durs) p99() time.Duration { return percentile(d.vals, 99) }

func (d *durs) max() time.Duration {
	if len(d.vals) == 0 {
		return 0
	}
	return slices.Max(d.vals)
}

// timingsLine describes what --cluster-timings means for the managers.
func timingsLine(t string) string {
	if t == "local" {
		return "`--cluster-timings local`: Raft heartbeat and election timeouts 300 ms, leader lease 200 ms; " +
			"memberlist probe every 500 ms with a 200 ms timeout, suspicion multiplier 2"
	}
	return "`--cluster-timings lan` (the default of norsk-manager): Raft heartbeat and election timeouts 500 ms, leader lease 250 ms; " +
		"memberlist's LAN profile with faster probes (probe every 500 ms with a 250 ms timeout, suspicion multiplier 4)"
}
