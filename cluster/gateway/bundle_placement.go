package gateway

import (
	"errors"
	"fmt"

	"github.com/norsk-oss/norsk-manager/actors/job"
	"github.com/norsk-oss/norsk-manager/actors/roles"
	"github.com/norsk-oss/norsk-manager/persistence"
	"github.com/norsk-oss/norsk-manager/proto/internalpb"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
)

// addBundlePlacement fills in, for every derived job of info, where its
// role runs (replica 0 as primary, 1 as backup) and the placement
// engine's word on it from the job record read in r (the view the bundle
// was read in): the degraded failure domains and their state from the
// instance's note, or the last failure recorded for the role, and whether
// the instance runs a stale definition (job.Stale). A derived
// job without a record yet (being created) is left as it is.
func addBundlePlacement(r *persistence.Reader, info *managerpb.BundleInfo) error {
	for _, js := range info.GetJobs() {
		rec, _, err := r.Job(js.GetJobId().GetJobId())
		if errors.Is(err, persistence.ErrNotFound) {
			continue
		}
		if err != nil {
			return fmt.Errorf("read derived job %s: %w", js.GetJobId().GetJobId(), err)
		}
		role := "primary"
		if js.GetReplicaIndex() == 1 {
			role = "backup"
		}
		// The role's instance by its logical role (a moved one runs as
		// "primary~n"); during a move, the running one, the source first.
		var shown *internalpb.Instance
		for _, in := range rec.GetInstances() {
			if roles.LogicalRole(in.GetRole()) == role && (shown == nil ||
				shown.GetStatus() != internalpb.InstanceStatus_INSTANCE_RUNNING && in.GetStatus() == internalpb.InstanceStatus_INSTANCE_RUNNING) {
				shown = in
			}
		}
		if shown != nil {
			n := shown.GetPlacement()
			js.NodeId, js.DegradedDomains, js.Degradation = shown.GetNodeId(), n.GetDegraded(), n.GetDegradation()
			js.DefinitionStale = job.Stale(rec.GetJob().GetJob(), shown)
		}
		for _, f := range rec.GetPlacementFailures() {
			if f.GetRole() == role && !f.GetCleared() && js.GetNodeId() == "" {
				js.LastAttempt = f.GetAttempt()
			}
		}
	}
	return nil
}
