package gateway

import (
	"context"
	"errors"
	"fmt"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/norsk-oss/norsk-manager/actors/node"
	"github.com/norsk-oss/norsk-manager/actors/placement"
	"github.com/norsk-oss/norsk-manager/actors/roles"
	"github.com/norsk-oss/norsk-manager/cluster/identity"
	"github.com/norsk-oss/norsk-manager/persistence"
	"github.com/norsk-oss/norsk-manager/proto/internalpb"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
)

// AnyNode is MigrateJobRequest.target_node_id's word for "the node the
// placement chain chooses" (an empty target_node_id means the same).
const AnyNode = "any"

// MigrateJob records a make-before-break move of a running role (see the
// rpc's doc in manager.proto and placement.md, "Moves"): the gateway
// checks the request, the target node's record (known, taking
// placements) and runs the placement chain on its replica
// (placement.CheckMove: FailedPrecondition with the chain's explanation
// when the target fits no node), the job grain checks the job and role and
// records the move, and the placement engine carries it out. The engine
// runs the chain again when it starts the target: a move that no longer
// fits then is backed out with the explanation in a migration_aborted
// event.
func (s *Server) MigrateJob(ctx context.Context, in *managerpb.MigrateJobRequest) (*managerpb.MigrateJobResponse, error) {
	id, err := jobID("job_id", in.GetJobId())
	if err != nil {
		return nil, err
	}
	if err := checkRole(in.GetRole()); err != nil {
		return nil, err
	}
	if in.GetReason() != "" {
		if err := checkText("reason", in.GetReason(), maxReasonLen); err != nil {
			return nil, err
		}
	}
	target := in.GetTargetNodeId()
	if target == AnyNode {
		target = ""
	}
	if target != "" {
		if err := checkID("target_node_id", target); err != nil {
			return nil, err
		}
		if err := s.checkMoveTarget(ctx, target); err != nil {
			return nil, err
		}
	}
	if s.cfg.Store != nil {
		if err := s.barrier(ctx); err != nil {
			return nil, err
		}
		err := placement.CheckMove(s.cfg.Store, s.cfg.Clock(), id, in.GetRole(), target)
		switch {
		case errors.Is(err, placement.ErrMoveDoesNotFit):
			return nil, status.Errorf(codes.FailedPrecondition, "target_node_id: %v", err)
		case errors.Is(err, placement.ErrMoveRefused):
			return nil, status.Errorf(codes.FailedPrecondition, "job_id: %v", err)
		case err != nil:
			return nil, err
		}
	}
	who := identity.NameOf(ctx)
	if who == identity.Anonymous {
		if a := callerAddr(ctx); a != "" {
			who = a
		}
	}
	r, err := s.job(ctx, id, &internalpb.JobCommand{Cmd: &internalpb.JobCommand_BeginMigration{BeginMigration: &internalpb.BeginMigration{
		Role: in.GetRole(), RequestedNodeId: target, Why: managerpb.Migration_MIGRATION_OPERATOR, Reason: in.GetReason(), Who: who}}})
	if err != nil {
		return nil, err
	}
	ms := r.GetJob().GetMigrations()
	if len(ms) == 0 {
		return nil, status.Errorf(codes.Internal, "job %q: the move was recorded but the record shows none", id)
	}
	return &managerpb.MigrateJobResponse{Migration: ms[len(ms)-1]}, nil
}

// checkMoveTarget answers FailedPrecondition, naming target_node_id, when
// node id has no record or takes no placements (not STARTED, cordoned or
// draining).
func (s *Server) checkMoveTarget(ctx context.Context, id string) error {
	var rec *internalpb.NodeRecord
	err := s.view(ctx, func(r *persistence.Reader) error {
		var err error
		rec, _, err = r.Node(id)
		return err
	})
	switch {
	case errors.Is(err, persistence.ErrNotFound):
		return status.Errorf(codes.FailedPrecondition, "target_node_id: node %q is not known", id)
	case err != nil:
		return err
	case rec.GetState() != managerpb.NodeLifecycle_NODE_LIFECYCLE_STARTED:
		return status.Errorf(codes.FailedPrecondition, "target_node_id: node %q is %s, not started: it takes no placements", id, rec.GetState())
	case node.Draining(rec):
		return status.Errorf(codes.FailedPrecondition, "target_node_id: node %q is draining: it takes no placements", id)
	case node.Cordoned(rec):
		return status.Errorf(codes.FailedPrecondition, "target_node_id: node %q is cordoned: it takes no placements (norsk-ctl node uncordon)", id)
	}
	return nil
}

// AbortMigration backs out a move in progress (see the rpc's doc in
// manager.proto): OK when the move already ended, is backing out, or
// never was; FailedPrecondition once its source is being stopped.
func (s *Server) AbortMigration(ctx context.Context, in *managerpb.AbortMigrationRequest) (*emptypb.Empty, error) {
	id, err := jobID("job_id", in.GetJobId())
	if err != nil {
		return nil, err
	}
	if err := checkText("source_role", in.GetSourceRole(), maxNameLen); err != nil {
		return nil, err
	}
	if err := checkText("target_role", in.GetTargetRole(), maxNameLen); err != nil {
		return nil, err
	}
	if !roles.IsMoved(in.GetTargetRole()) || roles.LogicalRole(in.GetTargetRole()) != roles.LogicalRole(in.GetSourceRole()) {
		return nil, invalid("target_role", "%q is not a move's target of %q (a move's target role is \"<logical role>~<n>\", as MigrateJob answered)",
			in.GetTargetRole(), in.GetSourceRole())
	}
	reason := in.GetReason()
	if reason != "" {
		if err := checkText("reason", reason, maxReasonLen); err != nil {
			return nil, err
		}
	} else {
		reason = fmt.Sprintf("aborted by %s", identity.NameOf(ctx))
	}
	_, err = s.job(ctx, id, &internalpb.JobCommand{Cmd: &internalpb.JobCommand_AbortMigration{AbortMigration: &internalpb.AbortMigration{
		SourceRole: in.GetSourceRole(), TargetRole: in.GetTargetRole(), Reason: reason}}})
	return empty(err)
}

// checkStartRole refuses, in an operator's StartJob, a role with "~": that
// is a move's role, started only by the placement engine (placement.md,
// "Moves"). StopJob of such a role by name stays allowed.
func checkStartRole(role string) error {
	if err := checkRole(role); err != nil {
		return err
	}
	if roles.IsMoved(role) {
		return invalid("role", "%q contains %q, which names a move's target role; start the logical role (%q) or move it (MigrateJob)",
			role, roles.Sep, roles.LogicalRole(role))
	}
	return nil
}
