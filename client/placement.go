package client

import (
	"context"

	"github.com/norsk-oss/norsk-manager/proto/managerpb"
)

// GetPlacement returns where each role of job runs or, for a role not
// placed, the placement engine's last attempt (the nodes each filter
// removed). The manager answers NotFound for an unknown job and, on a
// follower, FailedPrecondition naming the leader for a job not placed.
func (m *NorskManager) GetPlacement(ctx context.Context, job JobID) (*managerpb.PlacementInfo, error) {
	if job == "" {
		return nil, invalidArg("GetPlacement", "job id is empty")
	}
	return unary(ctx, m, "GetPlacement", jobIDpb(job), m.api.GetPlacement)
}
