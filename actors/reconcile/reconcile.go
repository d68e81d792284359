// Package reconcile holds the manager's background loops that act on many
// grains: the job activator (PRE → ACTIVE when start_date_time passes) and
// the reviver (wake node grains that own worker sessions and bundle grains
// with unfinished work, end instances on nodes that no longer exist). In
// the HA manager these run on the leader only.
package reconcile

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/norsk-oss/norsk-manager/actors"
	"github.com/norsk-oss/norsk-manager/persistence"
	"github.com/norsk-oss/norsk-manager/proto/internalpb"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
)

// Config configures the loops.
type Config struct {
	Store  *persistence.Store
	Router actors.Router
	Clock  func() time.Time
	Logger *slog.Logger
	// MaxSleep bounds how long the activator sleeps without a new event.
	// Default 1 minute.
	MaxSleep time.Duration
}

func (c *Config) defaults() {
	if c.Clock == nil {
		c.Clock = time.Now
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.MaxSleep <= 0 {
		c.MaxSleep = time.Minute
	}
}

// RunActivator sends ActivateJob to every PRE job whose start_date_time has
// passed, as soon as it passes, until ctx ends. It wakes on new events (a
// job created or moved) and at the earliest PRE start.
func RunActivator(ctx context.Context, cfg Config) error {
	cfg.defaults()
	log := cfg.Logger.With("loop", "activator")
	for {
		scanned := time.Now()
		due, next, err := duePre(cfg)
		if err != nil {
			log.Error("read due jobs", "error", err)
		}
		failed := false
		for _, id := range due {
			r, err := cfg.Router.Request(ctx, actors.KindJob, id, &internalpb.JobCommand{JobId: id, Cmd: &internalpb.JobCommand_Activate{Activate: &internalpb.ActivateJob{}}})
			if err == nil {
				err = actors.AsError(r)
			}
			if err != nil {
				if ctx.Err() != nil {
					return nil
				}
				log.Warn("activate job", "job_id", id, "error", err)
				failed = true
			}
		}
		sleep := cfg.MaxSleep
		if !next.IsZero() {
			sleep = min(sleep, max(next.Sub(cfg.Clock()), 0))
		}
		if failed || len(due) == 256 {
			sleep = min(sleep, time.Second)
		}
		if err := waitEventsOrTimeout(ctx, cfg.Store, sleep); err != nil {
			return nil
		}
		// Woken by a write before the next start: scan again at most every
		// activatorGap, so a stream of writes (a CreateJob each) does not
		// cost a scan of the PRE index each. A job whose start comes
		// meanwhile is activated at most activatorGap late; a wake for the
		// next start is not held back.
		if next.IsZero() || cfg.Clock().Before(next) {
			if err := pause(ctx, activatorGap-time.Since(scanned)); err != nil {
				return nil
			}
		}
	}
}

// activatorGap is the least time between two scans of the activator that
// a write woke.
const activatorGap = 100 * time.Millisecond

// pause waits d (nothing if d ≤ 0), or returns ctx's error.
func pause(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// duePre returns PRE jobs due at now (at most 256) and the earliest start
// of the PRE jobs left.
func duePre(cfg Config) (due []string, next time.Time, err error) {
	now := cfg.Clock()
	err = cfg.Store.View(func(r *persistence.Reader) error {
		var err error
		if due, err = r.DuePreJobs(persistence.TimeKey(now), 256); err != nil {
			return err
		}
		if len(due) == 0 {
			start, ok, err := r.EarliestPreStart()
			if ok {
				next = start
			}
			return err
		}
		return nil
	})
	return due, next, err
}

// waitEventsOrTimeout returns when the event log grows, after d, or with
// ctx's error.
func waitEventsOrTimeout(ctx context.Context, store *persistence.Store, d time.Duration) error {
	_, head := store.EventBounds()
	wctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	_, err := store.WaitForEvents(wctx, head)
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if errors.Is(err, persistence.ErrClosed) {
		return err
	}
	return nil
}

// Revive wakes every node grain that should hold a worker session (so it
// re-dials its worker and adopts the jobs in the hello) and every bundle
// grain with unfinished work (BundleRecord.pending_work: derived jobs not
// synced, removals, a DELETING bundle's saga), and ends the
// instances job records place on nodes that no longer exist. Run it once
// the grains can take commands (manager start; in the HA manager, after
// every membership change). It returns when every wake was answered (or
// failed, logged) or ctx ends.
func Revive(ctx context.Context, cfg Config) error {
	cfg.defaults()
	log := cfg.Logger.With("loop", "reviver")
	var wake, bundles []string
	orphans := map[string][]string{} // missing node → jobs
	err := cfg.Store.View(func(r *persistence.Reader) error {
		if err := r.PendingBundles(func(id string) error {
			bundles = append(bundles, id)
			return nil
		}); err != nil {
			return err
		}
		nodes := map[string]bool{}
		if err := r.Nodes(func(n *internalpb.NodeRecord) error {
			nodes[n.GetNodeId()] = true
			cloudBusy := false
			switch n.GetCloud().GetPhase() {
			case internalpb.CloudNode_LAUNCHING, internalpb.CloudNode_PENDING, internalpb.CloudNode_RUNNING, internalpb.CloudNode_TERMINATING:
				// A create or termination to carry on (or a startup timer).
				cloudBusy = n.GetCloud() != nil
			}
			if cloudBusy || n.GetAddress() != "" && !(n.GetState() == managerpb.NodeLifecycle_NODE_LIFECYCLE_STOPPED &&
				n.GetStopReason() == managerpb.NodeStopping_USER_REQUESTED) {
				wake = append(wake, n.GetNodeId())
			}
			return nil
		}); err != nil {
			return err
		}
		return r.AllInstances(func(node string, ref persistence.InstanceRef) error {
			if !nodes[node] {
				orphans[node] = append(orphans[node], ref.JobID)
			}
			return nil
		})
	})
	if err != nil {
		return err
	}
	// Wake concurrently, each with its own deadline: in a cluster, a wake
	// routed to an owner that just died waits out the lookup's timeout,
	// and must not hold up the others (Wake is idempotent, so a later
	// Revive after the membership settles may overlap it harmlessly).
	type target struct {
		kind, id string
		cmd      proto.Message
	}
	var targets []target
	for _, id := range wake {
		targets = append(targets, target{actors.KindNode, id, &internalpb.NodeCommand{NodeId: id, Cmd: &internalpb.NodeCommand_Wake{Wake: &internalpb.Wake{}}}})
	}
	for _, id := range bundles {
		targets = append(targets, target{actors.KindBundle, id, &internalpb.BundleCommand{BundleId: id, Cmd: &internalpb.BundleCommand_Wake{Wake: &internalpb.Wake{}}}})
	}
	sem := make(chan struct{}, 16)
	var wg sync.WaitGroup
	for _, tg := range targets {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			wctx, cancel := context.WithTimeout(ctx, 15*time.Second)
			defer cancel()
			r, err := cfg.Router.Request(wctx, tg.kind, tg.id, tg.cmd)
			if err == nil {
				err = actors.AsError(r)
			}
			if err != nil && ctx.Err() == nil {
				log.Warn("wake grain", "kind", tg.kind, "id", tg.id, "error", err)
			}
		}()
	}
	wg.Wait()
	for node, jobs := range orphans {
		for _, id := range jobs {
			cfg.Router.Send(actors.KindJob, id, &internalpb.JobCommand{JobId: id, Cmd: &internalpb.JobCommand_NodeGone{NodeGone: &internalpb.NodeGone{
				NodeId: node, Reason: managerpb.JobHistoryJobStopping_JOB_STOPPED_NODE_TERMINATED}}})
		}
	}
	log.Info("revived grains", "nodes", len(wake), "bundles", len(bundles), "orphaned_nodes", len(orphans))
	return nil
}
