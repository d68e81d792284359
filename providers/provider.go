// Package providers creates and terminates the cloud instances behind
// nodes: AWS EC2 (aws-sdk-go-v2) and Oracle OCI (oci-go-sdk). A Provider is
// called from the node grain's helper goroutines, never from an actor's
// mailbox: every method may block for the length of a cloud call and its
// retries, bounded by the context.
//
// Launches are idempotent per node create: the node id is the instance's
// NodeIDTag tag and the create's token is the launch call's idempotency
// token, so a manager killed mid-create finds the instance again (Find)
// instead of launching a second one. docs/design/providers.md describes the rules.
package providers

import (
	"context"
	"errors"
	"time"

	"github.com/norsk-oss/norsk-manager/proto/commonpb"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
)

// NodeIDTag is the instance tag (AWS) / freeform tag (OCI) holding the
// node id of the instance.
const NodeIDTag = "norsk-node-id"

// State is an instance's state as the node grain needs it.
type State uint8

const (
	// Pending: launched, not running yet (AWS pending, OCI PROVISIONING or
	// STARTING).
	Pending State = iota + 1
	// Running: the instance runs; its worker may register.
	Running
	// Gone: terminated, terminating or stopped: it will never run the
	// worker.
	Gone
)

// String returns the state's name, for logs.
func (s State) String() string {
	switch s {
	case Pending:
		return "pending"
	case Running:
		return "running"
	case Gone:
		return "gone"
	}
	return "unknown"
}

// Instance is a cloud instance of a node.
type Instance struct {
	// ID is the provider's instance id (i-…, ocid1.instance…).
	ID string
	// Location is where it runs: the AWS region or the OCI availability
	// domain; Describe and Terminate need it.
	Location string
	State    State
	// Running holds the addresses (private and public IPs and DNS names)
	// and provider metadata; set once known.
	Running *commonpb.RunningNodeMetadata
}

// LaunchSpec is what to launch for a node.
type LaunchSpec struct {
	// NodeID is the node's id, tagged on the instance (NodeIDTag).
	NodeID string
	// Token is the launch's idempotency token (EC2 ClientToken, OCI
	// opc-retry-token): the same for every attempt of one node's create,
	// different for a later node with the same id.
	Token string
	// Tags are the node's tags, added to the instance's tags.
	Tags map[string]string
	// UserData is the instance's boot script (plain text; the provider
	// encodes it as its API wants).
	UserData string
	// AWS or OCI is the request of CreateAwsNode or CreateOciNode.
	AWS *managerpb.CreateAwsNodeRequest
	OCI *managerpb.CreateOciNodeRequest
}

// launchToken returns spec.Token, or the node id when it is unset.
func launchToken(spec LaunchSpec) string {
	if spec.Token != "" {
		return spec.Token
	}
	return spec.NodeID
}

// Location returns where spec launches: the AWS region or the OCI
// availability domain.
func (s LaunchSpec) Location() string {
	if s.AWS != nil {
		return s.AWS.GetRegion()
	}
	return s.OCI.GetAvailabilityDomain()
}

// Provider launches, finds, describes and terminates instances.
type Provider interface {
	// Kind is the provider (NODE_PROVIDER_AWS or NODE_PROVIDER_OCI).
	Kind() managerpb.NodeProvider
	// Launch starts an instance for spec and returns it (usually Pending).
	// Throttling and transient errors are retried with backoff until ctx
	// ends; the error of a launch that cannot succeed (capacity, a bad
	// template or shape) wraps ErrCapacity or ErrRejected.
	Launch(ctx context.Context, spec LaunchSpec) (Instance, error)
	// Find returns the instance tagged with nodeID in location that is not
	// terminating or terminated (it may be Gone: stopped), or ok false if
	// there is none.
	Find(ctx context.Context, location, nodeID string) (inst Instance, ok bool, err error)
	// Describe returns the instance id in location; ErrNotFound if the
	// cloud no longer knows it.
	Describe(ctx context.Context, location, id string) (Instance, error)
	// Terminate terminates the instance id in location. An instance that
	// is already gone (or unknown) is not an error.
	Terminate(ctx context.Context, location, id string) error
	// Health returns the provider's health per location, for
	// initial_data_complete and provider_health_change.
	Health() *Health
}

// Errors of providers, wrapped with the cloud's own.
var (
	// ErrNotFound: the cloud does not know the instance.
	ErrNotFound = errors.New("providers: instance not found")
	// ErrCapacity: the cloud has no capacity for the instance type or
	// shape in that location now (InsufficientInstanceCapacity, "Out of
	// host capacity"). Not retried by Launch: the node fails with
	// CREATE_FAILED and the location's health drops.
	ErrCapacity = errors.New("providers: no capacity")
	// ErrRejected: the request cannot succeed as given (an unknown
	// template, shape, image, subnet or security group; bad credentials).
	ErrRejected = errors.New("providers: request rejected")
)

// Outcome classifies a cloud call for Health.
type Outcome uint8

const (
	// OK: the call succeeded. It does not clear earlier failures (a
	// successful describe says nothing about capacity).
	OK Outcome = iota
	// Launched: a launch succeeded: the location has capacity again.
	Launched
	// Throttled: the cloud asked us to slow down (RequestLimitExceeded,
	// 429).
	Throttled
	// NoCapacity: the cloud had no capacity.
	NoCapacity
	// Outage: the cloud failed (5xx, unavailable, network errors).
	Outage
)

// Backoff returns the delay before retry attempt n (0-based) of a cloud
// call: 200 ms doubling, at most 10 s.
func Backoff(n int) time.Duration {
	d := 200 * time.Millisecond
	for range n {
		d *= 2
		if d >= 10*time.Second {
			return 10 * time.Second
		}
	}
	return d
}
