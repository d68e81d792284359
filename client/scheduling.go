package client

import (
	"context"

	"github.com/norsk-oss/norsk-manager/proto/managerpb"
)

// CordonNode stops new placements on node (its running jobs stay);
// reason (may be empty) is shown with the node. A draining node's drain
// stops. Idempotent: a node already cordoned is left as it is.
// codes.NotFound for an unknown node, codes.FailedPrecondition for a
// terminated one, codes.InvalidArgument for a bad reason.
func (m *NorskManager) CordonNode(ctx context.Context, node NodeID, reason string) error {
	if node == "" {
		return invalidArg("CordonNode", "node id is empty")
	}
	_, err := unary(ctx, m, "CordonNode", &managerpb.CordonNodeRequest{NodeId: nodeIDpb(node), Reason: reason}, m.api.CordonNode)
	return err
}

// UncordonNode makes node eligible for new placements again, ending a
// drain. Idempotent; errors as CordonNode.
func (m *NorskManager) UncordonNode(ctx context.Context, node NodeID) error {
	if node == "" {
		return invalidArg("UncordonNode", "node id is empty")
	}
	_, err := unary(ctx, m, "UncordonNode", nodeIDpb(node), m.api.UncordonNode)
	return err
}

// DrainNode cordons node and marks it draining: the placement engine
// moves the jobs placed on it elsewhere, one replica of a bundle at a
// time. Idempotent; errors as CordonNode.
func (m *NorskManager) DrainNode(ctx context.Context, node NodeID, reason string) error {
	if node == "" {
		return invalidArg("DrainNode", "node id is empty")
	}
	_, err := unary(ctx, m, "DrainNode", &managerpb.DrainNodeRequest{NodeId: nodeIDpb(node), Reason: reason}, m.api.DrainNode)
	return err
}
