package client

import (
	"context"

	"github.com/norsk-oss/norsk-manager/proto/commonpb"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
)

// nodeIDpb converts id to its wire form.
func nodeIDpb(id NodeID) *commonpb.NodeId { return &commonpb.NodeId{NodeId: string(id)} }

// ListNodes returns every node the manager knows about, of every provider
// and in every lifecycle state, in node-id order, reading as many pages as
// the manager answers (a large fleet does not fit one answer).
func (m *NorskManager) ListNodes(ctx context.Context) ([]*managerpb.NodeInfo, error) {
	var out []*managerpb.NodeInfo
	err := allPages(ctx, "ListNodes", func(ctx context.Context, token string) (string, int, error) {
		resp, err := unary(ctx, m, "ListNodes", &managerpb.ListNodesRequest{PageToken: token}, m.api.ListNodes)
		out = append(out, resp.GetNodes()...)
		return resp.GetNextPageToken(), len(resp.GetNodes()), err
	})
	return out, err
}

// TerminateNode forcibly stops the node id and the jobs running on it
// (codes.NotFound if there is no such node).
func (m *NorskManager) TerminateNode(ctx context.Context, id NodeID) error {
	if id == "" {
		return invalidArg("TerminateNode", "node id is empty")
	}
	_, err := unary(ctx, m, "TerminateNode", nodeIDpb(id), m.api.TerminateNode)
	return err
}

// CreateMockNode provisions the node id from the manager's test-only mock
// pool (NORSK_MOCK_WORKER_URLS) with tags (may be nil).
// codes.ResourceExhausted means the pool is empty, codes.AlreadyExists that
// the id is taken.
func (m *NorskManager) CreateMockNode(ctx context.Context, id NodeID, tags map[string]string) error {
	if id == "" {
		return invalidArg("CreateMockNode", "node id is empty")
	}
	req := &managerpb.CreateMockNodeRequest{NodeId: nodeIDpb(id), Tags: tags}
	_, err := unary(ctx, m, "CreateMockNode", req, m.api.CreateMockNode)
	return err
}

// CreateAwsNode spawns an EC2 instance running the worker image and makes it
// available for jobs once its worker connects. req is sent as is.
func (m *NorskManager) CreateAwsNode(ctx context.Context, req *managerpb.CreateAwsNodeRequest) error {
	if req == nil {
		return invalidArg("CreateAwsNode", "request is nil")
	}
	_, err := unary(ctx, m, "CreateAwsNode", req, m.api.CreateAwsNode)
	return err
}

// CreateOciNode spawns an OCI instance running the worker image and makes it
// available for jobs once its worker connects. req is sent as is.
func (m *NorskManager) CreateOciNode(ctx context.Context, req *managerpb.CreateOciNodeRequest) error {
	if req == nil {
		return invalidArg("CreateOciNode", "request is nil")
	}
	_, err := unary(ctx, m, "CreateOciNode", req, m.api.CreateOciNode)
	return err
}

// UpdatePhysicalNode asks the physical node id to move to daemonVersion of
// the worker daemon.
func (m *NorskManager) UpdatePhysicalNode(ctx context.Context, id NodeID, daemonVersion string) error {
	if id == "" {
		return invalidArg("UpdatePhysicalNode", "node id is empty")
	}
	req := &managerpb.UpdatePhysicalNodeRequest{Id: string(id), DaemonVersion: daemonVersion}
	_, err := unary(ctx, m, "UpdatePhysicalNode", req, m.api.UpdatePhysicalNode)
	return err
}

// RegisterClusterNode pre-registers a cluster slot called name (1-128
// printable characters; the manager checks) whose node gets tags (may be
// nil). It returns the slot's node id and the one-shot registration token to
// hand to the worker (norsk-ctl --mode=worker --token=…). Until a worker
// registers with the token, the slot is registered but inactive.
func (m *NorskManager) RegisterClusterNode(ctx context.Context, name string, tags map[string]string) (NodeID, string, error) {
	if name == "" {
		return "", "", invalidArg("RegisterClusterNode", "node name is empty")
	}
	req := &managerpb.RegisterClusterNodeRequest{NodeName: name, Tags: tags}
	resp, err := unary(ctx, m, "RegisterClusterNode", req, m.api.RegisterClusterNode)
	if err != nil {
		return "", "", err
	}
	return NodeID(resp.GetNodeId().GetNodeId()), resp.GetToken(), nil
}

// ListClusterNodes returns every registered cluster slot, active or not,
// with its token (operators may need to copy it again).
// Paged as ListNodes.
func (m *NorskManager) ListClusterNodes(ctx context.Context) ([]*managerpb.ClusterNode, error) {
	var out []*managerpb.ClusterNode
	err := allPages(ctx, "ListClusterNodes", func(ctx context.Context, token string) (string, int, error) {
		resp, err := unary(ctx, m, "ListClusterNodes", &managerpb.ListClusterNodesRequest{PageToken: token}, m.api.ListClusterNodes)
		out = append(out, resp.GetNodes()...)
		return resp.GetNextPageToken(), len(resp.GetNodes()), err
	})
	return out, err
}

// DeregisterClusterNode removes the cluster slot of node id: a connected
// worker's stream is closed, its running jobs are stopped and the token is
// invalidated (codes.NotFound if there is no such slot).
func (m *NorskManager) DeregisterClusterNode(ctx context.Context, id NodeID) error {
	if id == "" {
		return invalidArg("DeregisterClusterNode", "node id is empty")
	}
	_, err := unary(ctx, m, "DeregisterClusterNode", nodeIDpb(id), m.api.DeregisterClusterNode)
	return err
}

// ClusterMemberRegister is the worker-facing registration: the worker
// presents its token and the address and port the manager dials back.
// codes.Unauthenticated means the token is unknown or deregistered (or the
// node credential is wrong for an already bound slot). Most callers never
// use it: norsk-ctl --mode=worker does.
func (m *NorskManager) ClusterMemberRegister(ctx context.Context, req *managerpb.ClusterMemberRegisterRequest) (*managerpb.ClusterMemberRegisterResponse, error) {
	if req == nil {
		return nil, invalidArg("ClusterMemberRegister", "request is nil")
	}
	return unary(ctx, m, "ClusterMemberRegister", req, m.api.ClusterMemberRegister)
}

// ClusterMembers returns the managers of the HA cluster with their Raft
// state, as the manager answering sees them (a single manager answers with
// itself). Retried on another manager on Unavailable (a read).
func (m *NorskManager) ClusterMembers(ctx context.Context) (*managerpb.ClusterMembersResponse, error) {
	return unary(ctx, m, "ClusterMembers", &managerpb.ClusterMembersRequest{}, m.api.ClusterMembers)
}

// StopOrphan stops the orphan (job, role) on node now: a job the node's
// worker runs that the manager's store does not know, otherwise kept
// running until its grace ends (NodeInfo.orphans). codes.NotFound if the
// node has no such orphan, codes.FailedPrecondition if its worker session
// is down.
func (m *NorskManager) StopOrphan(ctx context.Context, node NodeID, job JobID, role string) error {
	if node == "" || job == "" || role == "" {
		return invalidArg("StopOrphan", "node id, job id and role are required")
	}
	req := &managerpb.StopOrphanRequest{NodeId: nodeIDpb(node), JobKey: &commonpb.ActiveJobKey{JobId: &commonpb.JobId{JobId: string(job)}, Role: role}}
	_, err := unary(ctx, m, "StopOrphan", req, m.api.StopOrphan)
	return err
}
