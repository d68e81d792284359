package gateway

import (
	"context"

	"google.golang.org/grpc/peer"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/norsk-oss/norsk-manager/proto/commonpb"
	"github.com/norsk-oss/norsk-manager/proto/internalpb"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
)

// maxReasonLen bounds an operator's cordon or drain reason (bytes of
// UTF-8): a sentence or two, kept in the node record and its events.
const maxReasonLen = 1024

// CordonNode stops new placements on a node; the job instances on it keep
// running. Cordoning a draining node stops its drain (the jobs not yet
// moved stay). InvalidArgument for a bad node_id or reason; NotFound for
// an unknown node; FailedPrecondition for a terminated node. Answers once
// the state is committed; a node already cordoned answers OK and nothing
// is written.
func (s *Server) CordonNode(ctx context.Context, in *managerpb.CordonNodeRequest) (*emptypb.Empty, error) {
	return s.setScheduling(ctx, in.GetNodeId(), managerpb.NodeScheduling_NODE_SCHEDULING_CORDONED, in.GetReason())
}

// DrainNode cordons a node and marks it draining: the placement engine
// (next step) moves the job instances placed on it elsewhere, one replica
// of a bundle at a time. Errors and idempotence as CordonNode.
func (s *Server) DrainNode(ctx context.Context, in *managerpb.DrainNodeRequest) (*emptypb.Empty, error) {
	return s.setScheduling(ctx, in.GetNodeId(), managerpb.NodeScheduling_NODE_SCHEDULING_DRAINING, in.GetReason())
}

// UncordonNode makes a cordoned or draining node eligible for new
// placements again (a drain in progress ends; what was moved stays where
// it went). Errors and idempotence as CordonNode.
func (s *Server) UncordonNode(ctx context.Context, in *commonpb.NodeId) (*emptypb.Empty, error) {
	return s.setScheduling(ctx, in, managerpb.NodeScheduling_NODE_SCHEDULING_ELIGIBLE, "")
}

// setScheduling validates the request and sends SetScheduling to the
// node's grain, naming the caller by its address.
func (s *Server) setScheduling(ctx context.Context, in *commonpb.NodeId, want managerpb.NodeScheduling, reason string) (*emptypb.Empty, error) {
	id, err := nodeID("node_id", in)
	if err != nil {
		return nil, err
	}
	if reason != "" {
		if err := checkText("reason", reason, maxReasonLen); err != nil {
			return nil, err
		}
	}
	_, err = s.node(ctx, id, &internalpb.NodeCommand{Cmd: &internalpb.NodeCommand_SetScheduling{SetScheduling: &internalpb.SetScheduling{
		State: want, Reason: reason, RequestedBy: callerAddr(ctx)}}})
	return empty(err)
}

// callerAddr is the API client's address as this manager saw it ("" when
// the transport gives none).
func callerAddr(ctx context.Context) string {
	if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
		return p.Addr.String()
	}
	return ""
}
