package testproc

import (
	"context"
	"crypto/tls"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/norsk-oss/norsk-manager/client"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
)

// Manager is one norsk-manager of a test cluster. Start and Kill may be
// called repeatedly: it restarts on the same data dir and ports.
type Manager struct {
	t          testing.TB
	Name       string
	DataDir    string
	APIAddr    string
	GossipAddr string
	ActorAddr  string
	RaftAddr   string
	// mu guards proc: Start replaces it while other goroutines of a test
	// (session watchers, load) ask which managers run.
	mu   sync.Mutex
	proc *Proc
	// Setup, if set, adjusts the process before each Start (StartWith),
	// e.g. to run it under another uid.
	Setup func(*exec.Cmd)
	// TLS, if set, is the client TLS of WaitServing, Client and Members
	// (a manager given --tls-* flags in Cluster.Extra).
	TLS    *tls.Config
	args   []string
	starts int
}

// Cluster is a set of managers on loopback.
type Cluster struct {
	t        testing.TB
	Managers []*Manager
	// Extra flags given to every manager.
	Extra []string
	// TLS, if set, is the client TLS of Client and of every manager's
	// probes (Manager.TLS of managers made after it is set).
	TLS *tls.Config
}

// NewCluster prepares n managers (m1…mn) with fresh ports and data dirs,
// joined through each other's gossip addresses, --bootstrap-expect n,
// --cluster-timings local. Start them with StartAll.
func NewCluster(t testing.TB, n int, extra ...string) *Cluster {
	c := &Cluster{t: t, Extra: extra}
	for i := 1; i <= n; i++ {
		c.Managers = append(c.Managers, c.newManager(fmt.Sprintf("m%d", i)))
	}
	return c
}

func (c *Cluster) newManager(name string) *Manager {
	return &Manager{t: c.t, Name: name, DataDir: filepath.Join(c.t.TempDir(), name), TLS: c.TLS,
		APIAddr: Addr(FreePort(c.t)), GossipAddr: Addr(FreePort(c.t)), ActorAddr: Addr(FreePort(c.t)), RaftAddr: Addr(FreePort(c.t))}
}

// Join lists every manager's gossip address.
func (c *Cluster) Join() string {
	addrs := make([]string, len(c.Managers))
	for i, m := range c.Managers {
		addrs[i] = m.GossipAddr
	}
	return strings.Join(addrs, ",")
}

// URLs lists every manager's API address (for client.Settings.URL and a
// worker's --manager-url).
func (c *Cluster) URLs() string {
	addrs := make([]string, len(c.Managers))
	for i, m := range c.Managers {
		addrs[i] = m.APIAddr
	}
	return strings.Join(addrs, ",")
}

// StartAll starts every manager with --bootstrap-expect len(Managers) and
// waits until all of them serve (a leader is known).
func (c *Cluster) StartAll() {
	for _, m := range c.Managers {
		m.args = append([]string{"--join", c.Join(), "--bootstrap-expect", fmt.Sprint(len(c.Managers))}, c.Extra...)
		m.Start()
	}
	for _, m := range c.Managers {
		m.WaitServing(60 * time.Second)
	}
}

// AddManager prepares and starts a new manager that joins the running
// cluster (no --bootstrap-expect), and waits until it serves.
func (c *Cluster) AddManager(name string) *Manager {
	m := c.newManager(name)
	m.args = append([]string{"--join", c.Join()}, c.Extra...)
	c.Managers = append(c.Managers, m)
	m.Start()
	m.WaitServing(60 * time.Second)
	return m
}

// Start starts (or restarts) the manager process.
func (m *Manager) Start() {
	m.t.Helper()
	m.starts++
	args := append([]string{"--data-dir", m.DataDir, "--api-addr", m.APIAddr, "--name", m.Name,
		"--gossip-addr", m.GossipAddr, "--cluster-addr", m.ActorAddr, "--raft-addr", m.RaftAddr,
		"--cluster-timings", "local", "--log-level", "debug"}, m.args...)
	p := StartWith(m.t, fmt.Sprintf("%s-run%d", m.Name, m.starts), "norsk-manager", m.Setup, args...)
	m.mu.Lock()
	m.proc = p
	m.mu.Unlock()
}

// Proc is the manager's current (or last) process; nil before Start.
// Safe to call from any goroutine.
func (m *Manager) Proc() *Proc {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.proc
}

// Kill SIGKILLs the manager.
func (m *Manager) Kill() { m.Proc().Kill() }

// Stop stops the manager with SIGTERM (a graceful leave).
func (m *Manager) Stop() { m.Proc().Stop() }

// WaitServing waits until the manager's health service answers SERVING
// (it knows a leader).
func (m *Manager) WaitServing(timeout time.Duration) {
	m.t.Helper()
	Eventually(m.t, timeout, m.Name+" serving", func() bool {
		if p := m.Proc(); !p.Running() {
			m.t.Fatalf("%s exited:\n%s", m.Name, p.Output())
		}
		return ServingTLS(m.APIAddr, m.TLS)
	})
}

// Client connects a client to this manager only.
func (m *Manager) Client() *client.NorskManager {
	m.t.Helper()
	cl, err := client.Connect(context.Background(), client.Settings{URL: m.APIAddr, Timeout: 10 * time.Second, TLS: m.TLS})
	if err != nil {
		m.t.Fatal(err)
	}
	m.t.Cleanup(func() { cl.Close() })
	return cl
}

// Client connects a client to every manager (it fails over between them).
func (c *Cluster) Client() *client.NorskManager {
	c.t.Helper()
	cl, err := client.Connect(context.Background(), client.Settings{URL: c.URLs(), Timeout: 10 * time.Second, TLS: c.TLS})
	if err != nil {
		c.t.Fatal(err)
	}
	c.t.Cleanup(func() { cl.Close() })
	return cl
}

// Running returns the managers whose process runs.
func (c *Cluster) Running() []*Manager {
	var out []*Manager
	for _, m := range c.Managers {
		if p := m.Proc(); p != nil && p.Running() {
			out = append(out, m)
		}
	}
	return out
}

// Leader returns the manager that is the Raft leader as the running
// managers see it, waiting up to timeout for one.
func (c *Cluster) Leader(timeout time.Duration) *Manager {
	c.t.Helper()
	var leader *Manager
	Eventually(c.t, timeout, "a leader", func() bool {
		for _, m := range c.Running() {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			resp, err := m.Members(ctx)
			cancel()
			if err != nil || resp.GetLeader() == "" {
				continue
			}
			for _, cand := range c.Running() {
				if cand.Name == resp.GetLeader() {
					leader = cand
					return true
				}
			}
		}
		return false
	})
	return leader
}

// Members returns the cluster members as m sees them.
func (m *Manager) Members(ctx context.Context) (*managerpb.ClusterMembersResponse, error) {
	cl := memberClient(m)
	defer cl.Close() // callers poll: do not keep a connection per call until cleanup
	return cl.ClusterMembers(ctx)
}

func memberClient(m *Manager) *client.NorskManager {
	cl, err := client.Connect(context.Background(), client.Settings{URL: m.APIAddr, Timeout: 3 * time.Second, TLS: m.TLS})
	if err != nil {
		m.t.Fatal(err)
	}
	m.t.Cleanup(func() { cl.Close() })
	return cl
}
