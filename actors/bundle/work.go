package bundle

import (
	"fmt"
	"slices"

	"github.com/asynkron/protoactor-go/actor"
	"google.golang.org/protobuf/proto"

	"github.com/norsk-oss/norsk-manager/actors"
	"github.com/norsk-oss/norsk-manager/actors/job"
	"github.com/norsk-oss/norsk-manager/proto/errorpb"
	"github.com/norsk-oss/norsk-manager/proto/internalpb"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
)

// The grain works in rounds. A round takes the record as it is, calls the
// job grains for every derived job that is not synced and every removal
// (all in parallel, each a short chain of futures continued on the actor,
// so the mailbox keeps serving commands), then folds the outcomes into the
// record in one append. Failed work is retried by the next round after a
// backoff; a change accepted during a round starts the next one as soon as
// it ends.

// result is the outcome of the work on one derived job in a round.
type result struct {
	jobID   string
	gen     uint64 // the job state's generation the work was for
	removal bool
	err     error
	// fatal is the reply for callers waiting on this job when retrying
	// cannot help (the id belongs to a job of another bundle, the job is
	// refused as invalid or too large); nil otherwise. The grain still
	// retries, with backoff, in case the obstacle is removed.
	fatal *internalpb.Reply
}

// kick starts a round now if the record has work and none is in flight (a
// round in flight is followed by another), cancelling a scheduled retry.
func (g *grain) kick(ctx actor.Context) {
	if g.rec == nil || !g.rec.GetPendingWork() {
		g.settleWaiters(ctx)
		return
	}
	if g.working {
		g.again = true
		return
	}
	g.stopRetry()
	g.backoff = 0
	g.work(ctx)
}

// work runs one round.
func (g *grain) work(ctx actor.Context) {
	if g.working || g.rec == nil || !g.rec.GetPendingWork() {
		return
	}
	g.working, g.again = true, false
	rec := g.rec // records are replaced, never modified: a stable snapshot
	var tasks []func(func(result))
	removing := map[string]bool{}
	for _, js := range rec.GetRemovals() {
		removing[js.GetJobId()] = true
		tasks = append(tasks, func(done func(result)) { g.removeJob(ctx, rec, js, done) })
	}
	for _, js := range rec.GetJobs() {
		// A job re-added while its removal is under way is created afresh
		// once the removal is done.
		if js.GetSyncedGeneration() < js.GetGeneration() && !removing[js.GetJobId()] {
			tasks = append(tasks, func(done func(result)) { g.syncJob(ctx, rec, js, done) })
		}
	}
	results := make([]result, 0, len(tasks))
	if len(tasks) == 0 {
		g.finish(ctx, results)
		return
	}
	for _, t := range tasks {
		t(func(r result) {
			results = append(results, r)
			if len(results) == len(tasks) {
				g.finish(ctx, results)
			}
		})
	}
}

// finish folds a round's results into the record, removes a DELETING
// bundle whose saga is done, answers waiters and schedules what comes next.
func (g *grain) finish(ctx actor.Context, results []result) {
	g.working = false
	if g.rec == nil {
		g.settleWaiters(ctx)
		return
	}
	next := g.next()
	failed := false
	var fatal *internalpb.Reply
	for _, r := range results {
		if r.err != nil {
			failed = true
			g.log.Warn("bundle job work failed; will retry", "job_id", r.jobID, "removal", r.removal, "error", r.err)
			if r.fatal != nil && fatal == nil {
				fatal = r.fatal
			}
		}
		applyResult(next, r)
	}
	progressed := false
	if next.GetBundle().GetState() == managerpb.BundleState_BUNDLE_STATE_DELETING && len(next.GetJobs()) == 0 && len(next.GetRemovals()) == 0 {
		if r := g.commit("", nil, deletedEvent(g.id)); r != nil {
			failed = true
		} else {
			g.rec = nil
			g.log.Info("bundle deleted: its jobs are gone")
		}
	} else if next.PendingWork = pending(next); !proto.Equal(next, g.rec) {
		if r := g.commit("", next); r != nil {
			failed = true
		} else {
			progressed = true
		}
	}
	if fatal != nil {
		g.failWaiters(ctx, fatal)
	}
	g.settleWaiters(ctx)
	switch {
	case g.rec == nil || !g.rec.GetPendingWork():
		g.backoff = 0
	case g.again || (progressed && !failed):
		g.backoff = 0
		g.work(ctx)
	default:
		g.scheduleRetry(ctx)
	}
}

// applyResult records one outcome in next: a synced job's synced
// generation, a finished removal dropped, a failure's message.
func applyResult(next *internalpb.BundleRecord, r result) {
	if r.removal {
		i := slices.IndexFunc(next.GetRemovals(), func(js *internalpb.BundleJobState) bool {
			return js.GetJobId() == r.jobID && js.GetGeneration() == r.gen
		})
		switch {
		case i < 0:
		case r.err == nil:
			next.Removals = slices.Delete(next.Removals, i, i+1)
		default:
			next.Removals[i].LastError = r.err.Error()
		}
		return
	}
	i := slices.IndexFunc(next.GetJobs(), func(js *internalpb.BundleJobState) bool { return js.GetJobId() == r.jobID })
	if i < 0 {
		return
	}
	js := next.Jobs[i]
	switch {
	case r.err != nil:
		if r.gen == js.GetGeneration() {
			js.LastError = r.err.Error()
		}
	case r.gen <= js.GetGeneration() && r.gen > js.GetSyncedGeneration():
		js.SyncedGeneration = r.gen
		if r.gen == js.GetGeneration() {
			js.LastError = ""
		}
	}
}

// scheduleRetry schedules the next round after the backoff (doubling from
// RetryMin to RetryMax), unless one is scheduled.
func (g *grain) scheduleRetry(ctx actor.Context) {
	if g.cancelRetry != nil {
		return
	}
	g.backoff = min(max(g.backoff*2, g.cfg.RetryMin), g.cfg.RetryMax)
	g.cancelRetry = g.timer.SendOnce(g.backoff, ctx.Self(), &retryRound{})
}

func (g *grain) stopRetry() {
	if g.cancelRetry != nil {
		g.cancelRetry()
		g.cancelRetry = nil
	}
}

// requestID is the request id of a job command of this bundle: the same
// for every attempt at the same job state, different for another state,
// another operation or another incarnation of the bundle id.
func (g *grain) requestID(rec *internalpb.BundleRecord, js *internalpb.BundleJobState, op string) string {
	return fmt.Sprintf("bundle:%s:%d:%d:%s:%s", g.id, rec.GetIncarnation(), js.GetGeneration(), op, js.GetJobId())
}

// syncJob makes the derived job js exist with the definition rec derives
// for it: Get, then Create if it is missing or Update (with its current
// hash) if its definition differs.
func (g *grain) syncJob(ctx actor.Context, rec *internalpb.BundleRecord, js *internalpb.BundleJobState, done func(result)) {
	id := js.GetJobId()
	res := result{jobID: id, gen: js.GetGeneration()}
	want := DerivedJob(rec.GetBundle(), spec(rec.GetBundle(), js.GetJobName()), js.GetReplicaIndex(), js.GetDormant())
	finish := func(r *internalpb.Reply, err error) {
		res.fatal, res.err = outcome(r, err)
		done(res)
	}
	g.jobCall(ctx, id, &internalpb.JobCommand{Cmd: &internalpb.JobCommand_Get{Get: &internalpb.GetJob{}}}, func(r *internalpb.Reply, err error) {
		switch {
		case err != nil:
			finish(nil, err)
		case r.GetCode() == errorpb.Code_NOT_FOUND:
			g.jobCall(ctx, id, &internalpb.JobCommand{RequestId: g.requestID(rec, js, "create"),
				Cmd: &internalpb.JobCommand_Create{Create: &internalpb.CreateJob{Job: want}}}, finish)
		case r.GetCode() != errorpb.Code_OK:
			finish(r, nil)
		default:
			cur := r.GetJob().GetJob().GetJob()
			if owner := cur.GetTags()[TagBundleID]; owner != g.id {
				res.fatal = actors.Fail(errorpb.Code_ALREADY_EXISTS, "bundle %q: job %q exists and is not a job of this bundle (its %s tag is %q)", g.id, id, TagBundleID, owner)
				res.err = actors.AsError(res.fatal)
				done(res)
				return
			}
			if cur.GetCurrentHash() == job.Hash(want) {
				done(res)
				return
			}
			upd := proto.Clone(want).(*managerpb.Job)
			upd.CurrentHash = cur.GetCurrentHash()
			g.jobCall(ctx, id, &internalpb.JobCommand{RequestId: g.requestID(rec, js, "update"),
				Cmd: &internalpb.JobCommand_Update{Update: &internalpb.UpdateJob{Job: upd}}}, finish)
		}
	})
}

// removeJob completes the derived job js and then deletes it. A job that
// is already gone, or that is not a job of this bundle, counts as removed
// (the latter is left alone). Deleting fails (FAILED_PRECONDITION) while
// the completed job's instances are still stopping: the next round tries
// again.
func (g *grain) removeJob(ctx actor.Context, rec *internalpb.BundleRecord, js *internalpb.BundleJobState, done func(result)) {
	id := js.GetJobId()
	res := result{jobID: id, gen: js.GetGeneration(), removal: true}
	fail := func(r *internalpb.Reply, err error) {
		_, res.err = outcome(r, err)
		done(res)
	}
	del := func() {
		g.jobCall(ctx, id, &internalpb.JobCommand{RequestId: g.requestID(rec, js, "delete"),
			Cmd: &internalpb.JobCommand_Delete{Delete: &internalpb.DeleteJob{}}}, func(r *internalpb.Reply, err error) {
			if err == nil && r.GetCode() == errorpb.Code_NOT_FOUND {
				r = actors.OK()
			}
			fail(r, err)
		})
	}
	g.jobCall(ctx, id, &internalpb.JobCommand{Cmd: &internalpb.JobCommand_Get{Get: &internalpb.GetJob{}}}, func(r *internalpb.Reply, err error) {
		switch {
		case err != nil:
			fail(nil, err)
		case r.GetCode() == errorpb.Code_NOT_FOUND:
			done(res)
		case r.GetCode() != errorpb.Code_OK:
			fail(r, nil)
		case r.GetJob().GetJob().GetJob().GetTags()[TagBundleID] != g.id:
			g.log.Warn("not removing a job that is not this bundle's", "job_id", id)
			done(res)
		case r.GetJob().GetJob().GetJob().GetState() == managerpb.Job_POST:
			del()
		default:
			g.jobCall(ctx, id, &internalpb.JobCommand{RequestId: g.requestID(rec, js, "complete"),
				Cmd: &internalpb.JobCommand_Complete{Complete: &internalpb.CompleteJob{}}}, func(r *internalpb.Reply, err error) {
				if err != nil || r.GetCode() != errorpb.Code_OK {
					fail(r, err)
					return
				}
				del()
			})
		}
	})
}

// outcome classifies a job grain's answer: for answers that retrying cannot
// change, the reply for waiting callers (fatal), and the error (nil for
// success).
func outcome(r *internalpb.Reply, err error) (fatal *internalpb.Reply, _ error) {
	if err != nil {
		return nil, err
	}
	if e := actors.AsError(r); e != nil {
		switch r.GetCode() {
		case errorpb.Code_INVALID_ARGUMENT, errorpb.Code_RESOURCE_EXHAUSTED:
			return r, e
		}
		return nil, e
	}
	return nil, nil
}

// jobCall sends cmd to the job grain id and continues with then on the
// actor when it answers (err: no answer in JobTimeout).
func (g *grain) jobCall(ctx actor.Context, id string, cmd *internalpb.JobCommand, then func(*internalpb.Reply, error)) {
	cmd.JobId = id
	f := g.cfg.Router.RequestFuture(actors.KindJob, id, cmd, g.cfg.JobTimeout)
	ctx.ReenterAfter(f, func(res any, err error) {
		r, err := actors.FutureReply(res, err)
		then(r, err)
	})
}

// fanOut runs calls in parallel and continues with done (on the actor)
// once every one has answered, with the replies and errors in call order.
func (g *grain) fanOut(calls []func(func(*internalpb.Reply, error)), done func([]*internalpb.Reply, []error)) {
	replies, errs := make([]*internalpb.Reply, len(calls)), make([]error, len(calls))
	left := len(calls)
	if left == 0 {
		done(replies, errs)
		return
	}
	for i, call := range calls {
		call(func(r *internalpb.Reply, err error) {
			replies[i], errs[i] = r, err
			if left--; left == 0 {
				done(replies, errs)
			}
		})
	}
}
