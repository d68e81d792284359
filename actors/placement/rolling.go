package placement

import (
	"cmp"
	"slices"
	"time"

	"github.com/norsk-oss/norsk-manager/actors/bundle"
	"github.com/norsk-oss/norsk-manager/actors/job"
	"github.com/norsk-oss/norsk-manager/actors/placement/scheduler"
	"github.com/norsk-oss/norsk-manager/proto/internalpb"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
)

// Rolling updates (docs/design/placement.md, "Definition drift and rolling
// updates"). An UpdateJob (or UpdateBundle) of a job whose update_strategy
// is UPDATE_STRATEGY_MIGRATE leaves its running instances stale
// (job.Stale); the engine is to move each to a new instance, started with
// the current definition, make-before-break. rollingOrder and
// nextRollingMoves say which instances move and in what order;
// rollingPass (rolling_pass.go) begins the moves, which the move driver
// (migrate.go) carries out.

// rollingMove is one instance a rolling update moves.
type rollingMove struct {
	key
	// group is what moves one at a time: the bundle id of a derived job,
	// the job id of a plain job.
	group string
	// replica is the derived job's replica (1 backup, 0 primary); 0 for a
	// plain job.
	replica uint32
	// node is where the stale instance runs.
	node string
	// runs is the definition hash the instance runs; current the job's.
	runs, current int64
}

// rollingOrder lists the instances that run a stale definition of a job
// whose update_strategy is UPDATE_STRATEGY_MIGRATE, in the order they
// should move: grouped by bundle (plain jobs each on their own), and
// within a bundle every backup (replica 1) before any primary (replica 0)
// — a new definition that does not run shows on the backup while the
// primary stays on air — then by job id and role. Groups are in id order.
//
// Only instances the engine would otherwise manage count: a RUNNING
// instance (one provisioning or stopping is already changing) of an
// auto-placed job that is placeable now (active, no terminal state, not
// dormant), and for a derived job, one of a LIVE bundle that still lists
// it (bundles holds the bundle records by id; a derived job whose bundle
// is missing is skipped, as the pass skips it). An instance whose
// definition is unknown (job.Stale: 0) never moves.
//
// A move's target role ("primary~1") runs the current definition and is
// never listed, while its source still is: the caller's moving (see
// nextRollingMoves) holds the group while the move is in progress.
func rollingOrder(jobs map[string]*internalpb.JobRecord, bundles map[string]*internalpb.BundleRecord, now time.Time) []rollingMove {
	var out []rollingMove
	for id, rec := range jobs {
		j := rec.GetJob().GetJob()
		if j.GetUpdateStrategy() != managerpb.UpdateStrategy_UPDATE_STRATEGY_MIGRATE || !placeable(j, now) {
			continue
		}
		group, replica, ok := rollingGroup(id, j, bundles)
		if !ok {
			continue
		}
		for _, in := range rec.GetInstances() {
			if in.GetStatus() != internalpb.InstanceStatus_INSTANCE_RUNNING || !job.Stale(j, in) {
				continue
			}
			out = append(out, rollingMove{key: key{scheduler.JobID(id), scheduler.Role(in.GetRole())}, group: group, replica: replica,
				node: in.GetNodeId(), runs: in.GetDefinitionHash(), current: j.GetCurrentHash()})
		}
	}
	slices.SortFunc(out, func(a, b rollingMove) int {
		return cmp.Or(cmp.Compare(a.group, b.group), cmp.Compare(b.replica, a.replica),
			cmp.Compare(a.job, b.job), cmp.Compare(a.role, b.role))
	})
	return out
}

// rollingGroup returns the group and replica of job id (j its
// definition): its bundle's id and its replica in the bundle record, or
// its own id for a plain job; ok false for a derived job whose bundle is
// missing, not LIVE, or no longer lists it.
func rollingGroup(id string, j *managerpb.Job, bundles map[string]*internalpb.BundleRecord) (group string, replica uint32, ok bool) {
	bid, derived := j.GetTags()[bundle.TagBundleID]
	if !derived {
		return id, 0, true
	}
	b := bundles[bid]
	if b == nil || b.GetBundle().GetState() != managerpb.BundleState_BUNDLE_STATE_LIVE {
		return "", 0, false
	}
	js := derivedState(b, id)
	if js == nil {
		return "", 0, false
	}
	return bid, js.GetReplicaIndex(), true
}

// nextRollingMoves returns the moves of order (rollingOrder's) a pass may
// begin now: the first of each group, unless moving reports a move of that
// group in flight — one move at a time per bundle (and per plain job),
// groups independent of each other. A bundle whose backup cannot move
// (no room, or its new instance keeps failing) holds its primary on the
// old definition: the backup is the canary.
func nextRollingMoves(order []rollingMove, moving func(group string) bool) []rollingMove {
	var out []rollingMove
	for i, m := range order {
		if i > 0 && order[i-1].group == m.group {
			continue
		}
		if !moving(m.group) {
			out = append(out, m)
		}
	}
	return out
}
