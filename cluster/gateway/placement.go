package gateway

import (
	"context"

	"github.com/norsk-oss/norsk-manager/actors/placement"
	"github.com/norsk-oss/norsk-manager/actors/roles"
	"github.com/norsk-oss/norsk-manager/proto/commonpb"
	"github.com/norsk-oss/norsk-manager/proto/internalpb"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
)

// PlacementExplainer is the placement engine running on this manager, as
// GetPlacement reads it (*placement.Engine).
type PlacementExplainer interface {
	// Explain returns the engine's memory of job's roles.
	Explain(job string) []placement.RoleExplanation
}

// GetPlacement answers where each role of a job runs and, for a role not
// placed, the placement engine's last attempt, from the job record on any
// manager (docs/design/placement.md, "Explain"): the node, and the pool,
// tier and degradation of the engine's note on the instance; the failure
// the engine recorded (rate-limited, so up to 30 s old). On the leader the
// engine's memory is fresher and wins: its last failure of a role not
// placed, and its decision for an instance recorded without a note.
// InvalidArgument for a bad job_id; NotFound for an unknown job.
func (s *Server) GetPlacement(ctx context.Context, in *commonpb.JobId) (*managerpb.PlacementInfo, error) {
	id, err := jobID("job_id", in)
	if err != nil {
		return nil, err
	}
	rec, err := s.readJob(ctx, id)
	if err != nil {
		return nil, err
	}
	j := rec.GetJob().GetJob()
	out := &managerpb.PlacementInfo{JobId: id, AutoPlaced: j.GetAutoPlacement() != nil, TerminalReason: j.GetTerminalState().GetFailureReason()}
	var eng PlacementExplainer
	if s.cfg.Placement != nil {
		eng = s.cfg.Placement()
	}
	known := map[string]placement.RoleExplanation{}
	if eng != nil {
		for _, x := range eng.Explain(id) {
			known[x.Role] = x
		}
	}
	running := map[string]bool{}
	for _, inst := range rec.GetInstances() {
		rp := rolePlacement(inst)
		// A move's role ("primary~2") is its logical role here.
		logical := roles.LogicalRole(inst.GetRole())
		if d := known[logical].Decided; inst.GetPlacement() == nil && d != nil && d.Node == inst.GetNodeId() {
			rp.Tier, rp.DegradedDomains = d.Tier, d.Degraded
		}
		running[logical] = true
		out.Roles = append(out.Roles, rp)
	}
	for _, role := range []string{"primary", "backup"} {
		if running[role] {
			continue
		}
		if x, ok := known[role]; ok && x.Failure != nil {
			out.Roles = append(out.Roles, &managerpb.RolePlacement{Role: role, LastAttempt: placement.AttemptOf(x.Failure)})
			continue
		}
		for _, f := range rec.GetPlacementFailures() {
			if f.GetRole() == role && !f.GetCleared() {
				out.Roles = append(out.Roles, &managerpb.RolePlacement{Role: role, LastAttempt: f.GetAttempt()})
			}
		}
	}
	return out, nil
}

// rolePlacement is where inst runs, with the engine's note on it.
func rolePlacement(inst *internalpb.Instance) *managerpb.RolePlacement {
	n := inst.GetPlacement()
	return &managerpb.RolePlacement{Role: inst.GetRole(), NodeId: inst.GetNodeId(), Pool: n.GetPool(), Tier: n.GetTier(),
		DegradedDomains: n.GetDegraded(), Degradation: n.GetDegradation()}
}
