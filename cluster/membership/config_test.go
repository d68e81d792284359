package membership

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestConfig_Validate(t *testing.T) {
	t.Parallel()
	base := LocalConfig()
	base.Name = "m1"
	cases := []struct {
		name   string
		mutate func(*Config)
		field  string // "" = valid
	}{
		{"local ok", func(*Config) {}, ""},
		{"default ok", func(c *Config) { *c = DefaultConfig(); c.Name = "m1" }, ""},
		{"advertise host", func(c *Config) { c.Advertise = "127.0.0.2" }, ""},
		{"advertise host port", func(c *Config) { c.BindAddr = "127.0.0.1:7946"; c.Advertise = "127.0.0.2:7000" }, ""},
		{"advertise port with port 0", func(c *Config) { c.Advertise = "127.0.0.2:7000" }, "Advertise"},
		{"key 32", func(c *Config) { c.GossipKey = make([]byte, 32) }, ""},
		{"no name", func(c *Config) { c.Name = "" }, "Name"},
		{"bad bind", func(c *Config) { c.BindAddr = "127.0.0.1" }, "BindAddr"},
		{"bad bind port", func(c *Config) { c.BindAddr = "127.0.0.1:70000" }, "BindAddr"},
		{"bad advertise port", func(c *Config) { c.Advertise = "h:70000" }, "Advertise"},
		{"advertise port 0", func(c *Config) { c.Advertise = "127.0.0.2:0" }, ""},
		{"empty join", func(c *Config) { c.Join = []string{"127.0.0.1:1", ""} }, "Join[1]"},
		{"key 10", func(c *Config) { c.GossipKey = make([]byte, 10) }, "GossipKey"},
		{"label", func(c *Config) { c.Label = strings.Repeat("x", 256) }, "Label"},
		{"meta name", func(c *Config) { c.Meta.Name = "other" }, "Meta.Name"},
		{"meta size", func(c *Config) { c.Meta.Version = strings.Repeat("v", 600) }, "Meta"},
		{"probe", func(c *Config) { c.ProbeInterval = 0 }, "ProbeInterval"},
		{"probe timeout", func(c *Config) { c.ProbeTimeout = 2 * c.ProbeInterval }, "ProbeTimeout"},
		{"reclaim", func(c *Config) { c.DeadNodeReclaimTime = 0 }, "DeadNodeReclaimTime"},
		{"join backoff", func(c *Config) { c.JoinRetryMin = time.Hour }, "JoinRetryMin"},
		{"rejoin", func(c *Config) { c.RejoinInterval = -1 }, "RejoinInterval"},
		{"suspicion", func(c *Config) { c.SuspicionMult = 0 }, "SuspicionMult"},
		{"retransmit", func(c *Config) { c.RetransmitMult = 0 }, "RetransmitMult"},
		{"indirect", func(c *Config) { c.IndirectChecks = -1 }, "IndirectChecks"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg := base
			tc.mutate(&cfg)
			err := cfg.Validate()
			if tc.field == "" {
				if err != nil {
					t.Fatalf("Validate: %v", err)
				}
				return
			}
			if !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), tc.field) {
				t.Fatalf("Validate = %v, want ErrInvalidConfig naming %s", err, tc.field)
			}
		})
	}
}

func TestConfig_Profiles(t *testing.T) {
	t.Parallel()
	d, l := DefaultConfig(), LocalConfig()
	if d.ProbeTimeout != 500*time.Millisecond || d.SuspicionMult != 4 || d.BindAddr != "0.0.0.0:7946" {
		t.Fatalf("DefaultConfig not LAN: %+v", d)
	}
	if l.ProbeTimeout != 200*time.Millisecond || l.SuspicionMult != 3 || l.BindAddr != "127.0.0.1:0" {
		t.Fatalf("LocalConfig not local: %+v", l)
	}
}

func TestMeta_Encode(t *testing.T) {
	t.Parallel()
	in := Meta{Name: "m1", APIAddr: "127.0.0.1:8080", RaftAddr: "127.0.0.1:8300", ActorHost: "127.0.0.1",
		ActorPort: 9000, ActorID: "abcdefghijklmnopqrstuv", Kinds: []string{"job", "node", "prototopic"}, Version: "v1.2.3"}
	buf, err := encodeMeta(in, false)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("encoded %d bytes: %s", len(buf), buf)
	out, leaving, err := decodeMeta(buf)
	if err != nil || leaving {
		t.Fatalf("decode: %v leaving=%v", err, leaving)
	}
	if out.Name != in.Name || out.ActorPort != in.ActorPort || out.ActorID != in.ActorID || len(out.Kinds) != 3 || out.Version != in.Version {
		t.Fatalf("round trip: got %+v want %+v", out, in)
	}
	if _, leaving, _ := decodeMeta(mustEncode(t, in, true)); !leaving {
		t.Fatal("leaving flag lost")
	}

	big := in
	big.Kinds = nil
	for i := 0; i < 60; i++ {
		big.Kinds = append(big.Kinds, "kind-number-"+strings.Repeat("x", i%5))
	}
	_, err = checkedEncode(big)
	if !errors.Is(err, ErrMetaTooLarge) || !strings.Contains(err.Error(), "limit 512") {
		t.Fatalf("encode big = %v, want ErrMetaTooLarge with the limit", err)
	}
	if _, _, err := decodeMeta([]byte("{")); err == nil {
		t.Fatal("decode of garbage succeeded")
	}
}

func mustEncode(t *testing.T, m Meta, leaving bool) []byte {
	t.Helper()
	buf, err := encodeMeta(m, leaving)
	if err != nil {
		t.Fatal(err)
	}
	return buf
}

func TestSlogWriter_Levels(t *testing.T) {
	t.Parallel()
	var rec recordHandler
	l := newStdLogger(slogNew(&rec))
	l.Printf("[DEBUG] memberlist: stream connection from=1")
	l.Printf("[INFO] memberlist: Suspect b has failed")
	l.Printf("[WARN] memberlist: Refuting a suspect message")
	l.Printf("[ERR] memberlist: Failed to send")
	l.Printf("no prefix")
	want := []string{"DEBUG stream connection from=1", "INFO Suspect b has failed", "WARN Refuting a suspect message", "ERROR Failed to send", "INFO no prefix"}
	if got := rec.lines(); strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("got %q, want %q", got, want)
	}
}
