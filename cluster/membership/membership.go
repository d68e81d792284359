package membership

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/memberlist"
)

// MemberState is what this manager knows about another manager.
type MemberState int

const (
	// MemberAlive: the member answers (memberlist alive or suspect; v0.7.0
	// does not expose suspicion, so a suspect member is reported alive
	// until it is declared dead).
	MemberAlive MemberState = iota
	// MemberLeaving: the member announced a graceful leave and is about to
	// go; it still answers.
	MemberLeaving
	// MemberLeft: the member left gracefully (Leave).
	MemberLeft
	// MemberFailed: the member was declared dead by the failure detector.
	MemberFailed
)

// String returns "alive", "leaving", "left" or "failed".
func (s MemberState) String() string {
	switch s {
	case MemberAlive:
		return "alive"
	case MemberLeaving:
		return "leaving"
	case MemberLeft:
		return "left"
	case MemberFailed:
		return "failed"
	default:
		return "MemberState(" + strconv.Itoa(int(s)) + ")"
	}
}

// Member is one manager in the current view.
type Member struct {
	// Name is the manager's unique name.
	Name string
	// Addr is its gossip address "ip:port".
	Addr string
	// Meta is what it advertises (a copy: the caller may modify it).
	Meta Meta
	// State is MemberAlive or MemberLeaving in Members; LocalMember also
	// reports MemberLeft after Leave.
	State MemberState
}

// Departure records a manager that is no longer a member.
type Departure struct {
	// Name is the manager's name.
	Name string
	// Addr is its last gossip address "ip:port".
	Addr string
	// Meta is the last meta it advertised.
	Meta Meta
	// Graceful is true if it left with Leave (memberlist StateLeft, after
	// announcing it was leaving), false if it was declared dead. A member
	// whose leave announcement did not reach this manager before the leave
	// itself is reported as failed: callers should treat false as "maybe
	// failed" (e.g. wait a dead-server timeout), never the reverse.
	Graceful bool
	// Since is when this manager learned of the departure (local clock).
	Since time.Time
}

// Membership is this manager's view of the manager cluster, kept by
// hashicorp/memberlist. Create it with New and stop it with Shutdown
// (optionally after Leave). All methods are safe for concurrent use.
type Membership struct {
	cfg       Config
	logger    *slog.Logger
	ml        *memberlist.Memberlist // set in New, never nil afterwards
	localAddr string                 // gossip "ip:port" others use for us

	// loopCtx is cancelled by Leave and Shutdown; it stops the join loop.
	loopCtx    context.Context
	loopCancel context.CancelFunc
	joinDone   chan struct{} // closed when the join loop returned (or will never run)
	joinOnce   sync.Once
	conflicts  chan NameConflict
	wg         sync.WaitGroup

	// lifeMu serialises the calls that change our own memberlist state:
	// SetMeta's UpdateNode, Leave and Shutdown (memberlist panics on Leave
	// after Shutdown, and an UpdateNode after Leave would revive us).
	lifeMu sync.Mutex

	// mu guards the view. It is taken inside memberlist's callbacks (which
	// run with memberlist's nodeLock held), so memberlist must never be
	// called while mu is held.
	mu struct {
		sync.Mutex
		meta     Meta   // local meta
		encoded  []byte // local meta as advertised (replaced, never mutated)
		leaving  bool   // Leave started
		left     bool   // memberlist Leave called
		shutdown bool
		members  map[string]Member    // alive and leaving, by name, incl. us
		departed map[string]Departure // left or failed, by name
		subs     map[uint64]chan struct{}
		// lastConflict is the address of the last NameConflict sent.
		lastConflict string
		nextSub      uint64
	}

	// accepted is set once another member has accepted this node at its
	// current address (see acceptance); it ends the join loop's retries.
	accepted atomic.Bool
	// joinAttempts counts ml.Join calls of the join loop (tests).
	joinAttempts atomic.Int64
}

// New validates cfg, creates the memberlist (listening on cfg.BindAddr) and
// starts the background join loop over cfg.Join. It never waits for a
// join: use WaitForMembers for that. Errors: a wrapped ErrInvalidConfig, or
// memberlist's error when it cannot listen or resolve Advertise.
func New(cfg Config) (*Membership, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.Join = slices.Clone(cfg.Join)
	cfg.GossipKey = slices.Clone(cfg.GossipKey)
	m := &Membership{cfg: cfg, logger: cfg.Logger, joinDone: make(chan struct{}), conflicts: make(chan NameConflict, 8)}
	if m.logger == nil {
		m.logger = discardLogger()
	}
	m.logger = m.logger.With("local", cfg.Name) // the caller names the component
	m.mu.meta = cfg.Meta.Clone()
	m.mu.meta.Name = cfg.Name
	enc, err := checkedEncode(m.mu.meta)
	if err != nil {
		return nil, err
	}
	m.mu.encoded = enc
	m.mu.members = make(map[string]Member)
	m.mu.departed = make(map[string]Departure)
	m.mu.subs = make(map[uint64]chan struct{})

	mlc, err := m.memberlistConfig()
	if err != nil {
		return nil, err
	}
	ml, err := memberlist.Create(mlc)
	if err != nil {
		return nil, fmt.Errorf("membership: create memberlist on %s: %w", cfg.BindAddr, err)
	}
	m.ml = ml
	local := ml.LocalNode() // read before anyone knows us: no concurrent writer
	m.localAddr = net.JoinHostPort(local.Addr.String(), strconv.Itoa(int(local.Port)))
	m.logger.Info("gossip started", "addr", m.localAddr, "bind", net.JoinHostPort(mlc.BindAddr, strconv.Itoa(mlc.BindPort)),
		"encrypted", len(cfg.GossipKey) > 0, "seeds", cfg.Join)

	m.loopCtx, m.loopCancel = context.WithCancel(context.Background())
	if !cfg.DeferJoin {
		m.StartJoin()
	}
	return m, nil
}

// StartJoin starts the background join loop over Config.Join (New does
// so itself unless Config.DeferJoin is set). Idempotent; a no-op after
// Leave or Shutdown.
func (m *Membership) StartJoin() {
	m.joinOnce.Do(func() {
		m.mu.Lock()
		stopped := m.mu.shutdown || m.mu.leaving
		if !stopped {
			m.wg.Add(1)
		}
		m.mu.Unlock()
		if stopped {
			close(m.joinDone)
			return
		}
		go func() {
			defer m.wg.Done()
			defer close(m.joinDone)
			m.joinLoop(m.loopCtx)
		}()
	})
}

// NameConflicts returns a channel that receives a NameConflict each time
// memberlist refuses another node that claims this manager's name from a
// different address (memberlist's "Conflicting address"). Sends never
// block: conflicts beyond the channel's capacity (8) are dropped, as are
// repeats of the last one reported. Never closed.
func (m *Membership) NameConflicts() <-chan NameConflict { return m.conflicts }

// memberlistConfig builds memberlist's Config from m.cfg.
func (m *Membership) memberlistConfig() (*memberlist.Config, error) {
	c := memberlist.DefaultLANConfig()
	cfg := &m.cfg
	c.Name = cfg.Name
	host, port, _ := splitBind(cfg.BindAddr) // validated
	if host == "" {
		host = "0.0.0.0"
	}
	c.BindAddr, c.BindPort = host, port
	c.AdvertiseAddr, c.AdvertisePort = "", 0
	advHost, advPort := host, 0
	if cfg.Advertise != "" {
		advHost, advPort, _ = splitAdvertise(cfg.Advertise) // validated
	}
	if ip := net.ParseIP(advHost); ip == nil || !ip.IsUnspecified() {
		ip, err := resolveIP(advHost)
		if err != nil {
			return nil, fmt.Errorf("membership: resolve Advertise host %q: %w", advHost, err)
		}
		c.AdvertiseAddr, c.AdvertisePort = ip.String(), advPort
		if advPort == 0 {
			c.AdvertisePort = port // 0 is replaced with the bound port by memberlist
		}
	}
	if len(cfg.GossipKey) > 0 {
		c.SecretKey = cfg.GossipKey
	}
	c.Label = cfg.Label
	c.ProbeInterval, c.ProbeTimeout = cfg.ProbeInterval, cfg.ProbeTimeout
	c.SuspicionMult, c.IndirectChecks, c.RetransmitMult = cfg.SuspicionMult, cfg.IndirectChecks, cfg.RetransmitMult
	c.GossipInterval, c.GossipToTheDeadTime = cfg.GossipInterval, cfg.GossipToTheDeadTime
	c.PushPullInterval, c.TCPTimeout = cfg.PushPullInterval, cfg.TCPTimeout
	c.DeadNodeReclaimTime = cfg.DeadNodeReclaimTime
	c.Delegate = delegate{m}
	c.Events = events{m}
	c.Ping = acceptance{m}
	c.Merge = acceptance{m}
	c.Conflict = conflicts{m}
	c.LogOutput = nil
	c.Logger = newStdLogger(m.logger.With("lib", "memberlist"))
	return c, nil
}

func resolveIP(host string) (net.IP, error) {
	if ip := net.ParseIP(host); ip != nil {
		return ip, nil
	}
	ips, err := net.DefaultResolver.LookupIP(context.Background(), "ip", host)
	if err != nil {
		return nil, err
	}
	for _, ip := range ips {
		if ip.To4() != nil {
			return ip, nil
		}
	}
	if len(ips) == 0 {
		return nil, fmt.Errorf("no address for %q", host)
	}
	return ips[0], nil
}

// Members returns the managers in the current view, this one included:
// alive (or suspect) and leaving ones, sorted by name; filter on State ==
// MemberAlive to skip a manager that announced its leave. The result is a
// copy. It never calls into memberlist, so it may be called from anywhere,
// including a Subscribe receiver.
func (m *Membership) Members() []Member {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]Member, 0, len(m.mu.members))
	for _, mem := range m.mu.members {
		mem.Meta = mem.Meta.Clone()
		out = append(out, mem)
	}
	slices.SortFunc(out, func(a, b Member) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// LocalMember returns this manager as the others see it: its gossip
// address, its current meta and MemberAlive, MemberLeaving or MemberLeft.
func (m *Membership) LocalMember() Member {
	m.mu.Lock()
	defer m.mu.Unlock()
	state := MemberAlive
	switch {
	case m.mu.left:
		state = MemberLeft
	case m.mu.leaving:
		state = MemberLeaving
	}
	return Member{Name: m.cfg.Name, Addr: m.localAddr, Meta: m.mu.meta.Clone(), State: state}
}

// Left returns the managers that left or failed and have not come back
// (a manager that rejoins under the same name is removed from this list),
// sorted by name. This manager itself is never listed.
func (m *Membership) Left() []Departure {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]Departure, 0, len(m.mu.departed))
	for _, d := range m.mu.departed {
		d.Meta = d.Meta.Clone()
		out = append(out, d)
	}
	slices.SortFunc(out, func(a, b Departure) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// WaitForMembers blocks until at least n members (this one included) are
// MemberAlive, for --bootstrap-expect. It returns nil then, ErrShutdown if
// the Membership is shut down first, or ctx's error wrapped with the count
// reached.
func (m *Membership) WaitForMembers(ctx context.Context, n int) error {
	ch, cancel := m.Subscribe()
	defer cancel()
	for {
		have := m.countAlive()
		if have >= n {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("membership: %d of %d members alive: %w", have, n, ctx.Err())
		case _, ok := <-ch:
			if !ok {
				return ErrShutdown
			}
		}
	}
}

func (m *Membership) countAlive() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := 0
	for _, mem := range m.mu.members {
		if mem.State == MemberAlive {
			n++
		}
	}
	return n
}

// Subscribe returns a channel (capacity 1) that receives a value after
// every change to Members or Left: joins, leaves, failures, meta updates.
// Changes are coalesced: one receive may stand for many, so the receiver
// re-reads Members/Left. Sends never block memberlist. The channel is
// closed by cancel (idempotent) and by Shutdown; a receiver must stop on a
// closed channel.
func (m *Membership) Subscribe() (<-chan struct{}, func()) {
	ch := make(chan struct{}, 1)
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.mu.shutdown {
		close(ch)
		return ch, func() {}
	}
	id := m.mu.nextSub
	m.mu.nextSub++
	m.mu.subs[id] = ch
	return ch, func() {
		m.mu.Lock()
		defer m.mu.Unlock()
		if c, ok := m.mu.subs[id]; ok {
			delete(m.mu.subs, id)
			close(c)
		}
	}
}

// notifyLocked pokes every subscriber without blocking. Caller holds mu.
func (m *Membership) notifyLocked() {
	for _, ch := range m.mu.subs {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}

// SetMeta replaces this manager's meta and broadcasts it, waiting up to
// Config.BroadcastTimeout. meta.Name may be empty (it is set to
// Config.Name). Errors: a wrapped ErrMetaTooLarge (nothing changed), ErrLeft
// after Leave, ErrShutdown, or a wrapped ErrBroadcastTimeout (the new meta
// is in effect and still spreads).
func (m *Membership) SetMeta(meta Meta) error {
	if meta.Name == "" {
		meta.Name = m.cfg.Name
	}
	if meta.Name != m.cfg.Name {
		return fmt.Errorf("membership: SetMeta: Meta.Name %q differs from Config.Name %q", meta.Name, m.cfg.Name)
	}
	meta = meta.Clone()
	enc, err := checkedEncode(meta)
	if err != nil {
		return err
	}
	m.lifeMu.Lock()
	defer m.lifeMu.Unlock()
	m.mu.Lock()
	switch {
	case m.mu.shutdown:
		m.mu.Unlock()
		return ErrShutdown
	case m.mu.leaving:
		m.mu.Unlock()
		return ErrLeft
	}
	m.mu.meta, m.mu.encoded = meta, enc
	m.mu.Unlock()
	if err := m.ml.UpdateNode(m.cfg.BroadcastTimeout); err != nil {
		return fmt.Errorf("%w: meta update: %v", ErrBroadcastTimeout, err)
	}
	return nil
}

// checkedEncode encodes meta for advertising after checking that it also
// fits with the leaving flag Leave adds, so Leave can never fail on size.
func checkedEncode(meta Meta) ([]byte, error) {
	if _, err := encodeMeta(meta, true); err != nil {
		return nil, err
	}
	return encodeMeta(meta, false)
}

// Leave leaves the cluster gracefully: it stops the join loop, announces
// that this manager is leaving (so the others record Graceful=true), then
// broadcasts memberlist's leave, waiting up to timeout in total. The
// Membership keeps running (call Shutdown next); SetMeta fails with ErrLeft
// from now on. Leave is idempotent. Errors: ErrShutdown after Shutdown, a
// wrapped ErrBroadcastTimeout if a broadcast did not finish in time (the
// leave is still in effect and spreads).
func (m *Membership) Leave(timeout time.Duration) error {
	m.lifeMu.Lock()
	defer m.lifeMu.Unlock()
	deadline := time.Now().Add(timeout)
	m.mu.Lock()
	switch {
	case m.mu.shutdown:
		m.mu.Unlock()
		return ErrShutdown
	case m.mu.leaving:
		m.mu.Unlock()
		return nil
	}
	m.mu.leaving = true
	enc, err := encodeMeta(m.mu.meta, true)
	if err == nil { // cannot fail: checkedEncode admitted this meta
		m.mu.encoded = enc
	}
	m.mu.Unlock()

	m.loopCancel()
	m.joinOnce.Do(func() { close(m.joinDone) }) // the join loop never started
	m.waitJoinLoop(time.Until(deadline) / 4)
	var errs []error
	if err := m.ml.UpdateNode(time.Until(deadline) / 2); err != nil {
		errs = append(errs, fmt.Errorf("%w: leaving announcement: %v", ErrBroadcastTimeout, err))
	}
	m.mu.Lock()
	m.mu.left = true
	m.notifyLocked()
	m.mu.Unlock()
	if err := m.ml.Leave(max(time.Until(deadline), time.Millisecond)); err != nil {
		errs = append(errs, fmt.Errorf("%w: leave: %v", ErrBroadcastTimeout, err))
	}
	m.logger.Info("left the cluster", "errors", len(errs))
	if len(errs) > 0 {
		return errs[0]
	}
	return nil
}

// waitJoinLoop waits up to d for the (cancelled) join loop to return, so
// that no join merges remote state after we left.
func (m *Membership) waitJoinLoop(d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-m.joinDone:
	case <-t.C:
	}
}

// Shutdown stops gossip at once, without announcing a leave (the others
// see this manager fail unless Leave was called before), stops the join
// loop, waits for it and closes every Subscribe channel. It is idempotent
// and safe after Leave; Leave after Shutdown returns ErrShutdown.
func (m *Membership) Shutdown() error {
	m.lifeMu.Lock()
	defer m.lifeMu.Unlock()
	m.mu.Lock()
	if m.mu.shutdown {
		m.mu.Unlock()
		return nil
	}
	m.mu.shutdown = true
	subs := m.mu.subs
	m.mu.subs = map[uint64]chan struct{}{}
	m.mu.Unlock()

	m.loopCancel()
	m.joinOnce.Do(func() { close(m.joinDone) }) // the join loop never started
	err := m.ml.Shutdown()
	m.wg.Wait()
	for _, ch := range subs {
		close(ch)
	}
	m.logger.Info("gossip stopped")
	if err != nil {
		return fmt.Errorf("membership: shutdown memberlist: %w", err)
	}
	return nil
}
