package gateway

import (
	"context"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/norsk-oss/norsk-manager/actors/placement"
	"github.com/norsk-oss/norsk-manager/proto/commonpb"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
)

// PlacementExplainer is the placement engine running on this manager, as
// GetPlacement reads it (*placement.Engine).
type PlacementExplainer interface {
	// Explain returns the engine's memory of job's roles.
	Explain(job string) []placement.RoleExplanation
}

// GetPlacement answers where each role of a job runs (node from the job
// record, on any manager; tier and degraded domains when this manager's
// engine decided it) and, for a role not placed, the engine's last
// attempt. InvalidArgument for a bad job_id; NotFound for an unknown job;
// FailedPrecondition naming the leader when this manager runs no engine
// and a role of an auto-placed job is not placed, since only the leader's
// engine knows why (docs/design/placement.md, "Explain").
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
		rp := &managerpb.RolePlacement{Role: inst.GetRole(), NodeId: inst.GetNodeId()}
		if d := known[inst.GetRole()].Decided; d != nil && d.Node == inst.GetNodeId() {
			rp.Tier, rp.DegradedDomains = d.Tier, d.Degraded
		}
		running[inst.GetRole()] = true
		out.Roles = append(out.Roles, rp)
	}
	if eng == nil {
		if out.AutoPlaced && out.TerminalReason == "" && len(running) == 0 {
			leader := ""
			if s.cfg.Leader != nil {
				leader = s.cfg.Leader()
			}
			if leader == "" {
				return nil, status.Errorf(codes.FailedPrecondition, "job %q is not placed and this manager does not run the placement engine (no leader known): ask the leader once one is elected", id)
			}
			return nil, status.Errorf(codes.FailedPrecondition, "job %q is not placed and this manager does not run the placement engine: ask the leader, manager %s", id, leader)
		}
		return out, nil
	}
	for _, role := range []string{"primary", "backup"} {
		x, ok := known[role]
		if !ok || running[role] || x.Failure == nil {
			continue
		}
		out.Roles = append(out.Roles, &managerpb.RolePlacement{Role: role, LastAttempt: attemptOf(x.Failure)})
	}
	return out, nil
}

// attemptOf is the wire form of an engine failure.
func attemptOf(u *placement.Unplaced) *managerpb.PlacementAttempt {
	a := &managerpb.PlacementAttempt{Since: timestamppb.New(u.Since), Reason: u.Reason}
	if m := u.Metrics; m != nil {
		a.NodesEvaluated = uint32(m.NodesEvaluated)
		for _, f := range m.Filtered {
			a.Filters = append(a.Filters, &managerpb.PlacementFilterCount{Filter: f.Filter, NodesRemoved: uint32(f.Nodes), Detail: f.String()})
		}
	}
	return a
}
