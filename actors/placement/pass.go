package placement

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/norsk-oss/norsk-manager/actors"
	"github.com/norsk-oss/norsk-manager/actors/bundle"
	"github.com/norsk-oss/norsk-manager/actors/placement/scheduler"
	"github.com/norsk-oss/norsk-manager/actors/roles"
	"github.com/norsk-oss/norsk-manager/proto/errorpb"
	"github.com/norsk-oss/norsk-manager/proto/internalpb"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
)

// Pass reads the store once, decides every placeable (job, role) without
// a StartJob in flight, and sends the StartJobs (and terminal_state
// writes) it decided, then the StopJobs of drains and dormant bundle jobs
// (drain.go), without waiting for their answers. It returns an
// error only when the store could not be read or the view not built;
// per-job problems are kept as failures and logged.
func (e *Engine) Pass(ctx context.Context) error {
	// The StartJobs in flight before the read: one answered while the
	// store is read may be missing from the view (its answer came after
	// the view was taken), so it counts as in flight for this pass too,
	// rather than being decided (and counted placed) a second time.
	e.passMu.Lock()
	defer e.passMu.Unlock()
	e.mu.Lock()
	pre := maps.Clone(e.inflight)
	e.mu.Unlock()
	now := e.cfg.Clock()
	if err := e.base.update(e.cfg.Store.World(), now); err != nil {
		e.base = newBase() // read whole next time
		return err
	}
	w := e.base.world(now)
	// The pass works on base's view and gives it back as it found it.
	view := w.view
	view.Begin()
	defer view.Rollback()
	e.mu.Lock()
	maps.Copy(pre, e.inflight)
	inflight := make([]scheduler.Placed, 0, len(pre))
	busy := make(map[key]bool, len(pre))
	for k, p := range pre {
		if _, recorded := w.whereOf(k); !recorded {
			inflight = append(inflight, p)
			w.tentative[k] = string(p.Node)
		}
		busy[k] = true
	}
	for k, at := range e.retryAt {
		if w.now.Before(at) {
			busy[k] = true
		} else {
			delete(e.retryAt, k)
		}
	}
	e.mu.Unlock()
	view.Add(inflight...)
	sortByPriority(w.candidates) // HIGH first: room freed for it is its own (preempt.go)
	w.byKey = make(map[key]*candidate, len(w.candidates))
	for i := range w.candidates {
		w.byKey[w.candidates[i].key] = &w.candidates[i]
	}
	w.busy = busy
	e.migratePass(ctx, w, view)
	unplaced := 0
	for i := range w.candidates {
		c := &w.candidates[i]
		if busy[c.key] {
			continue
		}
		if _, done := w.whereOf(c.key); done {
			continue // placed in this pass with its co_locate_with group
		}
		if !e.decide(ctx, w, view, c) {
			unplaced++
		}
	}
	e.cfg.Metrics.setUnplaced(unplaced)
	e.stopPass(ctx, w, view)
	e.rollingPass(ctx, w, view) // rolling_pass.go
	e.provisionPass(ctx, w)
	e.recordFailures(ctx, w)
	e.recheckPass(ctx, w, view)
	return nil
}

// decide places one candidate (or writes its terminal state); it reports
// whether a StartJob was sent.
func (e *Engine) decide(ctx context.Context, w *world, view *scheduler.View, c *candidate) bool {
	var pool *managerpb.Pool
	if c.pool != "" {
		if pool = w.pools[c.pool]; pool == nil {
			e.fail(c.key, ResultNoNode, fmt.Sprintf("pool %q does not exist: create it (norsk-ctl pool create) or change the job's pool", c.pool), nil)
			return false
		}
	}
	policy := policyOf(pool)
	hist := failuresOf(c.rec, c.role)
	verdict := policy.Next(hist.times, w.now)
	if verdict.Exceeded {
		e.writeTerminal(ctx, c, policy.FailureReason(verdict, hist.last))
		return false
	}
	if verdict.Wait > 0 {
		return false // the backoff after the last failure; a later pass
	}
	if replaceWait(c.rec, c.role, policy, w.now) > 0 {
		return false // the pace floor (restart.go); a later pass
	}
	ask := e.askOf(w, c, pool)
	if id, ok := w.uncreated(ask.CoLocateWith); ok {
		// Placed alone it would pin the group to a node chosen for one.
		e.log.Debug("placement waits for its co_locate_with group", "job_id", c.job, "role", c.role, "uncreated", id)
		return false
	}
	members := w.coLocated(c, ask.CoLocateWith, policy)
	for _, m := range members {
		ask.CoLocated = append(ask.CoLocated, scheduler.Member{Job: m.job, Role: m.role,
			Requirements: scheduler.RequirementsFromProto(m.rec.GetJob().GetJob().GetAutoPlacement().GetRequirements()),
			Template:     scheduler.TemplateFromJob(m.rec.GetJob().GetJob()),
			Peer:         w.peerOf(m.rec, m.bundle, m.replica, m.jobName)})
	}
	if verdict.Failures > 0 {
		if verdict.SameNode {
			ask.PreferNode = hist.lastNode
		} else {
			ask.AvoidNodes = hist.nodes
		}
	}
	t0 := time.Now()
	d, err := view.Select(ask)
	e.cfg.Metrics.observeDecision(time.Since(t0))
	var nf *scheduler.Failure
	switch {
	case errors.As(err, &nf):
		e.fail(c.key, ResultNoNode, nf.Error()+e.provNote(c.key), &nf.Metrics, "pool", c.pool)
		w.waitFor(c, ask)
		e.noFit(ctx, w, view, c, pool, ask, nf) // priorities: preemption, bronze drop
		return false
	case err != nil:
		e.fail(c.key, ResultNoNode, err.Error(), nil, "pool", c.pool)
		return false
	}
	view.Add(d.Placed...)
	for i, p := range d.Placed {
		m := c
		if i > 0 {
			m = members[i-1]
		}
		w.tentative[key{p.Job, p.Role}] = string(d.Node)
		e.start(ctx, m, d, p, w.noteOf(m, d, i == 0, ask.Peer))
	}
	return true
}

// coLocated returns the members of c's co_locate_with group (group) that
// are placeable now and placed nowhere, so that the group goes to one node
// in one decision (placement.md, "Co-location and separation"). A member
// in its restart backoff or at its ceiling is left out: it follows later,
// pinned to the group's node by the co_locate_with filter.
func (w *world) coLocated(c *candidate, group []scheduler.JobID, policy scheduler.RestartPolicy) []*candidate {
	var out []*candidate
	for _, id := range group {
		k := key{id, c.role}
		m, ok := w.byKey[k]
		if !ok || w.busy[k] {
			continue
		}
		if _, placed := w.whereOf(k); placed {
			continue
		}
		v := policy.Next(failuresOf(m.rec, m.role).times, w.now)
		if v.Exceeded || v.Wait > 0 || replaceWait(m.rec, m.role, policy, w.now) > 0 {
			continue
		}
		out = append(out, m)
	}
	return out
}

// uncreated returns the first of a co_locate_with group's jobs that has
// no job record yet. The bundle grain writes the bundle record, listing
// every derived job, before it creates their records, so a pass can see a
// group in part; it then waits for the rest (the records are created
// right after, and each creation triggers a pass) so the group is placed
// in one decision.
func (w *world) uncreated(group []scheduler.JobID) (scheduler.JobID, bool) {
	for _, id := range group {
		if !w.read.JobExists(string(id)) {
			return id, true
		}
	}
	return "", false
}

// askOf builds the scheduler's question for c: requirements, constraints,
// the pool's tiers, the bundle's separate_from and co_locate_with within
// the replica, and the other replica's placement with the resilience
// policy's anti-affinity.
func (e *Engine) askOf(w *world, c *candidate, pool *managerpb.Pool) scheduler.Ask {
	j := c.rec.GetJob().GetJob()
	a := scheduler.Ask{Job: c.job, Role: c.role, Pool: c.pool,
		Requirements: scheduler.RequirementsFromProto(j.GetAutoPlacement().GetRequirements()),
		Constraints:  scheduler.ConstraintsFromJob(j), SecurityGroups: j.GetExtraSecurityGroups(),
		Template: scheduler.TemplateFromJob(j)}
	for _, t := range pool.GetTiers() {
		a.Tiers = append(a.Tiers, scheduler.Tier{Name: t.GetName(), Selector: t.GetNodeSelector()})
	}
	if c.bundle == nil {
		return a
	}
	b := c.bundle.GetBundle()
	bid := b.GetBundleId().GetBundleId()
	sibling := func(name string) scheduler.JobID { return scheduler.JobID(bundle.JobID(bid, c.replica, name)) }
	group := coLocateGroup(b, c.jobName)
	for _, n := range group {
		a.CoLocateWith = append(a.CoLocateWith, sibling(n))
	}
	// separate_from of the job and of its group, both directions.
	inGroup := map[string]bool{c.jobName: true}
	for _, n := range group {
		inGroup[n] = true
	}
	for _, s := range b.GetJobs() {
		if inGroup[s.GetJobName()] {
			for _, n := range s.GetSeparateFrom() {
				a.SeparateFrom = appendNew(a.SeparateFrom, sibling(n))
			}
			continue
		}
		for _, n := range s.GetSeparateFrom() {
			if inGroup[n] {
				a.SeparateFrom = appendNew(a.SeparateFrom, sibling(s.GetJobName()))
			}
		}
	}
	if rp := b.GetResiliencePolicy(); rp != nil {
		a.AntiAffinity = scheduler.AntiAffinityFromProto(rp)
		other, role := uint32(1), scheduler.RoleBackup
		if c.replica == 1 {
			other, role = 0, scheduler.RolePrimary
		}
		peer := key{scheduler.JobID(bundle.JobID(bid, other, c.jobName)), role}
		if n, ok := w.whereOf(peer); ok {
			// A node without a record (deleted) has no zone or cloud known.
			sn := schedNode(w.nodeRecs[n])
			a.Peer = &scheduler.Peer{Node: scheduler.NodeID(n), Zone: sn.Zone, Cloud: sn.Cloud}
		}
	}
	return a
}

func appendNew(ids []scheduler.JobID, id scheduler.JobID) []scheduler.JobID {
	for _, x := range ids {
		if x == id {
			return ids
		}
	}
	return append(ids, id)
}

// RequestID is the request id of the engine's StartJob of (job, role)
// decided on the job record's sequence seq: "placement/<job>/<role>/<seq>".
// Every decision on the same record version sends the same id, so the job
// grain runs the role at most once however many leaders or passes decide
// it; a record that changed (the instance started, then ended) gives a new
// id.
func RequestID(job, role string, seq uint64) string {
	return fmt.Sprintf("placement/%s/%s/%d", job, role, seq)
}

// start sends the StartJob of p (c's part of decision d) in the
// background, holding the role in flight until the job grain answers.
func (e *Engine) start(ctx context.Context, c *candidate, d scheduler.Decision, p scheduler.Placed, note *internalpb.PlacementNote) {
	k := c.key
	e.mu.Lock()
	e.inflight[k] = p
	e.mu.Unlock()
	log := e.log.With("job_id", k.job, "role", k.role, "node_id", d.Node, "tier", d.Tier, "pool", c.pool)
	if len(note.GetDegradedAtPlacement()) > 0 {
		log = log.With("degraded", fmt.Sprint(note.GetDegradedAtPlacement()))
	}
	cmd := &internalpb.JobCommand{RequestId: RequestID(string(k.job), string(k.role), uint64(c.seq)), JobId: string(k.job),
		Cmd: &internalpb.JobCommand_Start{Start: &internalpb.StartJob{Role: string(k.role), NodeId: string(d.Node), CpuList: coreIDs(p.Cores), Placement: note}}}
	e.inBackground(func() {
		err := e.request(ctx, string(k.job), cmd)
		e.mu.Lock()
		delete(e.inflight, k)
		e.mu.Unlock()
		var re *actors.ReplyError
		switch {
		case err == nil:
			e.cfg.Metrics.count(ResultPlaced)
			e.placedOK(k)
			e.remember(k, d, note)
			log.Info("job placed", "decision", note.GetDecision())
		case errors.As(err, &re) && re.Code == errorpb.Code_ALREADY_EXISTS:
			// Another decision (a previous leader's) got there first.
			e.placedOK(k)
			if roles.IsMoved(string(k.role)) {
				// Perhaps still being started: the move driver waits
				// rather than asking again every pass (migrate.go).
				e.noteTargetStarting(k, c.seq, p, e.cfg.Clock())
			}
			log.Debug("job role already started", "reply", err)
		case ctx.Err() != nil:
		default:
			e.fail(k, ResultStartFailed, fmt.Sprintf("start on node %s: %v", d.Node, err), nil, "node_id", d.Node)
			e.mu.Lock()
			e.retryAt[k] = e.cfg.Clock().Add(startRetry)
			e.mu.Unlock()
		}
	})
}

// writeTerminal sends the UpdateJob that sets c's terminal_state, unless
// one decided on the same record is in flight.
func (e *Engine) writeTerminal(ctx context.Context, c *candidate, reason string) {
	e.mu.Lock()
	if seq, ok := e.terminalSent[c.job]; ok && seq == c.seq {
		e.mu.Unlock()
		return
	}
	e.terminalSent[c.job] = c.seq
	e.mu.Unlock()
	j := proto.Clone(c.rec.GetJob().GetJob()).(*managerpb.Job)
	j.TerminalState = &managerpb.TerminalState{FailureReason: reason}
	cmd := &internalpb.JobCommand{RequestId: fmt.Sprintf("placement/terminal/%s/%d", c.job, c.seq), JobId: string(c.job),
		Cmd: &internalpb.JobCommand_Update{Update: &internalpb.UpdateJob{Job: j}}}
	e.inBackground(func() {
		err := e.request(ctx, string(c.job), cmd)
		e.mu.Lock()
		delete(e.terminalSent, c.job)
		e.mu.Unlock()
		if err != nil {
			if ctx.Err() == nil {
				e.log.Warn("write terminal state", "job_id", c.job, "role", c.role, "error", err)
			}
			return
		}
		e.cfg.Metrics.count(ResultTerminal)
		e.placedOK(c.key)
		e.log.Warn("job given up: terminal state written", "job_id", c.job, "role", c.role, "pool", c.pool, "failure_reason", reason)
	})
}

// request sends cmd to the job grain and returns its error, if any.
func (e *Engine) request(ctx context.Context, job string, cmd *internalpb.JobCommand) error {
	rctx, cancel := context.WithTimeout(ctx, e.cfg.RequestTimeout)
	defer cancel()
	r, err := e.cfg.Router.Request(rctx, actors.KindJob, job, cmd)
	if err != nil {
		return err
	}
	return actors.AsError(r)
}

// coLocateGroup returns the other job names of name's co_locate_with group
// in bundle b: every job linked to it by co_locate_with in either
// direction, transitively, in spec order.
func coLocateGroup(b *managerpb.Bundle, name string) []string {
	linked := func(x, y string) bool {
		for _, s := range b.GetJobs() {
			if s.GetJobName() == x && slices.Contains(s.GetCoLocateWith(), y) ||
				s.GetJobName() == y && slices.Contains(s.GetCoLocateWith(), x) {
				return true
			}
		}
		return false
	}
	in := map[string]bool{name: true}
	for grew := true; grew; {
		grew = false
		for _, s := range b.GetJobs() {
			n := s.GetJobName()
			if in[n] {
				continue
			}
			for m := range in {
				if linked(n, m) {
					in[n], grew = true, true
					break
				}
			}
		}
	}
	var out []string
	for _, s := range b.GetJobs() {
		if n := s.GetJobName(); n != name && in[n] {
			out = append(out, n)
		}
	}
	return out
}
