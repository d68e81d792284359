package scheduler

import "github.com/norsk-oss/norsk-manager/proto/managerpb"

// NodeID names a node, as the node records and the node grains do.
type NodeID string

// JobID names a job, as the job records do (a bundle's derived job ids
// included: "<bundle_id>.<replica_index>.<job_name>").
type JobID string

// Role names one instance of a job. Bundle replica 0 runs as RolePrimary,
// replica 1 as RoleBackup; a plain auto-placed job runs as RolePrimary
// (issue 11 §1).
type Role string

// The roles the placement engine uses.
const (
	RolePrimary Role = "primary"
	RoleBackup  Role = "backup"
)

// Node is what the chain knows of one node: its state, its failure domains,
// what it offers and what it is. The engine fills it from the node record.
// String fields that are empty are unknown: a job constraint on such a field
// never matches an unknown value.
type Node struct {
	// ID is the node's id; unique within a View.
	ID NodeID
	// Online is true while the node is running and its worker session is up
	// (a session blip the node timers have not declared a loss still
	// counts as online: that is the engine's call).
	Online bool
	// Cordoned, Draining and Stopping each make the node unschedulable: no
	// new placements (issue 11 §3, §4).
	Cordoned bool
	Draining bool
	Stopping bool
	// Tags are the node's tags; a tier's selector matches against them.
	Tags map[string]string
	// Zone is the node's failure domain below the cloud: the AWS AZ, the OCI
	// availability domain, or the zone tag of a cluster slot. Empty: unknown.
	Zone string
	// Cloud is the provider kind the node runs on; CLOUD_UNSPECIFIED:
	// unknown.
	Cloud managerpb.Cloud
	// Capacity is what the node offers, in reference units (1 unit = one
	// real-time H.264 1080p30 medium-preset encode).
	Capacity float64
	// GPUCapacity is the node's GPU capacity in reference units; 0: none.
	GPUCapacity float64
	// GPUModel is the node's GPU model name; empty: none or unknown.
	GPUModel string
	// Capabilities are the node's NAME=VALUE capabilities.
	Capabilities map[string]string
	// Cores are the core ids (Linux logical CPU numbers) the node offers
	// to jobs with required cores, as its worker reported them (--cores);
	// empty: none, and no such job fits. Any order; duplicates count once.
	// Jobs without required cores share whatever is not pinned.
	Cores []int
	// Architecture, Shape, AvailabilityDomain and Subnet are what the node
	// is, where known; a job's constraints of the same names match them.
	Architecture       string
	Shape              string
	AvailabilityDomain string
	Subnet             string
	// SecurityGroups are the names of the extra security groups the node's
	// instance was created with (its CreateAwsNode request's); empty for
	// any other node.
	SecurityGroups []string
	// Templates is the node's product-template catalogue as its worker
	// reported it: name → versions (TemplatesFromProto); nil: none.
	Templates map[string][]string
}

// Schedulable reports whether new placements may go to the node: online and
// not cordoned, draining or stopping.
func (n *Node) Schedulable() bool {
	return n.Online && !n.Cordoned && !n.Draining && !n.Stopping
}

// Placed is one instance placed on a node (starting or running): what it
// holds there. The engine derives these from the job records, never from
// memory of its own (ARCHITECTURE §8).
type Placed struct {
	Job  JobID
	Role Role
	Node NodeID
	// Capacity and GPUCapacity are the reference units it holds.
	Capacity    float64
	GPUCapacity float64
	// Cores are the core ids pinned to it (its norsk_cpu_list); empty when
	// it shares cores. Ids the node does not offer are ignored.
	Cores []int
}

// Capability is one NAME=VALUE a job requires of its node; the node must
// carry the name with exactly that value.
type Capability struct {
	Name  string
	Value string
}

// Requirements are a job's resource needs (managerpb.JobRequirements in Go
// types; RequirementsFromProto converts).
type Requirements struct {
	// Capacity in reference units, finite and ≥ 0.
	Capacity float64
	// Cores is the number of whole cores to pin; 0 shares the node's cores.
	Cores int
	// GPUCapacity in reference units, finite and ≥ 0; 0: no GPU needed.
	GPUCapacity float64
	// GPUModel, when set, must equal the node's GPU model exactly.
	GPUModel string
	// Capabilities the node must all carry.
	Capabilities []Capability
}

// Constraints are the placement fields of a managerpb.Job (cloud,
// architecture, shape, availabilityDomain, subnet); each applies only when
// set (ConstraintsFromJob converts).
type Constraints struct {
	Cloud              managerpb.Cloud
	Architecture       string
	Shape              string
	AvailabilityDomain string
	Subnet             string
}

// Tier is one tier of a pool: a node belongs to it when it carries every tag
// of Selector (an empty selector takes every node). A pool's tiers are
// ordered cheap → expensive.
type Tier struct {
	Name     string
	Selector map[string]string
}

// Member is a job placed in the same decision as the asked one because they
// must share a node (co_locate_with): its requirements add to the asked
// job's when a node's room is checked, and it gets cores of its own.
type Member struct {
	Job          JobID
	Role         Role
	Requirements Requirements
	// Template is the member's product template (zero: none); the node
	// must offer it too (FilterProductTemplate).
	Template TemplateRef
	// Peer is the member's other replica's placement (nil: not placed or
	// no resilience policy). The node is ranked against it as against
	// Ask.Peer: a group member's backup is kept out of its primary's
	// domains too, not only the asked job's.
	Peer *Peer
}

// AntiAffinity says which failure domains of the other replica the placed
// one should stay out of: true is the resilience policy's
// ANTI_AFFINITY_FORBID. v1 is best effort: when no node outside the domain
// fits, the job is placed anyway and Decision.Degraded names the domain.
type AntiAffinity struct {
	Node  bool
	Zone  bool
	Cloud bool
}

// Peer is where the other replica of a bundle job runs (for a backup, its
// primary; for a primary re-placed while its backup runs, the backup): its
// node and that node's zone and cloud, copied from the node record so a
// peer on a node that left the view still counts.
type Peer struct {
	Node  NodeID
	Zone  string
	Cloud managerpb.Cloud
}

// Ask is one placement question: where should this job role go?
type Ask struct {
	// Job and Role name the instance to place; both required.
	Job  JobID
	Role Role
	// Requirements of the job (its auto_placement requirements).
	Requirements Requirements
	// Constraints of the job (its cloud, architecture, … fields).
	Constraints Constraints
	// Pool names the pool the tiers come from; used only in explanations.
	Pool string
	// Tiers of the pool, cheap → expensive. Empty: one tier of every node
	// (a plain job without a pool tag).
	Tiers []Tier
	// CoLocated are the jobs of the asked job's co_locate_with group not
	// yet placed, placed on the same node in this decision.
	CoLocated []Member
	// CoLocateWith names every other job of the co_locate_with group; those
	// already placed pin the node.
	CoLocateWith []JobID
	// SeparateFrom names the jobs the asked job (and its co-located
	// members) must not share a node with, in both directions of the
	// bundle's separate_from.
	SeparateFrom []JobID
	// Peer is the other replica's placement; nil when it is not placed.
	Peer *Peer
	// AntiAffinity is what to keep apart from Peer.
	AntiAffinity AntiAffinity
	// PreferNode, when set and fit, is chosen before any other node (a
	// restart on the same node first, issue 11 §4).
	PreferNode NodeID
	// AvoidNodes rank after every other fit node (a restart elsewhere after
	// failures on them); they are still chosen when nothing else fits.
	AvoidNodes []NodeID
	// SecurityGroups are the job's extra security groups: only a node
	// whose instance has every one fits (FilterSecurityGroups).
	SecurityGroups []string
	// Template is the job's product template (zero: none): only a node
	// offering its name at its version fits (FilterProductTemplate).
	Template TemplateRef
	// Nodes, when set, are the only nodes the ask may go to, and
	// ExcludeNodes are never chosen: a move to the node an operator named,
	// or anywhere but the move's source (the "node" filter).
	Nodes        []NodeID
	ExcludeNodes []NodeID
}
