package membership

import (
	"net"
	"strconv"
	"time"

	"github.com/hashicorp/memberlist"
)

// delegate implements memberlist.Delegate: it only serves our node meta.
// memberlist calls it from its own goroutines; NodeMeta may run while a
// SetMeta or Leave is in progress, so it reads under mu.
type delegate struct{ m *Membership }

var _ memberlist.Delegate = delegate{}

// NodeMeta returns the encoded local meta; its size was checked against
// memberlist.MetaMaxSize when it was set (memberlist panics beyond limit).
func (d delegate) NodeMeta(limit int) []byte {
	d.m.mu.Lock()
	defer d.m.mu.Unlock()
	return d.m.mu.encoded
}

// NotifyMsg ignores user messages: we send none.
func (delegate) NotifyMsg([]byte) {}

// GetBroadcasts returns no user broadcasts.
func (delegate) GetBroadcasts(overhead, limit int) [][]byte { return nil }

// LocalState has no user state to push/pull.
func (delegate) LocalState(join bool) []byte { return nil }

// MergeRemoteState ignores remote user state (there is none).
func (delegate) MergeRemoteState(buf []byte, join bool) {}

// events implements memberlist.EventDelegate. memberlist calls it with its
// nodeLock held (state.go aliveNode/deadNode), one call at a time, from
// its gossip, probe and stream goroutines: it must not call back into
// memberlist (Members would deadlock) and must not block, so it only
// updates the view under mu and pokes subscribers without blocking. The
// *Node is only read here, under that lock, so copying it is race-free.
type events struct{ m *Membership }

var _ memberlist.EventDelegate = events{}

// NotifyJoin records a member that became alive (also this node at start,
// and a departed member that came back).
func (e events) NotifyJoin(n *memberlist.Node) { e.m.upsert(n, "joined") }

// NotifyUpdate records a member's new meta (or its leaving announcement).
func (e events) NotifyUpdate(n *memberlist.Node) { e.m.upsert(n, "updated") }

// NotifyLeave records a member that left or was declared dead. memberlist
// v0.7.0 does not set n.State (it shadows it in an unexported struct), so
// left versus dead comes from the leaving flag of the member's last meta.
func (e events) NotifyLeave(n *memberlist.Node) {
	m := e.m
	meta, leaving, err := decodeMeta(n.Meta)
	if err != nil {
		meta = Meta{Name: n.Name}
	}
	d := Departure{Name: n.Name, Addr: nodeAddr(n), Meta: meta, Graceful: leaving, Since: time.Now()}
	m.mu.Lock()
	delete(m.mu.members, n.Name)
	if n.Name != m.cfg.Name {
		m.mu.departed[n.Name] = d
	}
	m.notifyLocked()
	m.mu.Unlock()
	if n.Name != m.cfg.Name {
		m.logger.Info("member departed", "member", n.Name, "addr", d.Addr, "graceful", leaving)
	}
}

func (m *Membership) upsert(n *memberlist.Node, what string) {
	meta, leaving, err := decodeMeta(n.Meta)
	if err != nil {
		m.logger.Warn("undecodable member meta", "member", n.Name, "error", err)
		meta = Meta{Name: n.Name}
	}
	state := MemberAlive
	if leaving {
		state = MemberLeaving
	}
	mem := Member{Name: n.Name, Addr: nodeAddr(n), Meta: meta, State: state}
	m.mu.Lock()
	m.mu.members[n.Name] = mem
	delete(m.mu.departed, n.Name)
	m.notifyLocked()
	m.mu.Unlock()
	m.logger.Debug("member "+what, "member", n.Name, "addr", mem.Addr, "state", state)
}

func nodeAddr(n *memberlist.Node) string {
	return net.JoinHostPort(n.Addr.String(), strconv.Itoa(int(n.Port)))
}

// acceptance implements memberlist.PingDelegate and MergeDelegate to learn
// that another member has accepted this node at its current address, which
// ends the join loop's retries. Joining alone is not enough: a manager
// restarted from a new address is refused ("conflicting address") until its
// old incarnation is dead for DeadNodeReclaimTime, and memberlist would then
// only learn of it at the next push/pull. Both methods run on memberlist's
// goroutines without its locks held and only set an atomic flag.
type acceptance struct{ m *Membership }

var (
	_ memberlist.PingDelegate  = acceptance{}
	_ memberlist.MergeDelegate = acceptance{}
)

// AckPayload is called when this node answers a probe: the prober lists
// this node, by name, at this address.
func (a acceptance) AckPayload() []byte {
	a.m.accepted.Store(true)
	return nil
}

// NotifyPingComplete ignores probe round trips.
func (acceptance) NotifyPingComplete(*memberlist.Node, time.Duration, []byte) {}

// NotifyMerge is called with a peer's member list during a join push/pull
// (either direction); it never refuses the merge. If the list has this node
// alive at its current address next to another alive node, a peer accepted
// this incarnation. (The peer sends its list before merging ours, so a first
// join is confirmed by the next one or by a probe.)
func (a acceptance) NotifyMerge(peers []*memberlist.Node) error {
	var self, other bool
	for _, n := range peers {
		if n.State != memberlist.StateAlive {
			continue
		}
		if n.Name == a.m.cfg.Name {
			self = nodeAddr(n) == a.m.localAddr
		} else {
			other = true
		}
	}
	if self && other {
		a.m.accepted.Store(true)
	}
	return nil
}

// NameConflict reports another node that claims this manager's name from
// a different gossip address.
type NameConflict struct {
	// Name is the contested name (this manager's).
	Name string
	// Mine is the address memberlist holds for the name: this manager's own
	// gossip address when the conflict is about us.
	Mine string
	// Theirs is the other claimant's gossip address.
	Theirs string
	// TheirMeta is what the other claimant advertises (zero if undecodable).
	TheirMeta Meta
}

// conflicts implements memberlist.ConflictDelegate. memberlist calls it
// with its nodeLock held whenever it refuses an alive message for a known
// name from a different address; it only logs and hands conflicts about
// this manager's own name to NameConflicts without blocking.
type conflicts struct{ m *Membership }

var _ memberlist.ConflictDelegate = conflicts{}

// NotifyConflict reports a name claimed from two addresses.
func (c conflicts) NotifyConflict(existing, other *memberlist.Node) {
	m := c.m
	mine, theirs := nodeAddr(existing), nodeAddr(other)
	if existing.Name != m.cfg.Name {
		m.logger.Error("two managers claim one name: --name must be unique", "name", existing.Name, "addr", mine, "other_addr", theirs)
		return
	}
	meta, _, _ := decodeMeta(other.Meta)
	nc := NameConflict{Name: existing.Name, Mine: mine, Theirs: theirs, TheirMeta: meta}
	m.mu.Lock()
	dup := m.mu.lastConflict == nc.Theirs
	m.mu.lastConflict = nc.Theirs
	m.mu.Unlock()
	if dup {
		return
	}
	select {
	case m.conflicts <- nc:
	default:
	}
}
