package scheduler

import (
	"fmt"
	"math"
	"slices"
	"sort"

	"github.com/norsk-oss/norsk-manager/proto/noderesources"
)

// View is the nodes and what is placed on them, indexed for decisions. Build
// one with NewView from the replicated records; Select a placement; Add the
// decision's instances so the next Select in the same pass sees them.
//
// A View is not safe for concurrent use. It copies the node and placement
// slices it is given (not the maps inside nodes, which it only reads).
type View struct {
	// nodes are sorted by id: every scan, and so every tie, is in id order.
	nodes []Node
	index map[NodeID]int
	// usage[i] is what is placed on nodes[i].
	usage []usage
	// placed holds every instance by (job, role), on any node.
	placed map[instanceKey]Placed
	// jobNodes lists, per job, the nodes its instances are on (any role).
	jobNodes map[JobID][]NodeID
	// journal, while recording (Begin), holds what each Add and Remove
	// changed, for Rollback.
	journal   []undo
	recording bool
}

// undo is what one Add or Remove of one instance changed: the previous
// placed entry of its key, its job's node list, and its node's usage.
type undo struct {
	key       instanceKey
	placed    Placed
	hadPlaced bool
	jobNodes  []NodeID
	hadJob    bool
	node      int // -1: the instance's node is not in the view
	usage     usage
}

// Begin starts recording every Add and Remove, so that Rollback can undo
// them: the placement engine keeps one view from pass to pass (the
// recorded instances) and each pass's own decisions, holds and trials are
// given back when it ends. A Begin while recording starts over (the
// earlier changes are kept).
func (v *View) Begin() {
	v.journal, v.recording = v.journal[:0], true
}

// Rollback undoes every Add and Remove since Begin, newest first,
// restoring the values saved before each (no arithmetic: the room is as
// it was to the last bit), and stops recording.
func (v *View) Rollback() {
	for i := len(v.journal) - 1; i >= 0; i-- {
		u := &v.journal[i]
		if u.hadPlaced {
			v.placed[u.key] = u.placed
		} else {
			delete(v.placed, u.key)
		}
		if u.hadJob {
			v.jobNodes[u.key.job] = u.jobNodes
		} else {
			delete(v.jobNodes, u.key.job)
		}
		if u.node >= 0 {
			v.usage[u.node] = u.usage
		}
	}
	clear(v.journal)
	v.journal, v.recording = v.journal[:0], false
}

// save records, while recording, the state Add or Remove of (k, on node)
// is about to change.
func (v *View) save(k instanceKey, node NodeID) {
	if !v.recording {
		return
	}
	u := undo{key: k, node: -1}
	u.placed, u.hadPlaced = v.placed[k]
	u.jobNodes, u.hadJob = v.jobNodes[k.job]
	if i, ok := v.index[node]; ok {
		u.node, u.usage = i, v.usage[i]
		u.usage.cores = slices.Clone(u.usage.cores)
	}
	v.journal = append(v.journal, u)
}

type instanceKey struct {
	job  JobID
	role Role
}

// usage is what the placed instances hold on one node. Capacity and GPU
// capacity are summed in whole nano-units (fixed), so that a node's sum
// does not depend on the order its instances were added and removed in:
// the placement engine keeps one view from pass to pass, adding and
// removing instances as their records change, and its room must be, to
// the last bit, that of a view built whole from the same records
// (docs/design/world-view.md) — ranking compares utilisation exactly.
type usage struct {
	capacity int64
	gpu      int64
	// cores[i] counts the placed instances pinning the node's i-th core id
	// (Node.Cores, sorted by NewView): the core is free at 0, so that
	// removing one of two instances pinning a core (records that overlap)
	// leaves it pinned, as a view built without that instance has it; len
	// is the number of ids the node offers.
	cores     []int32
	coresUsed int
}

// NewView indexes nodes and placed instances. It returns ErrInvalidView
// (wrapped, naming the id) if two nodes share an id. Instances on nodes that
// are not in the view count for separate_from and co_locate_with but hold no
// room anywhere; two instances of one (job, role) both hold their room.
func NewView(nodes []Node, placed []Placed) (*View, error) {
	v := &View{
		nodes:    append([]Node(nil), nodes...),
		index:    make(map[NodeID]int, len(nodes)),
		placed:   make(map[instanceKey]Placed, len(placed)),
		jobNodes: make(map[JobID][]NodeID, len(placed)),
	}
	sort.Slice(v.nodes, func(i, j int) bool { return v.nodes[i].ID < v.nodes[j].ID })
	v.usage = make([]usage, len(v.nodes))
	for i := range v.nodes {
		n := &v.nodes[i]
		if _, dup := v.index[n.ID]; dup {
			return nil, fmt.Errorf("%w: node id %q appears twice", ErrInvalidView, n.ID)
		}
		v.index[n.ID] = i
		n.Cores = slices.Compact(slices.Sorted(slices.Values(n.Cores)))
		if validCores(n.Cores) {
			v.usage[i].cores = make([]int32, len(n.Cores))
		}
	}
	v.Add(placed...)
	return v, nil
}

// maxCores bounds the number of core ids a view tracks per node and
// maxCoreID each id (Linux's largest NR_CPUS is 8192); a node record
// beyond them is filtered as invalid rather than allocating without limit.
const (
	maxCores  = 4096
	maxCoreID = 8191
)

// validCores reports whether ids (sorted, no duplicates) are a core list
// a view tracks: at most maxCores ids, each in 0..maxCoreID.
func validCores(ids []int) bool {
	return len(ids) <= maxCores && (len(ids) == 0 || ids[0] >= 0 && ids[len(ids)-1] <= maxCoreID)
}

// corePos is the position of core id c in n's sorted Cores, and false if
// the node does not offer it (or its list is invalid and untracked).
func corePos(n *Node, u *usage, c int) (int, bool) {
	if len(u.cores) == 0 {
		return 0, false
	}
	return slices.BinarySearch(n.Cores, c)
}

// Add records instances as placed (a decision carried out, or one about to
// be). An instance of a (job, role) the view already holds is added too: it
// holds room, and Select refuses to place that role again; Remove then
// forgets only the latest of the two (the earlier one's room stays held in
// this view — records showing a role twice are a fault the engine reports).
func (v *View) Add(placed ...Placed) {
	for _, p := range placed {
		p.Cores = append([]int(nil), p.Cores...)
		v.save(instanceKey{p.Job, p.Role}, p.Node)
		v.placed[instanceKey{p.Job, p.Role}] = p
		v.jobNodes[p.Job] = append(v.jobNodes[p.Job], p.Node)
		i, ok := v.index[p.Node]
		if !ok {
			continue
		}
		u := &v.usage[i]
		u.capacity += fixed(p.Capacity)
		u.gpu += fixed(p.GPUCapacity)
		for _, c := range p.Cores {
			if k, ok := corePos(&v.nodes[i], u, c); ok {
				if u.cores[k]++; u.cores[k] == 1 {
					u.coresUsed++
				}
			}
		}
	}
}

// Remove forgets the instance of (job, role), if the view holds one, and
// gives its room back. It reports whether there was one.
func (v *View) Remove(job JobID, role Role) bool {
	p, ok := v.placed[instanceKey{job, role}]
	if !ok {
		return false
	}
	v.save(instanceKey{job, role}, p.Node)
	delete(v.placed, instanceKey{job, role})
	v.jobNodes[job] = removeOne(v.jobNodes[job], p.Node)
	if len(v.jobNodes[job]) == 0 {
		delete(v.jobNodes, job)
	}
	if i, ok := v.index[p.Node]; ok {
		u := &v.usage[i]
		u.capacity -= fixed(p.Capacity)
		u.gpu -= fixed(p.GPUCapacity)
		for _, c := range p.Cores {
			if k, ok := corePos(&v.nodes[i], u, c); ok && u.cores[k] > 0 {
				if u.cores[k]--; u.cores[k] == 0 {
					u.coresUsed--
				}
			}
		}
	}
	return true
}

// Len is the number of nodes in the view.
func (v *View) Len() int { return len(v.nodes) }

// Free reports a node's free capacity, free GPU capacity (reference units,
// never below 0) and free core count, and false if the view has no such
// node. It is what `node list` calls free, for explanations and tests.
func (v *View) Free(id NodeID) (capacity, gpu float64, cores int, ok bool) {
	i, ok := v.index[id]
	if !ok {
		return 0, 0, 0, false
	}
	n, u := &v.nodes[i], &v.usage[i]
	return math.Max(0, n.Capacity-unfixed(u.capacity)), math.Max(0, n.GPUCapacity-unfixed(u.gpu)), len(u.cores) - u.coresUsed, true
}

func removeOne(ids []NodeID, id NodeID) []NodeID {
	for i, x := range ids {
		if x == id {
			return append(ids[:i:i], ids[i+1:]...)
		}
	}
	return ids
}

// fixedScale is the number of fixed units (usage) per reference unit, and
// maxFixedUnits the most reference units one instance counts for: what
// the gateway accepts (noderesources.MaxUnits), and low enough that no
// node's sum overflows (9,000 instances at the most).
const (
	fixedScale    = 1e9
	maxFixedUnits = noderesources.MaxUnits
)

// fixed is x reference units (NaN, infinite or negative: 0) in fixed
// units, rounded to the nearest.
func fixed(x float64) int64 {
	return int64(math.Round(min(finiteOrZero(x), maxFixedUnits) * fixedScale))
}

// unfixed is n fixed units in reference units.
func unfixed(n int64) float64 { return float64(n) / fixedScale }

func finiteOrZero(x float64) float64 {
	if math.IsNaN(x) || math.IsInf(x, 0) || x < 0 {
		return 0
	}
	return x
}
