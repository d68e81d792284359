package placement

import (
	"errors"
	"fmt"
	"time"

	"github.com/norsk-oss/norsk-manager/actors/bundle"
	"github.com/norsk-oss/norsk-manager/actors/job"
	"github.com/norsk-oss/norsk-manager/actors/placement/scheduler"
	"github.com/norsk-oss/norsk-manager/actors/roles"
	"github.com/norsk-oss/norsk-manager/persistence"
	"github.com/norsk-oss/norsk-manager/proto/internalpb"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
)

// ErrMoveDoesNotFit is returned (wrapped, with the chain's explanation) by
// CheckMove when no node fits a move's target.
var ErrMoveDoesNotFit = errors.New("the move's target fits no node")

// ErrMoveRefused is returned (wrapped, with the reason) by CheckMove for a
// job that must not be moved at all: a dormant bundle job (a standby whose
// instances the engine stops; a target started for it would be stopped
// again).
var ErrMoveRefused = errors.New("the job cannot be moved")

// CheckMove answers, for MigrateJob, whether a move of role of job jobID to node
// (empty: any node but the source's) fits now: the placement chain the
// engine's driver runs (migrate.go, startTarget), with the same inputs (the
// job's requirements, pool and constraints, its bundle's rules), on the
// records of store read at now. It returns nil when a node fits, and when
// the job or its role is not found, the role is already moving, not
// running or on node already, the job is completed or has a terminal verdict (the job grain answers those, naming
// the field: the chain would only say that no node fits); an error
// wrapping ErrMoveRefused for a dormant bundle job; an error
// wrapping ErrMoveDoesNotFit with the chain's explanation when none does;
// another error when the store could not be read. It reads every record
// (a pass's read): for an operator's request, not for a loop. The engine
// checks again when it starts the target, on the records then.
func CheckMove(store *persistence.Store, now time.Time, jobID, role, node string) error {
	w, err := readWorld(store, now)
	if err != nil {
		return err
	}
	rec := w.jobs[jobID]
	if rec != nil && instanceOf(rec, role) == nil && !roles.IsMoved(role) {
		for _, in := range rec.GetInstances() {
			if roles.LogicalRole(in.GetRole()) == role {
				role = in.GetRole() // the grain moves the instance that runs the logical role
				break
			}
		}
	}
	if rec == nil || instanceOf(rec, role) == nil {
		return nil
	}
	j := rec.GetJob().GetJob()
	src := instanceOf(rec, role)
	if job.MigrationOf(rec, role) != nil || j.GetState() == managerpb.Job_POST || j.GetTerminalState() != nil ||
		src.GetStatus() != internalpb.InstanceStatus_INSTANCE_RUNNING || (node != "" && node == src.GetNodeId()) {
		return nil
	}
	var b *internalpb.BundleRecord
	var js *internalpb.BundleJobState
	if bid, ok := rec.GetJob().GetJob().GetTags()[bundle.TagBundleID]; ok {
		var err error
		if b, err = bundleOf(w.read, w.bundles, bid); err != nil {
			return err
		}
		if b != nil {
			js = derivedState(b, jobID)
		}
		if js == nil {
			b = nil
		}
	}
	if j.GetTags()[bundle.TagDormant] == "true" || js.GetDormant() {
		return fmt.Errorf("%w: job %q is a dormant bundle job (a standby its bundle keeps stopped): its instances are being stopped", ErrMoveRefused, jobID)
	}
	c := newCandidate(rec, 0, b, js)
	c.key = key{scheduler.JobID(jobID), scheduler.Role(roles.TargetRole(role, rec.GetMoveCount()+1))}
	var pool *managerpb.Pool
	if c.pool != "" {
		if pool = w.pools[c.pool]; pool == nil {
			return fmt.Errorf("%w: pool %q does not exist", ErrMoveDoesNotFit, c.pool)
		}
	}
	ask := (&Engine{}).askOf(w, &c, pool)
	if node != "" {
		ask.Nodes = []scheduler.NodeID{scheduler.NodeID(node)}
	} else {
		ask.ExcludeNodes = []scheduler.NodeID{scheduler.NodeID(src.GetNodeId())}
	}
	view := w.view // a fresh base's, this call's own
	if _, err := view.Select(ask); err != nil {
		return fmt.Errorf("%w: %s", ErrMoveDoesNotFit, err.Error())
	}
	return nil
}
