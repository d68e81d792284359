package clienttest

import (
	"context"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/norsk-oss/norsk-manager/proto/commonpb"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
)

// CordonNode sets the node's scheduling state to CORDONED, as the real
// manager does (NotFound for an unknown node; no change, no event when
// already cordoned).
func (m *Manager) CordonNode(_ context.Context, in *managerpb.CordonNodeRequest) (*emptypb.Empty, error) {
	return m.setScheduling("CordonNode", in.GetNodeId(), managerpb.NodeScheduling_NODE_SCHEDULING_CORDONED, in.GetReason())
}

// DrainNode sets the node's scheduling state to DRAINING.
func (m *Manager) DrainNode(_ context.Context, in *managerpb.DrainNodeRequest) (*emptypb.Empty, error) {
	return m.setScheduling("DrainNode", in.GetNodeId(), managerpb.NodeScheduling_NODE_SCHEDULING_DRAINING, in.GetReason())
}

// UncordonNode sets the node's scheduling state to ELIGIBLE.
func (m *Manager) UncordonNode(_ context.Context, in *commonpb.NodeId) (*emptypb.Empty, error) {
	return m.setScheduling("UncordonNode", in, managerpb.NodeScheduling_NODE_SCHEDULING_ELIGIBLE, "")
}

func (m *Manager) setScheduling(method string, id *commonpb.NodeId, want managerpb.NodeScheduling, reason string) (*emptypb.Empty, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.injectedLocked(method); err != nil {
		return nil, err
	}
	n, ok := m.mu.nodes[id.GetNodeId()]
	if !ok {
		return nil, status.Errorf(codes.NotFound, "node %q not found", id.GetNodeId())
	}
	if n.GetScheduling().GetState() == want {
		return &emptypb.Empty{}, nil
	}
	n.Scheduling = &managerpb.NodeSchedulingState{State: want, Reason: reason, RequestedBy: "127.0.0.1", Since: m.stamp()}
	kind := map[managerpb.NodeScheduling]managerpb.NodeAlert_Kind{
		managerpb.NodeScheduling_NODE_SCHEDULING_ELIGIBLE: managerpb.NodeAlert_UNCORDONED,
		managerpb.NodeScheduling_NODE_SCHEDULING_CORDONED: managerpb.NodeAlert_CORDONED,
		managerpb.NodeScheduling_NODE_SCHEDULING_DRAINING: managerpb.NodeAlert_DRAINING,
	}[want]
	m.mu.events.appendLocked(&managerpb.EventStreamEvent{Event: &managerpb.EventStreamEvent_NodeAlert{NodeAlert: &managerpb.NodeAlert{
		NodeId: id, Kind: kind, Message: "node " + id.GetNodeId() + " " + method, At: m.stamp()}}})
	return &emptypb.Empty{}, nil
}
