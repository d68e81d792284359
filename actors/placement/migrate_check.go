package placement

import (
	"errors"
	"fmt"
	"time"

	"github.com/norsk-oss/norsk-manager/actors/bundle"
	"github.com/norsk-oss/norsk-manager/actors/placement/scheduler"
	"github.com/norsk-oss/norsk-manager/actors/roles"
	"github.com/norsk-oss/norsk-manager/persistence"
	"github.com/norsk-oss/norsk-manager/proto/internalpb"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
)

// ErrMoveDoesNotFit is returned (wrapped, with the chain's explanation) by
// CheckMove when no node fits a move's target.
var ErrMoveDoesNotFit = errors.New("the move's target fits no node")

// CheckMove answers, for MigrateJob, whether a move of job's role to node
// (empty: any node but the source's) fits now: the placement chain the
// engine's driver runs (migrate.go, startTarget), with the same inputs (the
// job's requirements, pool and constraints, its bundle's rules), on the
// records of store read at now. It returns nil when a node fits, and when
// the job or its role is not found (the job grain answers those); an error
// wrapping ErrMoveDoesNotFit with the chain's explanation when none does;
// another error when the store could not be read. It reads every record
// (a pass's read): for an operator's request, not for a loop. The engine
// checks again when it starts the target, on the records then.
func CheckMove(store *persistence.Store, now time.Time, job, role, node string) error {
	w, err := readWorld(store, now)
	if err != nil {
		return err
	}
	rec := w.jobs[job]
	if rec == nil || instanceOf(rec, role) == nil {
		return nil
	}
	src := instanceOf(rec, role)
	var b *internalpb.BundleRecord
	var js *internalpb.BundleJobState
	if bid, ok := rec.GetJob().GetJob().GetTags()[bundle.TagBundleID]; ok {
		if err := store.View(func(r *persistence.Reader) error {
			var err error
			b, err = bundleOf(r, map[string]*internalpb.BundleRecord{}, bid)
			return err
		}); err != nil {
			return err
		}
		if b != nil {
			js = derivedState(b, job)
		}
		if js == nil {
			b = nil
		}
	}
	c := newCandidate(rec, 0, b, js)
	c.key = key{scheduler.JobID(job), scheduler.Role(roles.TargetRole(role, rec.GetMoveCount()+1))}
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
	view, err := scheduler.NewView(w.nodes, w.placed)
	if err != nil {
		return fmt.Errorf("placement view: %w", err)
	}
	if _, err := view.Select(ask); err != nil {
		return fmt.Errorf("%w: %s", ErrMoveDoesNotFit, err.Error())
	}
	return nil
}
