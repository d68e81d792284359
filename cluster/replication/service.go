package replication

import (
	"context"
	"errors"
	"fmt"

	"github.com/hashicorp/raft"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/norsk-oss/norsk-manager/persistence"
	"github.com/norsk-oss/norsk-manager/proto/errorpb"
	"github.com/norsk-oss/norsk-manager/proto/internalpb"
)

// Service implements the internal Cluster service's Append and ReadIndex
// for the managers that forward to this one; Status is left to the agent.
type Service struct {
	internalpb.UnimplementedClusterServer
	R *Replicator
	// StatusFunc answers Cluster/Status (the agent knows the addresses).
	StatusFunc func(context.Context) (*internalpb.ManagerStatus, error)
	// LivenessFunc answers Cluster/Liveness.
	LivenessFunc func(context.Context) *internalpb.LivenessReply
}

// Liveness answers the worker sessions of this manager's node grains.
func (s *Service) Liveness(ctx context.Context, _ *internalpb.LivenessRequest) (*internalpb.LivenessReply, error) {
	if s.LivenessFunc == nil {
		return nil, status.Error(codes.Unimplemented, "liveness not available")
	}
	return s.LivenessFunc(ctx), nil
}

// Append applies a forwarded append if this manager is the leader
// (FAILED_PRECONDITION naming the leader otherwise). A command that names
// no entity and carries no audit entry, or whose entity key is not
// "<kind>/<id>", is INVALID_ARGUMENT naming the field, before it reaches
// the log (checkAppend).
func (s *Service) Append(ctx context.Context, cmd *internalpb.AppendCommand) (*internalpb.AppendReply, error) {
	if err := checkAppend(cmd); err != nil {
		return nil, err
	}
	if !s.R.IsLeader() {
		return nil, status.Errorf(codes.FailedPrecondition, "not the leader (leader: %q)", s.R.Leader())
	}
	res, idx, err := s.R.applyLocal(cmd)
	reply := &internalpb.AppendReply{Seq: uint64(res.Seq), LastEvent: uint64(res.LastEvent), Duplicate: res.Duplicate, RaftIndex: idx}
	var ce *persistence.ConflictError
	var ns *persistence.NoSpaceError
	switch {
	case err == nil:
	case errors.As(err, &ns):
		// Refused before Raft: nothing was appended (ErrorInfo
		// DATA_DIR_LOW_SPACE, rebuilt by the forwarder).
		return nil, noSpaceStatus(ns)
	case errors.As(err, &ce):
		reply.Code, reply.Message = errorpb.Code_ABORTED, err.Error()
		reply.ExpectedSeq, reply.ActualSeq = uint64(ce.Expected), uint64(ce.Actual)
	case errors.Is(err, persistence.ErrTooLarge):
		reply.Code, reply.Message = errorpb.Code_RESOURCE_EXHAUSTED, err.Error()
	case errors.Is(err, raft.ErrNotLeader):
		// Raft refused the entry before accepting it: nothing was
		// appended, so the forwarder may safely send it to the new leader.
		return nil, status.Errorf(codes.FailedPrecondition, "append not accepted: %v (leader: %q)", err, s.R.Leader())
	default:
		// Leadership lost after the entry was accepted, a timeout: it may
		// still commit. Never FAILED_PRECONDITION here, which would make
		// the forwarder resend it as if nothing had happened.
		return nil, status.Error(codes.Unavailable, err.Error())
	}
	return reply, nil
}

// ReadIndex answers the leader's confirmed commit index.
func (s *Service) ReadIndex(ctx context.Context, _ *internalpb.ReadIndexRequest) (*internalpb.ReadIndexReply, error) {
	idx, err := s.R.LocalReadIndex(ctx)
	if err != nil {
		return nil, status.Errorf(codes.FailedPrecondition, "read index: %v (leader: %q)", err, s.R.Leader())
	}
	return &internalpb.ReadIndexReply{CommitIndex: idx}, nil
}

// Status answers this manager's own status.
func (s *Service) Status(ctx context.Context, _ *internalpb.StatusRequest) (*internalpb.ManagerStatus, error) {
	if s.StatusFunc == nil {
		return nil, status.Error(codes.Unimplemented, "status not available")
	}
	st, err := s.StatusFunc(ctx)
	if err != nil {
		return nil, status.Error(codes.Internal, fmt.Sprint(err))
	}
	return st, nil
}

// checkAppend refuses a command the FSM would refuse whatever the store
// holds (issue 21 §11: an empty Append answered Unavailable "data
// corrupt" after it had gone through Raft): INVALID_ARGUMENT naming the
// field. The FSM's own checks stay (persistence.FSM.ApplyBatch).
func checkAppend(cmd *internalpb.AppendCommand) error {
	key := persistence.EntityKey(cmd.GetEntityKey())
	if key == "" {
		if cmd.GetAudit() == nil {
			return status.Error(codes.InvalidArgument, "entity_key: is empty and the command carries no audit entry: nothing to append")
		}
		if cmd.GetExpectedSeq() != 0 || len(cmd.GetRecord()) > 0 || cmd.GetDelete() || len(cmd.GetEvents()) > 0 {
			return status.Error(codes.InvalidArgument, "entity_key: is empty (an audit-only append) but the command carries an entity change")
		}
		return nil
	}
	if key.Kind() == "" || key.ID() == "" {
		return status.Errorf(codes.InvalidArgument, "entity_key: %q is not <kind>/<id>", key)
	}
	return nil
}
