package provisioner

import (
	"strings"
	"time"

	"github.com/norsk-oss/norsk-manager/proto/commonpb"
	"github.com/norsk-oss/norsk-manager/proto/internalpb"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
)

// State is where an engine-created node is in its life, as the planner
// needs it.
type State uint8

const (
	// Creating: recorded (or its create sent), its worker not up yet: room
	// already coming for the roles it was sized for.
	Creating State = iota + 1
	// Running: its worker is up and has reported its resources; the
	// scheduler places on it.
	Running
	// Stopped: it failed or was terminated; it counts for nothing but
	// the backoff of its offering and the next node number.
	Stopped
)

// Node is one node the engine created (NodeRecord.provisioned set), or one
// whose create is in flight.
type Node struct {
	ID       string
	Pool     string
	Tier     string
	Offering string
	State    State
	// Capacity and GPU are the offering's units (what the planner packs
	// into while the node is being created).
	Capacity float64
	GPU      float64
	// ForJobs are the waiting roles ("job/role") it was sized for.
	ForJobs []string
	// SecurityGroups are the security group names of its instance.
	SecurityGroups []string
	// CreatedAt is when the node was recorded.
	CreatedAt time.Time
	// CapacityError is set when its create failed because the cloud had
	// no capacity for the offering (ErrCapacity in CloudNode.last_error).
	CapacityError bool
	// CreateFailed is set when its create failed for any reason
	// (NodeStopping CREATE_FAILED: the launch was refused); the offering
	// is backed off (Backoffs).
	CreateFailed bool
	// LastError is the cloud's last error, for the backoff's reason.
	LastError string
	// MissingGroups are the security groups its launch found missing in
	// Region (providers.ErrSecurityGroupNotFound in CloudNode.last_error,
	// read by MissingGroupsOf): the fault of the jobs or the tier that
	// named them, not of its offering, so Backoffs skips it and Plan keeps
	// the groups out for GroupRetry from CreatedAt (groups.go).
	MissingGroups []string
	Region        string
	// Hello is set once its worker reported its resources; Offers is the
	// product-template catalogue it reported (NodeResources.templates),
	// which TemplateLies compares with its tier's declaration.
	Hello  bool
	Offers []*commonpb.ProductTemplateOffer
}

// capacityErrorText is the text of providers.ErrCapacity, which wraps
// every capacity failure of a launch (InsufficientInstanceCapacity, "Out
// of host capacity") and so starts CloudNode.last_error. Matched as text:
// the error crossed a record (STYLE §5, errors that cross a boundary).
const capacityErrorText = "providers: no capacity"

// NodeOf converts a node record; ok is false when the engine did not
// create the node (no provisioned mark): such nodes are not the
// planner's.
func NodeOf(rec *internalpb.NodeRecord) (Node, bool) {
	p := rec.GetProvisioned()
	if p == nil {
		return Node{}, false
	}
	n := Node{ID: rec.GetNodeId(), Pool: p.GetPool(), Tier: p.GetTier(), Offering: p.GetOffering(),
		Capacity: float64(p.GetCapacity()), GPU: float64(p.GetGpuCapacity()), ForJobs: p.GetForJobs(),
		SecurityGroups: p.GetSecurityGroups(), CreatedAt: rec.GetMetadata().GetCreatedAt().AsTime(),
		LastError: rec.GetCloud().GetLastError(),
		Hello:     rec.GetResources() != nil, Offers: rec.GetResources().GetTemplates()}
	switch rec.GetState() {
	case managerpb.NodeLifecycle_NODE_LIFECYCLE_STARTED:
		n.State = Running
		if rec.GetResources() == nil {
			// Up, but its worker has not said what it offers: the
			// scheduler sees no room on it yet, so it is still room
			// coming (else a pass in between would create another).
			n.State = Creating
		}
	case managerpb.NodeLifecycle_NODE_LIFECYCLE_STOPPED:
		n.State = Stopped
		n.CreateFailed = rec.GetStopReason() == managerpb.NodeStopping_CREATE_FAILED
		n.CapacityError = n.CreateFailed && strings.Contains(n.LastError, capacityErrorText)
		if region, groups, ok := MissingGroupsOf(n.LastError); n.CreateFailed && ok {
			n.Region, n.MissingGroups = region, groups
		}
	default:
		n.State = Creating
	}
	return n, true
}
