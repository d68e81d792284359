package provisioner

import (
	"time"

	"github.com/norsk-oss/norsk-manager/proto/managerpb"
)

// DefaultLinger is the linger of a tier that stores none (a pool written
// before linger_seconds existed); the gateway stores the same default.
const DefaultLinger = 300 * time.Second

// CreateTimeout is the default of how long an engine-created node may stay being created
// (its record not yet STARTED with its worker's resources) before the
// engine gives it up and terminates it: longer than a cloud node's own
// pending and startup timeouts together (the node grain's, 10 + 10 min),
// so a cloud node normally ends by those; it bounds what they do not
// cover — a mock node whose worker never answers, a worker that
// registered but never reported its resources — which would otherwise
// hold its room and a place under max_nodes for good.
const CreateTimeout = 30 * time.Minute

// Action is what Release decided for one engine-created node.
type Action uint8

const (
	// Keep: nothing to do.
	Keep Action = iota
	// MarkIdle: record now as the node's idle-since instant.
	MarkIdle
	// ClearIdle: it runs something again; clear its idle-since instant.
	ClearIdle
	// Terminate: it ran nothing for its linger; terminate it.
	Terminate
	// GiveUp: it has been being created for CreateTimeout; terminate it
	// (it frees its place under max_nodes, and the roles it was sized for
	// are planned again).
	GiveUp
)

// Idle is what Release needs of one node the engine created.
type Idle struct {
	// Started: its worker is up (state STARTED). A node being created or
	// stopped does not linger.
	Started bool
	// Creating: it is being created (provisioner.Creating); CreatedAt is
	// when it was recorded; after CreateTimeout (0: the package's
	// CreateTimeout) it is given up.
	Creating      bool
	CreatedAt     time.Time
	CreateTimeout time.Duration
	// Cordoned: an operator cordoned or drains it; the engine leaves it
	// to the operator.
	Cordoned bool
	// Instances counts the instances recorded on it and the StartJobs in
	// flight to it.
	Instances int
	// IdleSince is its record's idle-since instant; zero when unset.
	IdleSince time.Time
	// Linger is its tier's (LingerOf).
	Linger time.Duration
}

// Release decides for one engine-created node: a started node that runs
// nothing is marked idle, and terminated once it has been idle for its
// linger (counted from the record, so a leader change keeps the timer); a
// node that runs something again has its mark cleared; a node still being
// created CreateTimeout after its record is given up. Nodes created by
// hand and cluster slots never come here (NodeOf).
func Release(n Idle, now time.Time) Action {
	switch {
	case n.Instances > 0:
		if !n.IdleSince.IsZero() {
			return ClearIdle
		}
		return Keep
	case n.Cordoned:
		return Keep
	case !n.Started:
		timeout := n.CreateTimeout
		if timeout <= 0 {
			timeout = CreateTimeout
		}
		if n.Creating && !n.CreatedAt.IsZero() && now.Sub(n.CreatedAt) >= timeout {
			return GiveUp
		}
		return Keep
	case n.IdleSince.IsZero():
		return MarkIdle
	case now.Sub(n.IdleSince) >= n.Linger:
		return Terminate
	}
	return Keep
}

// LingerOf returns the linger of tier in pool (pools by name), or
// DefaultLinger when the pool, the tier or its linger is gone: a node of a
// deleted tier is still released, after the default.
func LingerOf(pools map[string]*managerpb.Pool, pool, tier string) time.Duration {
	for _, t := range pools[pool].GetTiers() {
		if t.GetName() == tier && t.GetLingerSeconds() > 0 {
			return time.Duration(t.GetLingerSeconds()) * time.Second
		}
	}
	return DefaultLinger
}
