package actors

import (
	"sync"
	"time"

	"github.com/norsk-oss/norsk-manager/proto/commonpb"
)

// NodeLiveness is what a node grain knows about its worker session right
// now; it is not persisted (it changes with every health ping).
type NodeLiveness struct {
	// Connected is true while a verified worker session is up.
	Connected bool
	// LastSeen is when the last message arrived from the worker (zero if
	// never on this manager).
	LastSeen time.Time
	// CPUBusy is the number of CPUs busy in the last health ping.
	CPUBusy float32
	// MemoryUsedMiB is memory in use in the last health ping, in MiB.
	MemoryUsedMiB float32
	// RuntimeConditions is what the worker last reported about its
	// runtime's dependencies (hello, then every health): its Docker
	// engine unreachable, say. Shared with readers: never modified in
	// place, only replaced.
	RuntimeConditions []*commonpb.RuntimeCondition
}

// Liveness is the registry of NodeLiveness by node id, written by node
// grains and read by the gateway (ListNodes, ListClusterNodes). Safe for
// concurrent use.
type Liveness struct {
	mu    sync.RWMutex
	nodes map[string]NodeLiveness // guarded by mu
}

// NewLiveness returns an empty registry.
func NewLiveness() *Liveness { return &Liveness{nodes: map[string]NodeLiveness{}} }

// Set records the liveness of node.
func (l *Liveness) Set(node string, v NodeLiveness) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.nodes[node] = v
}

// Update applies fn to node's liveness (zero value if unknown).
func (l *Liveness) Update(node string, fn func(*NodeLiveness)) {
	l.mu.Lock()
	defer l.mu.Unlock()
	v := l.nodes[node]
	fn(&v)
	l.nodes[node] = v
}

// Delete forgets node.
func (l *Liveness) Delete(node string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.nodes, node)
}

// Get returns node's liveness (zero value if unknown).
func (l *Liveness) Get(node string) NodeLiveness {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return l.nodes[node]
}

// Connected returns how many nodes have a worker session up.
func (l *Liveness) Connected() int {
	l.mu.RLock()
	defer l.mu.RUnlock()
	n := 0
	for _, v := range l.nodes {
		if v.Connected {
			n++
		}
	}
	return n
}

// Snapshot returns a copy of every node's liveness.
func (l *Liveness) Snapshot() map[string]NodeLiveness {
	l.mu.RLock()
	defer l.mu.RUnlock()
	out := make(map[string]NodeLiveness, len(l.nodes))
	for k, v := range l.nodes {
		out[k] = v
	}
	return out
}
