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
// bundle arrives validated. First every derived job id is checked not to
// exist as a job, whatever its tags (checkAbsent): a taken id is
// ALREADY_EXISTS and nothing is written.
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
	g.checkAbsent(ctx, jobIDsOf(jobs), func(fail *internalpb.Reply) {
		g.creating = nil
		if fail == nil && g.rec != nil {
			fail = actors.Fail(errorpb.Code_ALREADY_EXISTS, "bundle %q already exists", g.id)
		}
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
		if g.rec == nil {
			// A repeat of a create whose bundle was deleted since (the
			// tombstone remembers the request): answered as the first was.
			for _, s := range pc.senders {
				g.respond(ctx, s, g.createdReply())
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

// checkAbsent checks that none of the job ids exists as a job, whatever
// its tags (a Get per job, in parallel), and continues with then on the
// actor: nil if none exists, ALREADY_EXISTS naming the first that does,
// UNAVAILABLE if a job grain did not answer. A job is the bundle's only if
// the bundle's record lists it, never because of its tags, so callers
// pass every id new to the record.
func (g *grain) checkAbsent(ctx actor.Context, ids []string, then func(*internalpb.Reply)) {
	calls := make([]func(func(*internalpb.Reply, error)), len(ids))
	for i, id := range ids {
		calls[i] = func(done func(*internalpb.Reply, error)) {
			g.jobCall(ctx, id, &internalpb.JobCommand{Cmd: &internalpb.JobCommand_Get{Get: &internalpb.GetJob{}}}, done)
		}
	}
	g.checking++
	g.fanOut(calls, func(replies []*internalpb.Reply, errs []error) {
		g.checking--
		for i, id := range ids {
			switch {
			case errs[i] != nil:
				then(actors.Fail(errorpb.Code_UNAVAILABLE, "bundle %q: could not check whether job %q exists: %v", g.id, id, errs[i]))
				return
			case replies[i].GetCode() == errorpb.Code_OK:
				then(actors.Fail(errorpb.Code_ALREADY_EXISTS, "bundle %q: its job %q would have the id of an existing job", g.id, id))
				return
			case replies[i].GetCode() != errorpb.Code_NOT_FOUND:
				then(replies[i])
				return
			}
		}
		then(nil)
	})
}

// newJobIDs returns the ids of jobs that the record rec (nil: none) does
// not know, neither as derived jobs nor as removals, in order.
func newJobIDs(rec *internalpb.BundleRecord, jobs []*internalpb.BundleJobState) []string {
	known := map[string]bool{}
	for _, js := range rec.GetJobs() {
		known[js.GetJobId()] = true
	}
	for _, js := range rec.GetRemovals() {
		known[js.GetJobId()] = true
	}
	var out []string
	for _, js := range jobs {
		if !known[js.GetJobId()] {
			out = append(out, js.GetJobId())
		}
	}
	return out
}

func jobIDsOf(jobs []*internalpb.BundleJobState) []string {
	out := make([]string, len(jobs))
	for i, js := range jobs {
		out[i] = js.GetJobId()
	}
	return out
}

// update re-derives the jobs of a new definition of the bundle: jobs whose
// definition changed get the new generation, removed jobs become removals,
// new jobs are created. Before anything is written, every derived job id
// new to the record is checked not to exist as a job (as CreateBundle
// does): a taken id is ALREADY_EXISTS and the record is left as it is. It
// answers sender once the jobs reflect the change (removals not included:
// they finish in the background).
func (g *grain) update(ctx actor.Context, m *internalpb.BundleCommand, b *managerpb.Bundle, sender *actor.PID) {
	if g.rec != nil && m.GetRequestId() != "" && slices.Contains(g.rec.GetRecentRequests(), m.GetRequestId()) {
		// Applied while this request was being checked (a redelivery).
		g.addWaiter(ctx, sender, g.rec.GetGeneration(), actors.OK(), deadlineOf(m))
		return
	}
	if r := g.checkLive(); r != nil {
		g.respond(ctx, sender, r)
		return
	}
	b = proto.Clone(b).(*managerpb.Bundle)
	b.BundleId = &managerpb.BundleId{BundleId: g.id}
	b.State = managerpb.BundleState_BUNDLE_STATE_LIVE
	if proto.Equal(b, g.rec.GetBundle()) {
		g.addWaiter(ctx, sender, g.rec.GetGeneration(), actors.OK(), deadlineOf(m))
		return
	}
	seq := g.seq
	g.checkAbsent(ctx, newJobIDs(g.rec, Expand(b, 0)), func(fail *internalpb.Reply) {
		if g.seq != seq {
			// The record changed while the ids were checked (another
			// command was accepted): decide again against the new one.
			g.update(ctx, m, b, sender)
			return
		}
		if fail != nil {
			g.respond(ctx, sender, fail)
			return
		}
		gen := g.rec.GetGeneration() + 1
		next := g.next()
		next.Bundle, next.Generation = b, gen
		next.Jobs, next.Removals = diff(g.rec, b, gen)
		if r := g.commit(m.GetRequestId(), next, updatedEvent(b)); r != nil {
			g.respond(ctx, sender, r)
			return
		}
		g.log.Info("bundle updated", "generation", gen, "jobs", len(next.GetJobs()), "removals", len(next.GetRemovals()))
		g.addWaiter(ctx, sender, gen, actors.OK(), deadlineOf(m))
		g.kick(ctx)
	})
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
