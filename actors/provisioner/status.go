package provisioner

import (
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/norsk-oss/norsk-manager/proto/managerpb"
)

// Status is pool get's view of what the provisioners of pool did: per
// tier with a provisioner, the engine-created nodes running and being
// created, and the offerings backed off at now (Pool.tier_status).
func Status(pool *managerpb.Pool, nodes []Node, now time.Time) []*managerpb.PoolTierStatus {
	offs := Backoffs(nodes, now)
	var out []*managerpb.PoolTierStatus
	for _, t := range pool.GetTiers() {
		if t.GetProvisioner() == nil {
			continue
		}
		st := &managerpb.PoolTierStatus{Tier: t.GetName()}
		for _, n := range nodes {
			if n.Pool != pool.GetName() || n.Tier != t.GetName() {
				continue
			}
			switch n.State {
			case Running:
				st.NodesRunning++
			case Creating:
				st.NodesCreating++
			}
		}
		for _, b := range offs {
			if b.Pool == pool.GetName() && b.Tier == t.GetName() {
				st.BackedOff = append(st.BackedOff, &managerpb.OfferingBackoff{Offering: b.Offering, Until: timestamppb.New(b.Until), Reason: b.Reason})
			}
		}
		out = append(out, st)
	}
	return out
}
