package provisioner

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/norsk-oss/norsk-manager/proto/managerpb"
)

// Waiting is one job role the scheduler found no node for, in a pool.
type Waiting struct {
	// Key is "job/role".
	Key  string
	Pool string
	// Capacity and GPU are the reference units it needs (with its
	// co-located group's).
	Capacity float64
	GPU      float64
	// SecurityGroups are the job's extra security groups: it goes only to
	// a node whose instance has them.
	SecurityGroups []string
	// Templates are the product templates the role and its co-located
	// group run (job.product_template); empty: none. A new node is
	// created for such a role only from a tier whose PoolTier.templates
	// declares every one (placement.md, "Product-template jobs").
	Templates []TemplateRef
}

// HealthFunc returns a provider's health in a location (AWS region, OCI
// availability domain); HEALTHY when unknown.
type HealthFunc func(provider managerpb.NodeProvider, location string) managerpb.Health

// Input is what Plan decides on, all read from one view of the store.
type Input struct {
	Now   time.Time
	Pools map[string]*managerpb.Pool
	// Waiting are the roles to find room for.
	Waiting []Waiting
	// Nodes are every node the engine created (NodeOf), and the creates in
	// flight as Creating.
	Nodes []Node
	// Health: nil takes every location as healthy.
	Health HealthFunc
	// OtherIDs are the ids of the other node records (created by hand,
	// cluster slots): a planned id is never one of them.
	OtherIDs []string
	// MissingGroups are the security groups the engine's look-ups found
	// missing (groups.go): no node that would carry one is created until
	// its GroupRetry ends.
	MissingGroups []MissingGroup
}

// Create is one node to create.
type Create struct {
	// NodeID is "<pool>-<tier>-<n>", n one above the tier's highest.
	NodeID   string
	Pool     string
	Tier     *managerpb.PoolTier
	Offering Offering
	// ForJobs are the waiting keys packed into it, in packing order.
	ForJobs []string
	// SecurityGroups are the tier's extra security groups and those of
	// its jobs, sorted.
	SecurityGroups []string
}

// Decision is what Plan decided.
type Decision struct {
	Creates []Create
	// Coming maps the waiting keys that fit a node being created to its id:
	// nothing is created for them.
	Coming map[string]string
	// Unserved maps the waiting keys no node can be created for to why.
	Unserved map[string]string
}

// bin is a node (being created, or to create) with the room left in it.
type bin struct {
	id     string
	tier   int
	room   float64
	gpu    float64
	groups []string
	// plan and create are set for a node to create: its Create is
	// plan.Creates[create]. Nil for a node being created.
	plan   *Decision
	create int
	// canGroup: a new AWS node takes the security groups of its jobs.
	canGroup bool
}

// Plan bin-packs the waiting roles (largest first, first fit) into the
// nodes being created of their pool, then into new nodes of the pool's
// provisioned tiers, cheapest tier first, below max_nodes, with the first
// offering (Offerings order) that fits, is not backed off (Backoffs) and
// whose location the provider does not report FAILED (UNSTABLE ones only
// when no healthy one is left). A role named in a creating node's ForJobs
// goes to that node first. A role with product templates
// (Waiting.Templates) goes only to a node of a tier that declares them
// (PoolTier.templates) and that no node has shown to lie about them
// (TemplateLies); with no such tier it is left unserved, so a job whose
// template no image offers cannot make the engine create node after node.
// Deterministic for the same Input.
func Plan(in Input) Decision {
	out := Decision{Coming: map[string]string{}, Unserved: map[string]string{}}
	backedOff := map[string]Backoff{}
	for _, b := range Backoffs(in.Nodes, in.Now) {
		backedOff[b.Pool+"\x00"+b.Tier+"\x00"+b.Offering] = b
	}
	lies := map[string]TemplateLie{}
	for _, l := range TemplateLies(in.Pools, in.Nodes, in.Now) {
		lies[l.Pool+"\x00"+l.Tier+"\x00"+l.Template.String()] = l
	}
	missing := missingGroups(in)
	byPool := map[string][]Waiting{}
	for _, w := range in.Waiting {
		byPool[w.Pool] = append(byPool[w.Pool], w)
	}
	pools := make([]string, 0, len(byPool))
	for p := range byPool {
		pools = append(pools, p)
	}
	slices.Sort(pools)
	for _, name := range pools {
		pool := in.Pools[name]
		if pool == nil {
			continue
		}
		pp := poolPlan{in: in, pool: pool, backedOff: backedOff, lies: lies, missing: missing, out: &out}
		pp.run(byPool[name])
	}
	return out
}

type poolPlan struct {
	in        Input
	pool      *managerpb.Pool
	backedOff map[string]Backoff
	lies      map[string]TemplateLie  // by pool, tier, template (TemplateRef.String)
	missing   map[string]MissingGroup // by region, group (missingGroups)
	out       *Decision
	bins      []*bin
	live      map[string]int // live (creating or running) nodes per tier, planned ones included
	next      map[string]int // next node number per tier
}

func (pp *poolPlan) run(waiting []Waiting) {
	name := pp.pool.GetName()
	tierIdx := map[string]int{}
	for i, t := range pp.pool.GetTiers() {
		tierIdx[t.GetName()] = i
	}
	pp.live, pp.next = map[string]int{}, map[string]int{}
	owner := map[string]*bin{}
	for _, n := range pp.in.Nodes {
		if n.Pool != name {
			continue
		}
		if k := nodeNumber(n.ID, name, n.Tier); k >= pp.next[n.Tier] {
			pp.next[n.Tier] = k + 1
		}
		if n.State == Stopped {
			continue
		}
		pp.live[n.Tier]++
		if i, ok := tierIdx[n.Tier]; ok && n.State == Creating {
			b := &bin{id: n.ID, tier: i, room: n.Capacity, gpu: n.GPU, groups: n.SecurityGroups}
			pp.bins = append(pp.bins, b)
			for _, k := range n.ForJobs {
				owner[k] = b
			}
		}
	}
	for _, id := range pp.in.OtherIDs {
		for _, t := range pp.pool.GetTiers() {
			if k := nodeNumber(id, name, t.GetName()); k >= pp.next[t.GetName()] {
				pp.next[t.GetName()] = k + 1
			}
		}
	}
	slices.SortStableFunc(pp.bins, func(a, b *bin) int { return cmp.Or(cmp.Compare(a.tier, b.tier), strings.Compare(a.id, b.id)) })
	slices.SortStableFunc(waiting, func(a, b Waiting) int {
		return cmp.Or(cmp.Compare(b.Capacity, a.Capacity), cmp.Compare(b.GPU, a.GPU), strings.Compare(a.Key, b.Key))
	})
	var rest []Waiting
	for _, w := range waiting {
		if why := pp.noTierDeclares(w); why != "" {
			pp.out.Unserved[w.Key] = why
			continue
		}
		if b := owner[w.Key]; b != nil && b.fits(w) && pp.templateProblem(b.tier, w) == "" {
			b.take(w)
			pp.out.Coming[w.Key] = b.id
			continue
		}
		rest = append(rest, w)
	}
	for _, w := range rest {
		pp.place(w)
	}
}

// place puts w in the first bin it fits, else in a new node.
func (pp *poolPlan) place(w Waiting) {
	for _, b := range pp.bins {
		// A node to create takes no job whose security group is missing
		// (it would fail for everyone on it); a node being created
		// already carries its groups.
		if b.fits(w) && pp.templateProblem(b.tier, w) == "" && (b.plan == nil || pp.groupProblem(b.tier, w) == "") {
			b.take(w)
			if b.plan == nil {
				pp.out.Coming[w.Key] = b.id
			}
			return
		}
	}
	var why []string
	for i, t := range pp.pool.GetTiers() {
		if reason := pp.templateProblem(i, w); reason != "" {
			why = append(why, fmt.Sprintf("tier %s: %s", t.GetName(), reason))
			continue
		}
		if reason := pp.groupProblem(i, w); reason != "" {
			why = append(why, fmt.Sprintf("tier %s: %s", t.GetName(), reason))
			continue
		}
		o, reason := pp.offering(t, w)
		if reason != "" {
			why = append(why, fmt.Sprintf("tier %s: %s", t.GetName(), reason))
			continue
		}
		b := pp.open(i, t, o)
		b.take(w)
		return
	}
	if len(why) == 0 {
		why = append(why, "no tier has a provisioner")
	}
	pp.out.Unserved[w.Key] = fmt.Sprintf("no node can be created for it in pool %s: %s", pp.pool.GetName(), strings.Join(why, "; "))
}

// offering returns the offering of tier t a new node for w takes, or why
// there is none.
func (pp *poolPlan) offering(t *managerpb.PoolTier, w Waiting) (Offering, string) {
	offs := Offerings(t)
	switch {
	case len(offs) == 0:
		return Offering{}, "no provisioner"
	case t.GetMaxNodes() > 0 && pp.live[t.GetName()] >= int(t.GetMaxNodes()):
		return Offering{}, fmt.Sprintf("at max_nodes (%d)", t.GetMaxNodes())
	case len(w.SecurityGroups) > 0 && t.GetAws() == nil:
		return Offering{}, "the job has extra security groups, which only AWS nodes carry"
	}
	var unstable *Offering
	var why []string
	for _, o := range offs {
		if o.Capacity+epsilon < w.Capacity || o.GPU+epsilon < w.GPU {
			why = append(why, fmt.Sprintf("%s offers %g units (%g gpu)", o.Name(), o.Capacity, o.GPU))
			continue
		}
		if b, ok := pp.backedOff[pp.pool.GetName()+"\x00"+t.GetName()+"\x00"+o.Name()]; ok {
			why = append(why, fmt.Sprintf("%s backed off until %s", o.Name(), b.Until.UTC().Format(time.RFC3339)))
			continue
		}
		switch pp.health(o) {
		case managerpb.Health_FAILED:
			why = append(why, fmt.Sprintf("%s: provider FAILED in %s", o.Name(), o.Location))
			continue
		case managerpb.Health_UNSTABLE:
			if unstable == nil {
				unstable = &o
			}
			continue
		}
		return o, ""
	}
	if unstable != nil {
		return *unstable, ""
	}
	return Offering{}, strings.Join(why, ", ")
}

func (pp *poolPlan) health(o Offering) managerpb.Health {
	if pp.in.Health == nil || o.Location == "" {
		return managerpb.Health_HEALTHY
	}
	return pp.in.Health(o.Provider, o.Location)
}

// open adds a new node of tier t (index i) with offering o.
func (pp *poolPlan) open(i int, t *managerpb.PoolTier, o Offering) *bin {
	n := max(pp.next[t.GetName()], 1)
	pp.next[t.GetName()] = n + 1
	pp.live[t.GetName()]++
	c := Create{NodeID: NodeID(pp.pool.GetName(), t.GetName(), n), Pool: pp.pool.GetName(), Tier: t, Offering: o,
		SecurityGroups: slices.Sorted(slices.Values(t.GetAws().GetExtraSecurityGroups()))}
	pp.out.Creates = append(pp.out.Creates, c)
	b := &bin{id: c.NodeID, tier: i, room: o.Capacity, gpu: o.GPU, groups: c.SecurityGroups,
		plan: pp.out, create: len(pp.out.Creates) - 1, canGroup: t.GetAws() != nil}
	pp.bins = append(pp.bins, b)
	return b
}

const epsilon = 1e-6

func (b *bin) fits(w Waiting) bool {
	if b.room+epsilon < w.Capacity || b.gpu+epsilon < w.GPU {
		return false
	}
	if b.canGroup {
		return true
	}
	for _, g := range w.SecurityGroups {
		if !slices.Contains(b.groups, g) {
			return false
		}
	}
	return true
}

func (b *bin) take(w Waiting) {
	b.room -= w.Capacity
	b.gpu -= w.GPU
	if b.plan == nil {
		return
	}
	c := &b.plan.Creates[b.create]
	c.ForJobs = append(c.ForJobs, w.Key)
	for _, g := range w.SecurityGroups {
		if !slices.Contains(c.SecurityGroups, g) {
			c.SecurityGroups = append(c.SecurityGroups, g)
		}
	}
	slices.Sort(c.SecurityGroups)
	b.groups = c.SecurityGroups
}

// maxNodeIDLen is the longest node id (the gateway's rule for new ids).
const maxNodeIDLen = 200

// NodeID is the id of the n-th node the engine creates for tier of pool:
// "<pool>-<tier>-<n>", with pool and tier replaced by a hash prefix when
// that would be longer than a node id may be.
func NodeID(pool, tier string, n int) string {
	return idPrefix(pool, tier) + "-" + strconv.Itoa(n)
}

func idPrefix(pool, tier string) string {
	p := pool + "-" + tier
	if len(p) <= maxNodeIDLen-12 {
		return p
	}
	sum := sha256.Sum256([]byte(p))
	return p[:maxNodeIDLen-12-17] + "-" + hex.EncodeToString(sum[:8])
}

// nodeNumber returns n of a node id made by NodeID for pool and tier; 0
// for another id.
func nodeNumber(id, pool, tier string) int {
	rest, ok := strings.CutPrefix(id, idPrefix(pool, tier)+"-")
	if !ok {
		return 0
	}
	n, err := strconv.Atoi(rest)
	if err != nil || n < 0 {
		return 0
	}
	return n
}
