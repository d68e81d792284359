package client

import (
	"context"

	"github.com/norsk-oss/norsk-manager/proto/managerpb"
)

// AnyNode asks MigrateJob for the node the placement chain chooses.
const AnyNode NodeID = "any"

// MigrateJob moves job id's running role to node (AnyNode: the node the
// placement chain chooses, the source's excluded) make-before-break: the
// manager starts the target role ("<logical role>~<n>") there, waits until
// it runs, then stops the source. It returns the move as recorded; the
// move goes on after the call returns (watch the migration_* events or
// JobById). reason is optional. Errors: InvalidArgument for an empty id or
// role (before sending) or a bad field; NotFound for an unknown job;
// FailedPrecondition when the role does not run, is already moving, or the
// node is unknown or takes no placements.
func (m *NorskManager) MigrateJob(ctx context.Context, id JobID, role string, node NodeID, reason string) (*managerpb.Migration, error) {
	switch {
	case id == "":
		return nil, invalidArg("MigrateJob", "job id is empty")
	case role == "":
		return nil, invalidArg("MigrateJob", "role is empty")
	}
	r, err := unary(ctx, m, "MigrateJob", &managerpb.MigrateJobRequest{JobId: jobIDpb(id), Role: role, TargetNodeId: string(node), Reason: reason},
		m.api.MigrateJob)
	if err != nil {
		return nil, err
	}
	return r.GetMigration(), nil
}

// AbortMigration backs out job id's move from sourceRole to targetRole:
// the source keeps running, the target is stopped. Idempotent: a move
// already ended or backing out answers nil. FailedPrecondition once the
// move is stopping its source (too late); InvalidArgument for an empty id
// or role (before sending) or a target role that is not the source's move.
func (m *NorskManager) AbortMigration(ctx context.Context, id JobID, sourceRole, targetRole, reason string) error {
	switch {
	case id == "":
		return invalidArg("AbortMigration", "job id is empty")
	case sourceRole == "" || targetRole == "":
		return invalidArg("AbortMigration", "source and target roles must be set")
	}
	_, err := unary(ctx, m, "AbortMigration", &managerpb.AbortMigrationRequest{JobId: jobIDpb(id), SourceRole: sourceRole,
		TargetRole: targetRole, Reason: reason}, m.api.AbortMigration)
	return err
}
