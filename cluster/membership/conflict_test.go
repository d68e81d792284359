package membership

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
	"time"
)

// TestNameConflict: a second manager started with the name of a live one
// learns, on joining, that its name is taken at another address.
func TestNameConflict(t *testing.T) {
	ms := startCluster(t, "m1", "m2")
	imp := TestMembership(t, "m1", func(c *Config) {
		c.Meta = Meta{RaftAddr: "127.0.0.1:9999"}
		c.Join = []string{ms[1].LocalMember().Addr}
	})
	select {
	case nc := <-imp.NameConflicts():
		if nc.Name != "m1" || nc.Theirs != ms[0].LocalMember().Addr || nc.Mine != imp.LocalMember().Addr {
			t.Errorf("conflict %+v: want m1 theirs %s mine %s", nc, ms[0].LocalMember().Addr, imp.LocalMember().Addr)
		}
		if nc.TheirMeta.RaftAddr != metaFor("m1").RaftAddr {
			t.Errorf("their meta %+v", nc.TheirMeta)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no name conflict reported to the second m1")
	}
}

// TestDeferJoin: with DeferJoin nobody learns of the member until
// StartJoin.
func TestDeferJoin(t *testing.T) {
	ms := startCluster(t, "m1")
	m2 := TestMembership(t, "m2", func(c *Config) {
		c.Join = []string{ms[0].LocalMember().Addr}
		c.DeferJoin = true
	})
	// The join loop has not run: no attempt was made.
	if n := m2.joinAttempts.Load(); n != 0 {
		t.Fatalf("%d join attempts before StartJoin", n)
	}
	if got := memberNames(ms[0].Members()); len(got) != 1 {
		t.Fatalf("m1 sees %v before m2's StartJoin", got)
	}
	m2.StartJoin()
	m2.StartJoin() // idempotent
	waitAlive(t, []*Membership{ms[0], m2}, "m1", "m2")
}

// TestDeferJoinNeverStarted: Leave and Shutdown of a member whose join
// loop never started return promptly.
func TestDeferJoinNeverStarted(t *testing.T) {
	m := TestMembership(t, "m1", func(c *Config) { c.DeferJoin = true; c.Join = []string{"127.0.0.1:1"} })
	start := time.Now()
	if err := m.Leave(4 * time.Second); err != nil {
		t.Fatal(err)
	}
	if err := m.Shutdown(); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("Leave+Shutdown took %s", d)
	}
}

// TestGossipKeyHint: memberlist's lines about mismatched encryption get a
// hint naming --gossip-key and NORSK_GOSSIP_KEY.
func TestGossipKeyHint(t *testing.T) {
	var buf bytes.Buffer
	l := newStdLogger(slog.New(slog.NewTextHandler(&buf, nil)))
	l.Print("[ERR] memberlist: Failed to read remote state: encryption is configured but remote state is not encrypted from=127.0.0.1:1234")
	l.Print("[ERR] memberlist: Push/Pull with m2 failed: remote state is encrypted and encryption is not configured")
	l.Print("[INFO] memberlist: something else")
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 3 {
		t.Fatalf("lines: %q", lines)
	}
	for _, line := range lines[:2] {
		if !strings.Contains(line, "--gossip-key") || !strings.Contains(line, "NORSK_GOSSIP_KEY") {
			t.Errorf("no hint in %q", line)
		}
	}
	if strings.Contains(lines[2], "hint") {
		t.Errorf("hint on an unrelated line: %q", lines[2])
	}
}
