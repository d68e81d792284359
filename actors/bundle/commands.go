package bundle

import (
	"slices"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"google.golang.org/protobuf/proto"

	"github.com/norsk-oss/norsk-manager/actors"
	"github.com/norsk-oss/norsk-manager/proto/errorpb"
	"github.com/norsk-oss/norsk-manager/proto/internalpb"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
)

// create stores a new bundle and answers once its derived jobs exist. The
// bundle arrives validated. First every derived job id is checked to be
// free (a Get per job, in parallel): a taken id is ALREADY_EXISTS and
// nothing is written.
func (g *grain) create(ctx actor.Context, m *internalpb.BundleCommand, b *managerpb.Bundle) {
	reqID := m.GetRequestId()
	switch {
	case g.rec != nil && g.deleting():
		g.respond(ctx, ctx.Sender(), actors.Fail(errorpb.Code_ALREADY_EXISTS, "bundle %q already exists (it is being deleted; retry once it is gone)", g.id))
		return
	case g.rec != nil:
		g.respond(ctx, ctx.Sender(), actors.Fail(errorpb.Code_ALREADY_EXISTS, "bundle %q already exists", g.id))
		return
	case g.creating != nil && reqID != "" && g.creating.reqID == reqID:
		g.creating.senders = append(g.creating.senders, ctx.Sender()) // the same request, delivered again
		return
	case g.creating != nil:
		g.respond(ctx, ctx.Sender(), actors.Fail(errorpb.Code_ABORTED, "bundle %q is being created by another request", g.id))
		return
	}
	b = proto.Clone(b).(*managerpb.Bundle)
	b.BundleId = &managerpb.BundleId{BundleId: g.id}
	b.State = managerpb.BundleState_BUNDLE_STATE_LIVE
	jobs := Expand(b, 1)
	pc := &pendingCreate{reqID: reqID, senders: []*actor.PID{ctx.Sender()}}
	g.creating = pc
	deadline := deadlineOf(m)
	calls := make([]func(func(*internalpb.Reply, error)), len(jobs))
	for i, js := range jobs {
		calls[i] = func(then func(*internalpb.Reply, error)) {
			g.jobCall(ctx, js.GetJobId(), &internalpb.JobCommand{Cmd: &internalpb.JobCommand_Get{Get: &internalpb.GetJob{}}}, then)
		}
	}
	g.fanOut(calls, func(replies []*internalpb.Reply, errs []error) {
		g.creating = nil
		fail := g.checkFree(jobs, replies, errs)
		if fail == nil {
			rec := &internalpb.BundleRecord{Bundle: b, Generation: 1, Incarnation: uint64(g.seq), Jobs: jobs}
			fail = g.commit(reqID, rec, updatedEvent(b))
		}
		if fail != nil {
			for _, s := range pc.senders {
				g.respond(ctx, s, fail)
			}
			return
		}
		g.log.Info("bundle created", "jobs", len(jobs), "replicas", Replicas(b))
		for _, s := range pc.senders {
			g.addWaiter(ctx, s, 1, g.createdReply(), deadline)
		}
		g.kick(ctx)
	})
}

// checkFree turns the answers of the pre-check Gets into the create's
// failure, or nil if no derived job exists.
func (g *grain) checkFree(jobs []*internalpb.BundleJobState, replies []*internalpb.Reply, errs []error) *internalpb.Reply {
	for i, js := range jobs {
		switch {
		case errs[i] != nil:
			return actors.Fail(errorpb.Code_UNAVAILABLE, "bundle %q: could not check whether job %q exists: %v", g.id, js.GetJobId(), errs[i])
		case replies[i].GetCode() == errorpb.Code_OK:
			return actors.Fail(errorpb.Code_ALREADY_EXISTS, "bundle %q: its job %q would have the id of an existing job", g.id, js.GetJobId())
		case replies[i].GetCode() != errorpb.Code_NOT_FOUND:
			return replies[i]
		}
	}
	if g.rec != nil {
		return actors.Fail(errorpb.Code_ALREADY_EXISTS, "bundle %q already exists", g.id)
	}
	return nil
}

// update re-derives the jobs of a new definition of the bundle: jobs whose
// definition changed get the new generation, removed jobs become removals,
// new jobs are created. It answers once the jobs reflect the change
// (removals not included: they finish in the background).
func (g *grain) update(ctx actor.Context, m *internalpb.BundleCommand, b *managerpb.Bundle) *internalpb.Reply {
	if r := g.checkLive(); r != nil {
		return r
	}
	b = proto.Clone(b).(*managerpb.Bundle)
	b.BundleId = &managerpb.BundleId{BundleId: g.id}
	b.State = managerpb.BundleState_BUNDLE_STATE_LIVE
	if proto.Equal(b, g.rec.GetBundle()) {
		g.wait(ctx, m, g.rec.GetGeneration(), actors.OK())
		return nil
	}
	gen := g.rec.GetGeneration() + 1
	next := g.next()
	next.Bundle, next.Generation = b, gen
	next.Jobs, next.Removals = diff(g.rec, b, gen)
	if r := g.commit(m.GetRequestId(), next, updatedEvent(b)); r != nil {
		return r
	}
	g.log.Info("bundle updated", "generation", gen, "jobs", len(next.GetJobs()), "removals", len(next.GetRemovals()))
	g.wait(ctx, m, gen, actors.OK())
	g.kick(ctx)
	return nil
}

// diff returns the derived jobs of b at generation gen given the current
// record: a job whose derived definition is unchanged keeps its
// generations, an existing job keeps its dormant flag, a new job starts as
// its start_mode says; jobs of rec that b no longer has are appended to
// rec's removals (once per job id).
func diff(rec *internalpb.BundleRecord, b *managerpb.Bundle, gen uint64) (jobs, removals []*internalpb.BundleJobState) {
	old := map[string]*internalpb.BundleJobState{}
	for _, js := range rec.GetJobs() {
		old[js.GetJobId()] = js
	}
	for _, js := range Expand(b, gen) {
		if o, ok := old[js.GetJobId()]; ok {
			js.Dormant = o.GetDormant()
			before := DerivedJob(rec.GetBundle(), spec(rec.GetBundle(), o.GetJobName()), o.GetReplicaIndex(), o.GetDormant())
			after := DerivedJob(b, spec(b, js.GetJobName()), js.GetReplicaIndex(), js.GetDormant())
			if proto.Equal(before, after) {
				js.Generation, js.SyncedGeneration, js.LastError = o.GetGeneration(), o.GetSyncedGeneration(), o.GetLastError()
			}
			delete(old, js.GetJobId())
		}
		jobs = append(jobs, js)
	}
	removals = slices.Clone(rec.GetRemovals())
	for _, o := range rec.GetJobs() {
		if _, gone := old[o.GetJobId()]; gone {
			removals = addRemoval(removals, o, gen)
		}
	}
	return jobs, removals
}

// addRemoval appends js (at generation gen) to removals unless a removal
// of the same job is there already.
func addRemoval(removals []*internalpb.BundleJobState, js *internalpb.BundleJobState, gen uint64) []*internalpb.BundleJobState {
	if slices.ContainsFunc(removals, func(r *internalpb.BundleJobState) bool { return r.GetJobId() == js.GetJobId() }) {
		return removals
	}
	r := proto.Clone(js).(*internalpb.BundleJobState)
	r.Generation, r.SyncedGeneration, r.LastError = gen, 0, ""
	return append(removals, r)
}

// setDormant stamps (dormant true) or removes (false) the dormant tag of
// one derived job; it answers once the job carries it.
func (g *grain) setDormant(ctx actor.Context, m *internalpb.BundleCommand, c *internalpb.SetBundleJobDormant) *internalpb.Reply {
	if r := g.checkLive(); r != nil {
		return r
	}
	i := slices.IndexFunc(g.rec.GetJobs(), func(js *internalpb.BundleJobState) bool {
		return js.GetReplicaIndex() == c.GetReplicaIndex() && js.GetJobName() == c.GetJobName()
	})
	if i < 0 {
		return actors.Fail(errorpb.Code_NOT_FOUND, "bundle %q has no job %q in replica %d", g.id, c.GetJobName(), c.GetReplicaIndex())
	}
	if g.rec.GetJobs()[i].GetDormant() == c.GetDormant() {
		g.wait(ctx, m, g.rec.GetGeneration(), actors.OK())
		return nil
	}
	gen := g.rec.GetGeneration() + 1
	next := g.next()
	next.Generation = gen
	js := next.Jobs[i]
	js.Dormant, js.Generation, js.LastError = c.GetDormant(), gen, ""
	if r := g.commit(m.GetRequestId(), next); r != nil {
		return r
	}
	g.log.Info("bundle job dormant flag changed", "job_id", js.GetJobId(), "dormant", js.GetDormant(), "generation", gen)
	g.wait(ctx, m, gen, actors.OK())
	g.kick(ctx)
	return nil
}

// delete moves the bundle to DELETING and starts the stop-then-delete saga
// (every derived job becomes a removal). It answers once DELETING is
// committed; bundle_deleted marks the end of the saga. Deleting a DELETING
// bundle is OK.
func (g *grain) delete(ctx actor.Context, reqID string) *internalpb.Reply {
	if g.rec == nil {
		return g.notFound()
	}
	if g.deleting() {
		return actors.OK()
	}
	gen := g.rec.GetGeneration() + 1
	next := g.next()
	next.Generation = gen
	next.Bundle.State = managerpb.BundleState_BUNDLE_STATE_DELETING
	for _, js := range next.GetJobs() {
		next.Removals = addRemoval(next.Removals, js, gen)
	}
	next.Jobs = nil
	if r := g.commit(reqID, next, updatedEvent(next.GetBundle())); r != nil {
		return r
	}
	g.log.Info("bundle deleting", "removals", len(next.GetRemovals()))
	g.failWaiters(ctx, actors.Fail(errorpb.Code_ABORTED, "bundle %q is being deleted", g.id))
	g.kick(ctx)
	return actors.OK()
}

// checkLive refuses changes to a missing or DELETING bundle.
func (g *grain) checkLive() *internalpb.Reply {
	switch {
	case g.rec == nil:
		return g.notFound()
	case g.deleting():
		return actors.Fail(errorpb.Code_FAILED_PRECONDITION, "bundle %q is being deleted", g.id)
	}
	return nil
}

// wait answers m's sender with reply once every derived job reflects
// generation gen (at once if they do).
func (g *grain) wait(ctx actor.Context, m *internalpb.BundleCommand, gen uint64, reply *internalpb.Reply) {
	g.addWaiter(ctx, ctx.Sender(), gen, reply, deadlineOf(m))
}

func (g *grain) addWaiter(ctx actor.Context, sender *actor.PID, gen uint64, reply *internalpb.Reply, deadline time.Time) {
	if sender == nil {
		return
	}
	if g.satisfied(gen) {
		g.respond(ctx, sender, reply)
		return
	}
	g.waiters = append(g.waiters, waiter{sender: sender, gen: gen, reply: reply, deadline: deadline})
}

// satisfied reports whether every derived job reflects generation gen: its
// synced generation is at least gen, or at least its own generation if it
// last changed before gen.
func (g *grain) satisfied(gen uint64) bool {
	for _, js := range g.rec.GetJobs() {
		if js.GetSyncedGeneration() < min(js.GetGeneration(), gen) {
			return false
		}
	}
	return true
}

// settleWaiters answers the waiters whose generation is reflected (or
// whose bundle is gone) and forgets those whose caller gave up.
func (g *grain) settleWaiters(ctx actor.Context) {
	now := time.Now() // deadlines are the callers' wall-clock times
	keep := g.waiters[:0]
	for _, w := range g.waiters {
		switch {
		case !w.deadline.IsZero() && now.After(w.deadline):
		case g.rec == nil:
			g.respond(ctx, w.sender, actors.Fail(errorpb.Code_ABORTED, "bundle %q was deleted", g.id))
		case g.satisfied(w.gen):
			g.respond(ctx, w.sender, w.reply)
		default:
			keep = append(keep, w)
		}
	}
	clear(g.waiters[len(keep):])
	g.waiters = keep
}

// failWaiters answers every waiter with r.
func (g *grain) failWaiters(ctx actor.Context, r *internalpb.Reply) {
	for _, w := range g.waiters {
		g.respond(ctx, w.sender, r)
	}
	g.waiters = nil
}

// respond sends r to a caller (nil: a one-way command, nobody to answer).
func (g *grain) respond(ctx actor.Context, to *actor.PID, r *internalpb.Reply) {
	if to != nil {
		ctx.Send(to, r)
	}
}

// deadlineOf is m's deadline (zero: none).
func deadlineOf(m *internalpb.BundleCommand) time.Time {
	if m.GetDeadline() == nil {
		return time.Time{}
	}
	return m.GetDeadline().AsTime()
}
