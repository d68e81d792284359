package membership

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// metaFor is the meta test member name advertises.
func metaFor(name string) Meta {
	return Meta{APIAddr: "127.0.0.1:80" + name[len(name)-1:], RaftAddr: "127.0.0.1:83" + name[len(name)-1:], Version: "test-" + name}
}

// startCluster starts len(names) members; each joins the first one through
// Config.Join (the join loop), and waits until all see all of them.
func startCluster(t *testing.T, names ...string) []*Membership {
	t.Helper()
	var ms []*Membership
	for i, name := range names {
		ms = append(ms, TestMembership(t, name, func(c *Config) {
			c.Meta = metaFor(name)
			if i > 0 {
				c.Join = []string{ms[0].LocalMember().Addr}
			}
		}))
	}
	waitAlive(t, ms, names...)
	return ms
}

// waitAlive waits until every m in ms sees exactly names alive, with the
// meta metaFor gives (plus whatever was set later via SetMeta is not
// checked here).
func waitAlive(t *testing.T, ms []*Membership, names ...string) {
	t.Helper()
	want := slices.Sorted(slices.Values(names))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, m := range ms {
		if err := m.WaitForMembers(ctx, len(names)); err != nil {
			t.Fatalf("%s: %v (members %v)", m.cfg.Name, err, memberNames(m.Members()))
		}
		eventually(t, 5*time.Second, func() string {
			if got := memberNames(m.Members()); !slices.Equal(got, want) {
				return fmt.Sprintf("%s sees %v, want %v", m.cfg.Name, got, want)
			}
			return ""
		})
	}
}

func memberNames(ms []Member) []string {
	var out []string
	for _, m := range ms {
		out = append(out, m.Name)
	}
	return out
}

func findMember(m *Membership, name string) (Member, bool) {
	for _, mem := range m.Members() {
		if mem.Name == name {
			return mem, true
		}
	}
	return Member{}, false
}

func findDeparture(m *Membership, name string) (Departure, bool) {
	for _, d := range m.Left() {
		if d.Name == name {
			return d, true
		}
	}
	return Departure{}, false
}

func TestMembership_Converge(t *testing.T) {
	t.Parallel()
	start := time.Now()
	ms := startCluster(t, "m1", "m2", "m3")
	t.Logf("3 members converged in %s", time.Since(start))
	for _, m := range ms {
		for _, mem := range m.Members() {
			want := metaFor(mem.Name)
			want.Name = mem.Name
			if mem.State != MemberAlive || mem.Meta.Name != want.Name || mem.Meta.APIAddr != want.APIAddr ||
				mem.Meta.RaftAddr != want.RaftAddr || mem.Meta.Version != want.Version {
				t.Errorf("%s sees %+v, want alive with meta %+v", m.cfg.Name, mem, want)
			}
			if _, _, err := net.SplitHostPort(mem.Addr); err != nil || !strings.HasPrefix(mem.Addr, "127.0.0.1:") {
				t.Errorf("%s: bad addr %q", mem.Name, mem.Addr)
			}
		}
		if lm := m.LocalMember(); lm.State != MemberAlive || lm.Meta.Name != m.cfg.Name {
			t.Errorf("LocalMember = %+v", lm)
		}
		if got, _ := findMember(ms[0], m.cfg.Name); got.Addr != m.LocalMember().Addr {
			t.Errorf("m1 sees %s at %s, it is at %s", m.cfg.Name, got.Addr, m.LocalMember().Addr)
		}
	}

	// A fourth joins later, through another member.
	start = time.Now()
	m4 := TestMembership(t, "m4", func(c *Config) {
		c.Meta = metaFor("m4")
		c.Join = []string{ms[2].LocalMember().Addr}
	})
	waitAlive(t, append(ms, m4), "m1", "m2", "m3", "m4")
	t.Logf("4th member converged in %s", time.Since(start))
}

func TestMembership_SetMeta(t *testing.T) {
	t.Parallel()
	ms := startCluster(t, "m1", "m2", "m3")
	meta := ms[1].LocalMember().Meta
	meta.APIAddr = "127.0.0.1:9999"
	meta.Kinds = []string{"job", "node"}
	ch, cancel := ms[0].Subscribe()
	defer cancel()
	start := time.Now()
	if err := ms[1].SetMeta(meta); err != nil {
		t.Fatalf("SetMeta: %v", err)
	}
	for _, m := range ms {
		eventually(t, 5*time.Second, func() string {
			got, _ := findMember(m, "m2")
			if got.Meta.APIAddr != "127.0.0.1:9999" || !slices.Equal(got.Meta.Kinds, []string{"job", "node"}) {
				return fmt.Sprintf("%s sees m2 meta %+v", m.cfg.Name, got.Meta)
			}
			return ""
		})
	}
	t.Logf("meta update propagated in %s", time.Since(start))
	select {
	case <-ch:
	default:
		t.Fatal("no change notification for the meta update")
	}

	meta.Version = strings.Repeat("v", 600)
	if err := ms[1].SetMeta(meta); !errors.Is(err, ErrMetaTooLarge) {
		t.Fatalf("SetMeta(too large) = %v, want ErrMetaTooLarge", err)
	}
	if got := ms[1].LocalMember().Meta.APIAddr; got != "127.0.0.1:9999" {
		t.Fatalf("a refused SetMeta changed the meta: %q", got)
	}
	if err := ms[1].SetMeta(Meta{Name: "other"}); err == nil {
		t.Fatal("SetMeta with another name succeeded")
	}
}

func TestMembership_LeaveGracefully(t *testing.T) {
	t.Parallel()
	ms := startCluster(t, "m1", "m2", "m3")
	leaver := ms[2]
	leaverMeta := leaver.LocalMember().Meta
	start := time.Now()
	if err := leaver.Leave(2 * time.Second); err != nil {
		t.Fatalf("Leave: %v", err)
	}
	t.Logf("Leave returned after %s", time.Since(start))
	for _, m := range ms[:2] {
		eventually(t, 5*time.Second, func() string {
			d, ok := findDeparture(m, "m3")
			if !ok {
				return fmt.Sprintf("%s: m3 not departed; members %v", m.cfg.Name, memberNames(m.Members()))
			}
			if !d.Graceful || d.Meta.Version != leaverMeta.Version || d.Since.Before(start) || d.Addr != leaver.LocalMember().Addr {
				return fmt.Sprintf("%s: departure %+v, want graceful with m3's meta", m.cfg.Name, d)
			}
			if got := memberNames(m.Members()); !slices.Equal(got, []string{"m1", "m2"}) {
				return fmt.Sprintf("%s: members %v", m.cfg.Name, got)
			}
			return ""
		})
	}
	t.Logf("others saw the graceful leave after %s", time.Since(start))

	if st := leaver.LocalMember().State; st != MemberLeft {
		t.Errorf("leaver LocalMember state %s, want left", st)
	}
	if len(leaver.Left()) != 0 {
		t.Errorf("leaver lists itself as departed: %+v", leaver.Left())
	}
	if err := leaver.Leave(time.Second); err != nil {
		t.Errorf("second Leave: %v", err)
	}
	if err := leaver.SetMeta(leaverMeta); !errors.Is(err, ErrLeft) {
		t.Errorf("SetMeta after Leave = %v, want ErrLeft", err)
	}
	if err := leaver.Shutdown(); err != nil {
		t.Errorf("Shutdown after Leave: %v", err)
	}
	if err := leaver.Shutdown(); err != nil {
		t.Errorf("second Shutdown: %v", err)
	}
	if err := leaver.Leave(time.Second); !errors.Is(err, ErrShutdown) {
		t.Errorf("Leave after Shutdown = %v, want ErrShutdown", err)
	}
}

func TestMembership_FailureAndRestart(t *testing.T) {
	t.Parallel()
	ms := startCluster(t, "m1", "m2", "m3")
	oldAddr := ms[2].LocalMember().Addr
	start := time.Now()
	if err := ms[2].Shutdown(); err != nil { // no Leave: a crash
		t.Fatal(err)
	}
	for _, m := range ms[:2] {
		eventually(t, 20*time.Second, func() string {
			d, ok := findDeparture(m, "m3")
			if !ok {
				return fmt.Sprintf("%s: m3 not declared dead; members %v", m.cfg.Name, memberNames(m.Members()))
			}
			if d.Graceful {
				return fmt.Sprintf("%s: crash reported as graceful: %+v", m.cfg.Name, d)
			}
			return ""
		})
	}
	t.Logf("crash detected after %s", time.Since(start))

	// The same name comes back from a new port (DeadNodeReclaimTime).
	start = time.Now()
	again := TestMembership(t, "m3", func(c *Config) {
		c.Meta = metaFor("m3")
		c.Meta.Version = "restarted"
		c.Join = []string{ms[0].LocalMember().Addr}
	})
	if again.LocalMember().Addr == oldAddr {
		t.Fatalf("restarted on the same address %s", oldAddr)
	}
	for _, m := range ms[:2] {
		eventually(t, 15*time.Second, func() string {
			mem, ok := findMember(m, "m3")
			if !ok || mem.Addr != again.LocalMember().Addr || mem.Meta.Version != "restarted" {
				return fmt.Sprintf("%s: m3 is %+v (present %v), want the restarted one at %s", m.cfg.Name, mem, ok, again.LocalMember().Addr)
			}
			if _, departed := findDeparture(m, "m3"); departed {
				return fmt.Sprintf("%s: m3 still departed", m.cfg.Name)
			}
			return ""
		})
	}
	t.Logf("restarted member rejoined under its name after %s", time.Since(start))
}

func TestMembership_GossipKeyMismatch(t *testing.T) {
	t.Parallel()
	key1 := []byte("0123456789abcdef")
	key2 := []byte("fedcba9876543210")
	a := TestMembership(t, "a", func(c *Config) { c.GossipKey = key1 })
	b := TestMembership(t, "b", func(c *Config) { c.GossipKey = key1; c.Join = []string{a.LocalMember().Addr} })
	waitAlive(t, []*Membership{a, b}, "a", "b") // same key: they merge

	wrong := TestMembership(t, "wrong-key", func(c *Config) { c.GossipKey = key2; c.Join = []string{a.LocalMember().Addr} })
	plain := TestMembership(t, "plaintext", func(c *Config) { c.Join = []string{a.LocalMember().Addr} })
	// Wait until both outsiders tried (and failed) to join three times.
	eventually(t, 10*time.Second, func() string {
		if w, p := wrong.joinAttempts.Load(), plain.joinAttempts.Load(); w < 3 || p < 3 {
			return fmt.Sprintf("join attempts: wrong key %d, plaintext %d", w, p)
		}
		return ""
	})
	for _, m := range []*Membership{wrong, plain} {
		if got := memberNames(m.Members()); !slices.Equal(got, []string{m.cfg.Name}) {
			t.Errorf("%s merged: sees %v", m.cfg.Name, got)
		}
	}
	for _, m := range []*Membership{a, b} {
		if got := memberNames(m.Members()); !slices.Equal(got, []string{"a", "b"}) {
			t.Errorf("%s sees %v, want only a and b", m.cfg.Name, got)
		}
	}
}

// freeGossipPort returns a port that is free for both TCP and UDP on
// 127.0.0.1 right now.
func freeGossipPort(t *testing.T) int {
	t.Helper()
	for range 20 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		u, err := net.ListenPacket("udp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		_ = l.Close()
		if err == nil {
			_ = u.Close()
			return port
		}
	}
	t.Fatal("no free TCP+UDP port")
	return 0
}

func TestMembership_JoinRetry(t *testing.T) {
	t.Parallel()
	seedAddr := net.JoinHostPort("127.0.0.1", strconv.Itoa(freeGossipPort(t)))
	late := TestMembership(t, "late", func(c *Config) { c.Join = []string{seedAddr} })
	eventually(t, 5*time.Second, func() string {
		if n := late.joinAttempts.Load(); n < 2 {
			return fmt.Sprintf("%d join attempts", n)
		}
		return ""
	})
	if got := memberNames(late.Members()); !slices.Equal(got, []string{"late"}) {
		t.Fatalf("members before the seed is up: %v", got)
	}
	start := time.Now()
	seed := TestMembership(t, "seed", func(c *Config) { c.BindAddr = seedAddr })
	waitAlive(t, []*Membership{seed, late}, "late", "seed")
	t.Logf("converged %s after the seed came up (%d join attempts)", time.Since(start), late.joinAttempts.Load())
}

func TestMembership_SubscribeAndWait(t *testing.T) {
	t.Parallel()
	m := TestMembership(t, "solo", nil)
	if err := m.WaitForMembers(context.Background(), 1); err != nil {
		t.Fatalf("WaitForMembers(1): %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if err := m.WaitForMembers(ctx, 2); !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "1 of 2") {
		t.Fatalf("WaitForMembers(2) = %v, want deadline exceeded with the count", err)
	}

	ch1, cancel1 := m.Subscribe()
	ch2, cancel2 := m.Subscribe()
	cancel1()
	cancel1() // idempotent
	if _, ok := <-ch1; ok {
		t.Fatal("cancelled subscription not closed")
	}
	for range 3 { // coalesced: three changes, at most one pending value
		if err := m.SetMeta(Meta{Version: time.Now().String()}); err != nil {
			t.Fatal(err)
		}
	}
	if len(ch2) != 1 {
		t.Fatalf("pending notifications %d, want 1", len(ch2))
	}
	done := make(chan error, 1)
	go func() { done <- m.WaitForMembers(context.Background(), 5) }()
	if err := m.Shutdown(); err != nil {
		t.Fatal(err)
	}
	<-ch2 // the pending poke
	if _, ok := <-ch2; ok {
		t.Fatal("subscription not closed by Shutdown")
	}
	cancel2() // after Shutdown: no panic
	if err := <-done; !errors.Is(err, ErrShutdown) {
		t.Fatalf("WaitForMembers across Shutdown = %v, want ErrShutdown", err)
	}
	if err := m.SetMeta(Meta{}); !errors.Is(err, ErrShutdown) {
		t.Fatalf("SetMeta after Shutdown = %v", err)
	}
	if ch, _ := m.Subscribe(); ch == nil {
		t.Fatal("nil channel")
	} else if _, ok := <-ch; ok {
		t.Fatal("Subscribe after Shutdown returned an open channel")
	}
}

func TestNew_InvalidConfig(t *testing.T) {
	t.Parallel()
	if _, err := New(LocalConfig()); !errors.Is(err, ErrInvalidConfig) {
		t.Fatalf("New without name = %v", err)
	}
}

func TestTestJoin(t *testing.T) {
	t.Parallel()
	a, b := TestMembership(t, "a", nil), TestMembership(t, "b", nil)
	// c advertises a host name, resolved in New, with the bound port.
	c := TestMembership(t, "c", func(c *Config) { c.Advertise = "localhost:0" })
	TestJoin(t, a, b, c)
	if got := memberNames(c.Members()); !slices.Equal(got, []string{"a", "b", "c"}) {
		t.Fatalf("c sees %v", got)
	}
	if got, _ := findMember(a, "c"); got.Addr != c.LocalMember().Addr || !strings.HasPrefix(got.Addr, "127.0.0.1:") {
		t.Fatalf("a sees c at %q, c is at %q", got.Addr, c.LocalMember().Addr)
	}
}
