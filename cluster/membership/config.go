package membership

import (
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/memberlist"
)

// Config configures a Membership. Start from DefaultConfig (LAN timings) or
// LocalConfig (loopback, tests) and set at least Name; New calls Validate.
// A Config must not be modified after it was passed to New.
type Config struct {
	// Name is this manager's unique, stable name (memberlist node name).
	// Required. A manager restarted with the same name from a new address
	// replaces its old incarnation once that one is dead for
	// DeadNodeReclaimTime.
	Name string

	// BindAddr is the gossip listen address "host:port" (UDP and TCP on the
	// same port). Port 0 picks a free port; the chosen one is in
	// LocalMember().Addr. Host "" or "0.0.0.0" listens on all interfaces.
	BindAddr string

	// Advertise is the address other managers use to reach this one: "host"
	// or "host:port" (a host name is resolved once, in New; a port other
	// than 0 needs a fixed BindAddr port, e.g. behind NAT; port 0 means the
	// bound port). Empty means the
	// bind host with the bound port; if the bind host is unspecified
	// (0.0.0.0) memberlist picks a private IP of this machine and fails if
	// there is none.
	Advertise string

	// Join lists gossip addresses ("host:port", or "host" for BindAddr's
	// port) of other managers. New returns at once; a background loop
	// retries them with backoff (JoinRetryMin doubling up to JoinRetryMax)
	// until another manager has accepted this one at its current address
	// (answered seeds are retried every JoinRetryMin until then), and
	// afterwards re-joins
	// seeds that are not members every RejoinInterval, so that a partition
	// that outlived memberlist's GossipToTheDeadTime heals. Listing this
	// manager's own address is harmless. Empty: wait to be joined.
	Join []string

	// GossipKey enables gossip encryption (AES-GCM, memberlist SecretKey)
	// when non-nil; it must be 16, 24 or 32 bytes and the same on every
	// manager. Managers with different keys (or one without) cannot merge.
	GossipKey []byte

	// Label is an optional cluster label carried on every gossip packet
	// (memberlist Label, at most 255 bytes): managers with different labels
	// ignore each other. Useful to keep clusters on a shared network apart.
	Label string

	// Meta is advertised to the other managers (encoded, at most 512 bytes).
	// Meta.Name may be empty (it is set to Name) but must otherwise equal
	// Name. Change it later with Membership.SetMeta.
	Meta Meta

	// ProbeInterval is the failure-detector probe period; ProbeTimeout the
	// time to wait for a direct ack (should be about the network's p99 RTT).
	ProbeInterval time.Duration
	ProbeTimeout  time.Duration

	// SuspicionMult scales the time a suspect node has to refute before it
	// is declared dead: SuspicionTimeout = SuspicionMult * max(1, log10(N))
	// * ProbeInterval, lowered from up to 6x that value as other members
	// confirm the suspicion.
	SuspicionMult int

	// IndirectChecks is the number of members asked to probe a node that
	// failed a direct probe (0 disables indirect probes).
	IndirectChecks int

	// RetransmitMult: a broadcast is retransmitted RetransmitMult *
	// ceil(log10(N+1)) times.
	RetransmitMult int

	// GossipInterval is the gossip period; GossipToTheDeadTime how long
	// dead nodes still receive gossip (so they can refute).
	GossipInterval      time.Duration
	GossipToTheDeadTime time.Duration

	// PushPullInterval is the period of full state syncs with a random
	// member.
	PushPullInterval time.Duration

	// TCPTimeout bounds one TCP exchange (join, push/pull, fallback probe).
	TCPTimeout time.Duration

	// DeadNodeReclaimTime is how long a dead node's name stays reserved for
	// its old address; after it, the same name may rejoin from another
	// address or port (a restarted manager). A node that left gracefully can
	// be reclaimed at once. Must be > 0.
	DeadNodeReclaimTime time.Duration

	// JoinRetryMin and JoinRetryMax bound the join loop's backoff.
	JoinRetryMin time.Duration
	JoinRetryMax time.Duration

	// RejoinInterval is how often, once joined, seeds that are not current
	// members are joined again. 0 disables re-joining.
	RejoinInterval time.Duration

	// BroadcastTimeout bounds how long SetMeta waits for memberlist to
	// broadcast the new meta.
	BroadcastTimeout time.Duration

	// DeferJoin makes New only create the memberlist (listening on
	// BindAddr) without joining Join: the caller starts the join loop with
	// StartJoin once everything else it serves is listening, so a manager
	// that cannot start never appears to the others.
	DeferJoin bool

	// Logger receives this package's logs (with "local"=Name) and
	// memberlist's (with "lib"="memberlist"; its [DEBUG]/[INFO]/[WARN]/[ERR]
	// map to the slog levels). Nil discards.
	Logger *slog.Logger
}

// DefaultConfig returns a Config with memberlist.DefaultLANConfig timings,
// binding 0.0.0.0:7946. Name must still be set.
func DefaultConfig() Config {
	lan := memberlist.DefaultLANConfig()
	cfg := fromProfile(lan)
	cfg.BindAddr = net.JoinHostPort("0.0.0.0", strconv.Itoa(lan.BindPort))
	cfg.DeadNodeReclaimTime = 10 * time.Second
	cfg.JoinRetryMin = time.Second
	cfg.JoinRetryMax = 30 * time.Second
	cfg.RejoinInterval = 30 * time.Second
	cfg.BroadcastTimeout = 5 * time.Second
	return cfg
}

// LocalConfig returns a Config with memberlist.DefaultLocalConfig timings
// (probe every 1 s, 200 ms probe timeout, suspicion multiplier 3), binding
// 127.0.0.1 on a free port, and short join, reclaim and broadcast timings:
// for loopback clusters, --dev and tests. Name must still be set.
//
// RetransmitMult is the LAN value 4, not the local profile's 2: with 2, a
// broadcast in a 4-member cluster reaches only two of the three others per
// sender, and a member that all senders skip learns the news only at the
// next push/pull (15 s).
func LocalConfig() Config {
	cfg := fromProfile(memberlist.DefaultLocalConfig())
	cfg.RetransmitMult = memberlist.DefaultLANConfig().RetransmitMult
	cfg.BindAddr = "127.0.0.1:0"
	cfg.DeadNodeReclaimTime = time.Second
	cfg.JoinRetryMin = 100 * time.Millisecond
	cfg.JoinRetryMax = 2 * time.Second
	cfg.RejoinInterval = 5 * time.Second
	cfg.BroadcastTimeout = 2 * time.Second
	return cfg
}

func fromProfile(p *memberlist.Config) Config {
	return Config{
		ProbeInterval:       p.ProbeInterval,
		ProbeTimeout:        p.ProbeTimeout,
		SuspicionMult:       p.SuspicionMult,
		IndirectChecks:      p.IndirectChecks,
		RetransmitMult:      p.RetransmitMult,
		GossipInterval:      p.GossipInterval,
		GossipToTheDeadTime: p.GossipToTheDeadTime,
		PushPullInterval:    p.PushPullInterval,
		TCPTimeout:          p.TCPTimeout,
	}
}

// Validate reports the first invalid field as an error wrapping
// ErrInvalidConfig and naming the field. It does not touch the network.
func (c *Config) Validate() error {
	if c.Name == "" {
		return invalid("Name is required")
	}
	if _, _, err := splitBind(c.BindAddr); err != nil {
		return invalid("BindAddr %q: %v", c.BindAddr, err)
	}
	if c.Advertise != "" {
		_, advPort, err := splitAdvertise(c.Advertise)
		if err != nil {
			return invalid("Advertise %q: %v", c.Advertise, err)
		}
		if _, bindPort, _ := splitBind(c.BindAddr); advPort != 0 && bindPort == 0 {
			// memberlist replaces the advertised port with the picked one.
			return invalid("Advertise %q has a port but BindAddr %q picks one: set a BindAddr port", c.Advertise, c.BindAddr)
		}
	}
	for i, j := range c.Join {
		if j == "" {
			return invalid("Join[%d] is empty", i)
		}
	}
	switch len(c.GossipKey) {
	case 0, 16, 24, 32:
	default:
		return invalid("GossipKey must be 16, 24 or 32 bytes, got %d", len(c.GossipKey))
	}
	if len(c.Label) > memberlist.LabelMaxSize {
		return invalid("Label must be at most %d bytes, got %d", memberlist.LabelMaxSize, len(c.Label))
	}
	if c.Meta.Name != "" && c.Meta.Name != c.Name {
		return invalid("Meta.Name %q differs from Name %q", c.Meta.Name, c.Name)
	}
	meta := c.Meta
	meta.Name = c.Name
	if _, err := encodeMeta(meta, false); err != nil {
		return invalid("Meta: %v", err)
	}
	return c.validateTimings()
}

func (c *Config) validateTimings() error {
	positive := []struct {
		name string
		d    time.Duration
	}{
		{"ProbeInterval", c.ProbeInterval},
		{"ProbeTimeout", c.ProbeTimeout},
		{"GossipInterval", c.GossipInterval},
		{"GossipToTheDeadTime", c.GossipToTheDeadTime},
		{"PushPullInterval", c.PushPullInterval},
		{"TCPTimeout", c.TCPTimeout},
		{"DeadNodeReclaimTime", c.DeadNodeReclaimTime},
		{"JoinRetryMin", c.JoinRetryMin},
		{"JoinRetryMax", c.JoinRetryMax},
		{"BroadcastTimeout", c.BroadcastTimeout},
	}
	for _, p := range positive {
		if p.d <= 0 {
			return invalid("%s must be > 0, got %s", p.name, p.d)
		}
	}
	if c.ProbeTimeout > c.ProbeInterval {
		return invalid("ProbeTimeout (%s) cannot be larger than ProbeInterval (%s)", c.ProbeTimeout, c.ProbeInterval)
	}
	if c.JoinRetryMin > c.JoinRetryMax {
		return invalid("JoinRetryMin (%s) cannot be larger than JoinRetryMax (%s)", c.JoinRetryMin, c.JoinRetryMax)
	}
	if c.RejoinInterval < 0 {
		return invalid("RejoinInterval must be >= 0, got %s", c.RejoinInterval)
	}
	if c.SuspicionMult < 1 {
		return invalid("SuspicionMult must be >= 1, got %d", c.SuspicionMult)
	}
	if c.RetransmitMult < 1 {
		return invalid("RetransmitMult must be >= 1, got %d", c.RetransmitMult)
	}
	if c.IndirectChecks < 0 {
		return invalid("IndirectChecks must be >= 0, got %d", c.IndirectChecks)
	}
	return nil
}

func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalidConfig, fmt.Sprintf(format, args...))
}

// splitBind parses "host:port" with port 0..65535.
func splitBind(addr string) (string, int, error) {
	host, portStr, err := net.SplitHostPort(addr)
	if err != nil {
		return "", 0, err
	}
	port, err := strconv.ParseUint(portStr, 10, 16)
	if err != nil {
		return "", 0, fmt.Errorf("bad port %q", portStr)
	}
	return host, int(port), nil
}

// splitAdvertise parses "host" or "host:port" (port 0 = the bound port).
func splitAdvertise(addr string) (string, int, error) {
	host, portStr, err := net.SplitHostPort(addr)
	if err != nil {
		// No port: a bare host or IP (IPv6 possibly without brackets).
		if net.ParseIP(addr) != nil || !strings.Contains(addr, ":") {
			return addr, 0, nil
		}
		return "", 0, err
	}
	port, err := strconv.ParseUint(portStr, 10, 16)
	if err != nil {
		return "", 0, fmt.Errorf("bad port %q", portStr)
	}
	if host == "" {
		return "", 0, fmt.Errorf("empty host")
	}
	return host, int(port), nil
}
