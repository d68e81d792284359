package clienttest

import (
	"context"
	"fmt"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/norsk-oss/norsk-manager/proto/commonpb"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
	"github.com/norsk-oss/norsk-manager/proto/workerauth"
)

// ListNodes returns the nodes sorted by id, paged as SetPageSize says.
func (m *Manager) ListNodes(_ context.Context, in *managerpb.ListNodesRequest) (*managerpb.ListNodesResponse, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.injectedLocked("ListNodes"); err != nil {
		return nil, err
	}
	resp := &managerpb.ListNodesResponse{}
	ids, next := m.pageLocked(sortedKeys(m.mu.nodes), in.GetPageSize(), in.GetPageToken())
	for _, id := range ids {
		resp.Nodes = append(resp.Nodes, proto.Clone(m.mu.nodes[id]).(*managerpb.NodeInfo))
	}
	resp.NextPageToken = next
	return resp, nil
}

// SetPageSize makes ListNodes and ListClusterNodes answer at most n
// entries a page (0: every entry, the default), with a next_page_token
// as the manager's (docs/design/protocol.md, "Paging"): a client under
// test must follow the tokens to see every node.
func (m *Manager) SetPageSize(n int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.mu.pageSize = n
}

// pageLocked returns the ids after token (the last id of the previous
// page), at most the smaller of size and the page size set, and the token
// of the next page ("" on the last).
func (m *Manager) pageLocked(ids []string, size uint32, token string) ([]string, string) {
	if token != "" {
		i := 0
		for i < len(ids) && ids[i] <= token {
			i++
		}
		ids = ids[i:]
	}
	n := m.mu.pageSize
	if size > 0 && (n == 0 || int(size) < n) {
		n = int(size)
	}
	if n == 0 || len(ids) <= n {
		return ids, ""
	}
	return ids[:n], ids[n-1]
}

// CreateMockNode adds a started, connected mock node and publishes
// node_starting and node_started.
func (m *Manager) CreateMockNode(_ context.Context, in *managerpb.CreateMockNodeRequest) (*emptypb.Empty, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.injectedLocked("CreateMockNode"); err != nil {
		return nil, err
	}
	id := in.GetNodeId().GetNodeId()
	if id == "" {
		return nil, status.Error(codes.InvalidArgument, "node_id: must not be empty")
	}
	if _, ok := m.mu.nodes[id]; ok {
		return nil, status.Errorf(codes.AlreadyExists, "node %q already exists", id)
	}
	m.addNodeLocked(id, in.GetTags(), managerpb.NodeProvider_NODE_PROVIDER_MOCK)
	return &emptypb.Empty{}, nil
}

// addNodeLocked records a started node and publishes its events.
func (m *Manager) addNodeLocked(id string, tags map[string]string, provider managerpb.NodeProvider) *managerpb.NodeInfo {
	md := &commonpb.NodeMetadata{NodeId: &commonpb.NodeId{NodeId: id}, Tags: tags, CreatedAt: m.stamp()}
	running := &commonpb.RunningNodeMetadata{PrivateIpAddress: "127.0.0.1"}
	node := &managerpb.NodeInfo{
		Metadata: md, RunningMetadata: running, Provider: provider,
		State: managerpb.NodeLifecycle_NODE_LIFECYCLE_STARTED, Connected: true, LastSeen: m.stamp(),
	}
	m.mu.nodes[id] = node
	m.mu.events.appendLocked(&managerpb.EventStreamEvent{Event: &managerpb.EventStreamEvent_NodeStarting{
		NodeStarting: &managerpb.NodeStarting{NodeMetadata: proto.Clone(md).(*commonpb.NodeMetadata)},
	}})
	m.mu.events.appendLocked(&managerpb.EventStreamEvent{Event: &managerpb.EventStreamEvent_NodeStarted{
		NodeStarted: &managerpb.NodeStarted{
			NodeMetadata:        proto.Clone(md).(*commonpb.NodeMetadata),
			RunningNodeMetadata: proto.Clone(running).(*commonpb.RunningNodeMetadata),
		},
	}})
	return node
}

// TerminateNode stops a node's jobs, marks it stopped and publishes
// node_stopping (USER_REQUESTED) and node_stopped.
func (m *Manager) TerminateNode(_ context.Context, in *commonpb.NodeId) (*emptypb.Empty, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.injectedLocked("TerminateNode"); err != nil {
		return nil, err
	}
	if _, ok := m.mu.nodes[in.GetNodeId()]; !ok {
		return nil, status.Errorf(codes.NotFound, "node %q not found", in.GetNodeId())
	}
	m.stopNodeLocked(in.GetNodeId(), managerpb.NodeStopping_USER_REQUESTED)
	return &emptypb.Empty{}, nil
}

// stopNodeLocked stops the jobs of node id, marks it stopped and publishes
// its events.
func (m *Manager) stopNodeLocked(id string, reason managerpb.NodeStopping_Reason) {
	node := m.mu.nodes[id]
	if node.GetState() == managerpb.NodeLifecycle_NODE_LIFECYCLE_STOPPED {
		return
	}
	for _, jid := range sortedKeys(m.mu.jobs) {
		j := m.mu.jobs[jid]
		stopped := false
		for i := len(j.instances) - 1; i >= 0; i-- {
			if j.instances[i].GetNodeId().GetNodeId() == id {
				m.stopInstanceLocked(j, i, managerpb.JobHistoryJobStopping_JOB_STOPPED_NODE_TERMINATED)
				stopped = true
			}
		}
		if stopped {
			m.publishJobLocked(j)
		}
	}
	node.State, node.Connected, node.StopReason = managerpb.NodeLifecycle_NODE_LIFECYCLE_STOPPED, false, reason.Enum()
	nid := &commonpb.NodeId{NodeId: id}
	m.mu.events.appendLocked(&managerpb.EventStreamEvent{Event: &managerpb.EventStreamEvent_NodeStopping{
		NodeStopping: &managerpb.NodeStopping{NodeId: nid, Reason: reason},
	}})
	m.mu.events.appendLocked(&managerpb.EventStreamEvent{Event: &managerpb.EventStreamEvent_NodeStopped{
		NodeStopped: &managerpb.NodeStopped{NodeId: proto.Clone(nid).(*commonpb.NodeId)},
	}})
}

// RegisterClusterNode mints a slot "node-<n>" with token "token-<n>".
func (m *Manager) RegisterClusterNode(_ context.Context, in *managerpb.RegisterClusterNodeRequest) (*managerpb.RegisterClusterNodeResponse, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.injectedLocked("RegisterClusterNode"); err != nil {
		return nil, err
	}
	if n := len(in.GetNodeName()); n == 0 || n > 128 {
		return nil, status.Error(codes.InvalidArgument, "node_name: must be 1-128 characters")
	}
	seq := m.nextLocked()
	id, token := idString("node", seq), idString("token", seq)
	m.mu.slots[id] = &managerpb.ClusterNode{
		Name: in.GetNodeName(), NodeId: &commonpb.NodeId{NodeId: id}, Token: token,
		RegisteredAt: m.stamp(), Tags: in.GetTags(), State: managerpb.NodeLifecycle_NODE_LIFECYCLE_REGISTERED,
	}
	return &managerpb.RegisterClusterNodeResponse{NodeId: &commonpb.NodeId{NodeId: id}, Token: token}, nil
}

// ListClusterNodes returns the slots sorted by node id, paged as
// SetPageSize says.
func (m *Manager) ListClusterNodes(_ context.Context, in *managerpb.ListClusterNodesRequest) (*managerpb.ListClusterNodesResponse, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.injectedLocked("ListClusterNodes"); err != nil {
		return nil, err
	}
	resp := &managerpb.ListClusterNodesResponse{}
	ids, next := m.pageLocked(sortedKeys(m.mu.slots), in.GetPageSize(), in.GetPageToken())
	for _, id := range ids {
		resp.Nodes = append(resp.Nodes, proto.Clone(m.mu.slots[id]).(*managerpb.ClusterNode))
	}
	resp.NextPageToken = next
	return resp, nil
}

// DeregisterClusterNode removes a slot, stopping its node if a worker is
// bound.
func (m *Manager) DeregisterClusterNode(_ context.Context, in *commonpb.NodeId) (*emptypb.Empty, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.injectedLocked("DeregisterClusterNode"); err != nil {
		return nil, err
	}
	id := in.GetNodeId()
	if _, ok := m.mu.slots[id]; !ok {
		return nil, status.Errorf(codes.NotFound, "cluster node %q not found", id)
	}
	delete(m.mu.slots, id)
	if _, ok := m.mu.nodes[id]; ok {
		m.stopNodeLocked(id, managerpb.NodeStopping_USER_REQUESTED)
	}
	return &emptypb.Empty{}, nil
}

// ClusterMemberRegister binds a worker to the slot of its token and starts
// the slot's node (credential "credential-<node id>").
func (m *Manager) ClusterMemberRegister(_ context.Context, in *managerpb.ClusterMemberRegisterRequest) (*managerpb.ClusterMemberRegisterResponse, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.injectedLocked("ClusterMemberRegister"); err != nil {
		return nil, err
	}
	var slot *managerpb.ClusterNode
	for _, s := range m.mu.slots {
		if s.GetToken() == in.GetToken() && in.GetToken() != "" {
			slot = s
		}
	}
	if slot == nil {
		return nil, WithReason(codes.Unauthenticated, workerauth.ReasonTokenUnknown, "unknown registration token")
	}
	id := slot.GetNodeId().GetNodeId()
	credential := "credential-" + id
	if slot.GetTokenUsed() && in.GetNodeCredential() != credential {
		return nil, WithReason(codes.PermissionDenied, workerauth.ReasonSlotBound, fmt.Sprintf("cluster slot %q is already bound to a worker", id))
	}
	slot.Active, slot.TokenUsed, slot.Address, slot.Port = true, true, in.GetAddress(), in.GetPort()
	slot.Hardware, slot.LastSeen = in.GetHardware(), m.stamp()
	slot.State = managerpb.NodeLifecycle_NODE_LIFECYCLE_STARTED
	if n, ok := m.mu.nodes[id]; !ok || n.GetState() == managerpb.NodeLifecycle_NODE_LIFECYCLE_STOPPED {
		m.addNodeLocked(id, slot.GetTags(), managerpb.NodeProvider_NODE_PROVIDER_CLUSTER)
	}
	return &managerpb.ClusterMemberRegisterResponse{
		NodeId: &commonpb.NodeId{NodeId: id}, NodeCredential: credential, NodeName: slot.GetName(),
	}, nil
}

// WithReason returns a status error with a google.rpc.ErrorInfo detail in
// the manager's domain, as the real manager words registration refusals.
func WithReason(code codes.Code, reason, msg string) error {
	st, err := status.New(code, msg).WithDetails(&errdetails.ErrorInfo{Reason: reason, Domain: workerauth.ErrorDomain})
	if err != nil {
		return status.Error(code, msg)
	}
	return st.Err()
}
