package scheduler

import "github.com/norsk-oss/norsk-manager/proto/managerpb"

// Domain names a failure domain of the resilience policy's anti-affinity.
type Domain string

// The failure domains, narrowest first.
const (
	DomainNode  Domain = "node"
	DomainZone  Domain = "zone"
	DomainCloud Domain = "cloud"
)

// Shared returns the forbidden domains node n shares with peer, narrowest
// first; nil when n keeps out of all of them or there is no peer. A zone or
// cloud counts as shared unless both sides are known and differ: an unknown
// zone cannot be shown to be another zone. The engine also uses it to
// re-check a degraded placement when capacity appears.
func Shared(n *Node, peer *Peer, aa AntiAffinity) []Domain {
	return domainsOf(sharedMask(n, peer, aa))
}

// The weights of the shared domains in a rank: giving up the node costs
// more than the zone, the zone more than the cloud.
const (
	weightNode  = 4
	weightZone  = 2
	weightCloud = 1
)

// sharedMask is Shared as a sum of weights, without allocating: it runs once
// per feasible node.
func sharedMask(n *Node, peer *Peer, aa AntiAffinity) int {
	if peer == nil {
		return 0
	}
	w := 0
	if aa.Node && n.ID == peer.Node {
		w += weightNode
	}
	if aa.Zone && !(n.Zone != "" && peer.Zone != "" && n.Zone != peer.Zone) {
		w += weightZone
	}
	unknown := managerpb.Cloud_CLOUD_UNSPECIFIED
	if aa.Cloud && !(n.Cloud != unknown && peer.Cloud != unknown && n.Cloud != peer.Cloud) {
		w += weightCloud
	}
	return w
}

func domainsOf(mask int) []Domain {
	var out []Domain
	for _, d := range []struct {
		w int
		d Domain
	}{{weightNode, DomainNode}, {weightZone, DomainZone}, {weightCloud, DomainCloud}} {
		if mask&d.w != 0 {
			out = append(out, d.d)
		}
	}
	return out
}

// rank orders the nodes that pass every filter; the least rank wins. Its
// fields compare in order (issue 11 §3, docs/design/placement.md):
//
//  1. shared: the forbidden failure domains the node shares with the peer,
//     as a weight (node 4, zone 2, cloud 1). Resilience comes before cost:
//     a node in another zone of an expensive tier beats a cheap node next
//     to the primary. Sharing only the cloud beats sharing the zone, which
//     beats sharing the node: the broadest domain is given up first.
//  2. pref: PreferNode first, AvoidNodes last, the rest between.
//  3. tier: the cheapest tier the node belongs to.
//  4. util: pack — the node most allocated after this placement first, so
//     that expensive and cloud nodes empty out.
//  5. id: ties go to the lowest node id, so the decision is deterministic.
type rank struct {
	shared int
	pref   int
	tier   int
	util   float64
	id     NodeID
}

func (r rank) less(o rank) bool {
	switch {
	case r.shared != o.shared:
		return r.shared < o.shared
	case r.pref != o.pref:
		return r.pref < o.pref
	case r.tier != o.tier:
		return r.tier < o.tier
	case r.util != o.util:
		return r.util > o.util
	}
	return r.id < o.id
}

// utilization is the fraction of the node allocated once n is placed on it:
// capacity, averaged with GPU capacity when the job needs a GPU. A node with
// no capacity of a kind counts 0 for it.
func utilization(node *Node, u *usage, n need) float64 {
	frac := func(used, total float64) float64 {
		if total <= 0 {
			return 0
		}
		return used / total
	}
	util := frac(unfixed(u.capacity)+n.capacity, node.Capacity)
	if n.gpu > 0 {
		util = (util + frac(unfixed(u.gpu)+n.gpu, node.GPUCapacity)) / 2
	}
	return util
}

func rankOf(c *candidate, a *Ask, n need) rank {
	pref := 1
	switch {
	case a.PreferNode != "" && c.node.ID == a.PreferNode:
		pref = 0
	case contains(a.AvoidNodes, c.node.ID):
		pref = 2
	}
	// The weights are distinct bits: OR is the union of the domains
	// shared with any peer of the group.
	shared := sharedMask(c.node, a.Peer, a.AntiAffinity)
	for i := range a.CoLocated {
		shared |= sharedMask(c.node, a.CoLocated[i].Peer, a.AntiAffinity)
	}
	return rank{
		shared: shared,
		pref:   pref,
		tier:   c.tier,
		util:   utilization(c.node, c.usage, n),
		id:     c.node.ID,
	}
}
