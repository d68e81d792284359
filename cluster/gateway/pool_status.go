package gateway

import (
	"fmt"

	"github.com/norsk-oss/norsk-manager/actors/provisioner"
	"github.com/norsk-oss/norsk-manager/persistence"
	"github.com/norsk-oss/norsk-manager/proto/internalpb"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
)

// withTierStatus sets the output tier_status of each pool (GetPool,
// ListPools) from the node records read by r: what the engine created per
// tier with a provisioner, and the offerings backed off now after capacity
// errors (provisioner.Status). Pools without a provisioner are left as
// they are, and the node records are not read for them.
func (s *Server) withTierStatus(r *persistence.Reader, pools ...*managerpb.Pool) error {
	need := false
	for _, p := range pools {
		for _, t := range p.GetTiers() {
			need = need || t.GetProvisioner() != nil
		}
	}
	if !need {
		return nil
	}
	var nodes []provisioner.Node
	if err := r.Nodes(func(rec *internalpb.NodeRecord) error {
		if n, ok := provisioner.NodeOf(rec); ok {
			nodes = append(nodes, n)
		}
		return nil
	}); err != nil {
		return fmt.Errorf("read nodes for the pools' tier status: %w", err)
	}
	now := s.cfg.Clock()
	for _, p := range pools {
		p.TierStatus = provisioner.Status(p, nodes, now)
	}
	return nil
}
