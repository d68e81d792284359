package job

import (
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/norsk-oss/norsk-manager/actors"
	"github.com/norsk-oss/norsk-manager/persistence"
	"github.com/norsk-oss/norsk-manager/proto/errorpb"
	"github.com/norsk-oss/norsk-manager/proto/internalpb"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
)

// Config configures job grains.
type Config struct {
	Journal persistence.Journal
	Router  actors.Router
	// Clock returns the current time; nil means time.Now.
	Clock  func() time.Time
	Logger *slog.Logger
	// MaxHistory bounds a job's history; the oldest entries are dropped
	// beyond it. Default 1000.
	MaxHistory int
	// MaxRecordBytes bounds a job's encoded record (definition, history,
	// instances): beyond it the oldest history entries are dropped, then
	// the previous-job copies of job_updated entries. It keeps an append
	// (record plus its job_updated event) within the store's batch limit.
	// Default 1.5 MiB.
	MaxRecordBytes int
	// IdleTimeout passivates a grain that received nothing for this long.
	// Default 20 s: activation is one read, and a burst of creations must
	// not keep thousands of idle grains in memory.
	IdleTimeout time.Duration
	// NodeTimeout bounds the wait for a node grain's answer. Default 10 s.
	NodeTimeout time.Duration
	// AppendTimeout bounds one journal append. Default 10 s.
	AppendTimeout time.Duration
	// Store is read after a deletion commits, for the nodes whose workers
	// are told about it (delete_job; see tellWorkersDeleted). Nil: workers
	// are not told (grain tests that have no nodes).
	Store *persistence.Store
}

func (c *Config) defaults() {
	if c.Clock == nil {
		c.Clock = time.Now
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.MaxHistory <= 0 {
		c.MaxHistory = 1000
	}
	if c.MaxRecordBytes <= 0 {
		c.MaxRecordBytes = 3 << 19
	}
	if c.IdleTimeout <= 0 {
		c.IdleTimeout = 20 * time.Second
	}
	if c.NodeTimeout <= 0 {
		c.NodeTimeout = 10 * time.Second
	}
	if c.AppendTimeout <= 0 {
		c.AppendTimeout = 10 * time.Second
	}
}

// Kind returns the job grain kind for an actors.Host.
func Kind(cfg Config) actors.Kind {
	cfg.defaults()
	return actors.Kind{
		Name: actors.KindJob,
		Props: func(id string) *actor.Props {
			return actor.PropsFromProducer(func() actor.Actor {
				return &grain{cfg: cfg, id: id, log: cfg.Logger.With("job_id", id)}
			})
		},
	}
}

// grain is the stateful actor of one job. Its fields are touched only from
// Receive (and continuations, which protoactor runs on the actor too).
type grain struct {
	cfg Config
	id  string
	log *slog.Logger

	rec *internalpb.JobRecord // nil: the job does not exist
	seq persistence.Seq
	// deleted holds, while rec is nil, the request ids the job's tombstone
	// keeps (its last commands and its delete): repeats are answered as
	// such, and a re-creation carries them over.
	deleted []string
	// pending holds roles whose StartJob waits for the node grain: role →
	// the node and the instance id of the attempt.
	pending map[string]pendingStart
	// appended is set by commit: the command being handled tried an
	// append (handle must not decide it a second time, unless the journal
	// refused it outright).
	appended bool
	// endedWhilePending holds roles of pending whose worker reported the
	// instance failed or stopped before the provision's answer arrived:
	// role → node (reportGone recorded it; started must not).
	endedWhilePending map[string]string
	// idle passivates the grain after IdleTimeout without a message.
	idle actors.IdleTimer
	// audits holds the API commands' audit intents until their commit.
	audits actors.Audits
}

func (g *grain) Receive(ctx actor.Context) {
	if _, tick := ctx.Message().(*actors.IdleTick); !tick {
		g.idle.Touch()
	}
	switch m := ctx.Message().(type) {
	case *actor.Started:
		g.pending = map[string]pendingStart{}
		g.endedWhilePending = map[string]string{}
		g.load()
		g.idle.Start(ctx, g.cfg.IdleTimeout)
	case *actors.IdleTick:
		if g.idle.Expired() && len(g.pending) == 0 {
			ctx.Send(ctx.Parent(), &actors.Passivate{})
		}
	case *actor.Stopping:
		g.idle.Stop()
	case *internalpb.JobCommand:
		g.handle(ctx, m)
	}
}

// load reads the record from the journal. A read failure panics: the
// supervisor restarts the grain, which loads again.
func (g *grain) load() {
	rec := &internalpb.JobRecord{}
	found, seq, deleted, err := actors.LoadRecordOrTombstone(g.cfg.Journal, persistence.JobKey(g.id), rec)
	if err != nil {
		panic(fmt.Sprintf("job %s: %v", g.id, err))
	}
	g.seq, g.deleted = seq, deleted
	g.rec = nil
	if found {
		g.rec = rec
	}
}

func (g *grain) handle(ctx actor.Context, m *internalpb.JobCommand) {
	if actors.Expired(m.GetDeadline()) {
		ctx.Respond(actors.Late(actors.KindJob, g.id))
		return
	}
	g.audits.Hold(m.GetRequestId(), m.GetAudit())
	// Answer only from the newest committed record: an activation that
	// missed writes (another manager's, or its own manager was frozen)
	// would refuse a current hash or miss an instance. An answer backed by
	// a commit is fresh by the journal's fence; every other answer needs
	// the check (actors.Current). Commands that act outside the journal
	// before they commit (a provision, a stop of what a worker reports)
	// are checked first; the others are decided optimistically and
	// checked only if they did not commit.
	checked := false
	if checkFirst(m) {
		if r := g.ensureCurrent(m); r != nil {
			ctx.Respond(r)
			return
		}
		checked = true
	}
	seq := g.seq
	g.appended = false
	r := g.dispatch(ctx, m)
	// Decided again only if the first answer touched nothing: an append
	// whose outcome is unknown (UNAVAILABLE) may have committed, and a
	// second decision on the reloaded record would then refuse what was
	// in fact done.
	if r != nil && !checked && !g.appended && g.seq == seq {
		if fail := g.ensureCurrent(m); fail != nil {
			ctx.Respond(fail)
			return
		}
		if g.seq != seq { // it was stale: decide on the newest record
			r = g.dispatch(ctx, m)
		}
	}
	if r.GetCode() == errorpb.Code_ABORTED && !actors.Expired(m.GetDeadline()) {
		// Another writer committed between the check and the append; the
		// commit reloaded the record: decide once more on it.
		r = g.dispatch(ctx, m)
	}
	if r != nil {
		ctx.Respond(r)
	}
}

// checkFirst reports whether m must be checked for freshness before it is
// decided: reads, and commands with effects outside the journal before
// (or instead of) their commit.
func checkFirst(m *internalpb.JobCommand) bool {
	switch m.GetCmd().(type) {
	case *internalpb.JobCommand_Get, *internalpb.JobCommand_Start, *internalpb.JobCommand_InstanceReport, *internalpb.JobCommand_Activate:
		return true
	}
	return false
}

// ensureCurrent reloads the record if a newer one was committed. A
// non-nil reply is the answer when the check could not be made.
func (g *grain) ensureCurrent(m *internalpb.JobCommand) *internalpb.Reply {
	stale, fail := actors.Current(g.cfg.Journal, persistence.JobKey(g.id), g.seq, m.GetDeadline())
	if fail != nil {
		return fail
	}
	if stale {
		g.log.Info("record changed since this activation loaded it; reloading")
		g.load()
	}
	return nil
}

// dispatch carries out m on the current record. A nil reply means the
// command answers later (StartJob, from its continuation).
func (g *grain) dispatch(ctx actor.Context, m *internalpb.JobCommand) *internalpb.Reply {
	if rid := m.GetRequestId(); rid != "" && (slices.Contains(g.rec.GetRecentRequests(), rid) || g.rec == nil && slices.Contains(g.deleted, rid)) {
		return g.replayReply(m)
	}
	switch c := m.GetCmd().(type) {
	case *internalpb.JobCommand_Create:
		return g.create(m.GetRequestId(), c.Create.GetJob())
	case *internalpb.JobCommand_Update:
		return g.update(m.GetRequestId(), c.Update.GetJob())
	case *internalpb.JobCommand_Delete:
		return g.delete(m.GetRequestId())
	case *internalpb.JobCommand_Start:
		return g.start(ctx, m.GetRequestId(), c.Start)
	case *internalpb.JobCommand_Stop:
		return g.stop(ctx, m.GetRequestId(), c.Stop)
	case *internalpb.JobCommand_Complete:
		return g.complete(ctx, m.GetRequestId())
	case *internalpb.JobCommand_Get:
		return g.get()
	case *internalpb.JobCommand_Activate:
		return g.activate(m.GetRequestId())
	case *internalpb.JobCommand_InstanceReport:
		return g.instanceReport(ctx, m.GetRequestId(), c.InstanceReport)
	case *internalpb.JobCommand_NodeGone:
		return g.nodeGone(m.GetRequestId(), c.NodeGone)
	case *internalpb.JobCommand_RecordPlacementFailure:
		return g.recordPlacementFailure(m.GetRequestId(), c.RecordPlacementFailure)
	case *internalpb.JobCommand_RecheckPlacement:
		return g.recheckPlacement(m.GetRequestId(), c.RecheckPlacement)
	case *internalpb.JobCommand_Preempt:
		return g.preempt(ctx, m.GetRequestId(), c.Preempt)
	case *internalpb.JobCommand_BeginMigration:
		return g.beginMigration(m.GetRequestId(), c.BeginMigration)
	case *internalpb.JobCommand_HandOverMigration:
		return g.handOverMigration(m.GetRequestId(), c.HandOverMigration)
	case *internalpb.JobCommand_AbortMigration:
		return g.abortMigration(m.GetRequestId(), c.AbortMigration)
	case *internalpb.JobCommand_EndMigration:
		return g.endMigration(m.GetRequestId(), c.EndMigration)
	}
	return actors.Fail(errorpb.Code_INVALID_ARGUMENT, "job %s: empty command", g.id)
}

// replayReply answers a command whose request id was already applied, as
// it was answered: a create or update with the hash of the definition it
// wrote (not the job's current one, which a later write may have changed).
func (g *grain) replayReply(m *internalpb.JobCommand) *internalpb.Reply {
	switch c := m.GetCmd().(type) {
	case *internalpb.JobCommand_Create:
		return hashReply(Hash(c.Create.GetJob()))
	case *internalpb.JobCommand_Update:
		return hashReply(Hash(c.Update.GetJob()))
	}
	return actors.OK()
}

func (g *grain) get() *internalpb.Reply {
	if g.rec == nil {
		return g.notFound()
	}
	return &internalpb.Reply{Payload: &internalpb.Reply_Job{Job: g.rec}}
}

func (g *grain) notFound() *internalpb.Reply {
	return actors.Fail(errorpb.Code_NOT_FOUND, "job %q not found", g.id)
}

// now returns the grain's clock as a proto timestamp.
func (g *grain) now() *timestamppb.Timestamp { return timestamppb.New(g.cfg.Clock()) }

// next returns a private copy of the record to build the next state in.
func (g *grain) next() *internalpb.JobRecord {
	return proto.Clone(g.rec).(*internalpb.JobRecord)
}

// addHistory appends entries, keeping at most MaxHistory.
func (g *grain) addHistory(rec *internalpb.JobRecord, entries ...*managerpb.JobHistoryEntry) {
	h := append(rec.Job.HistoryEntry, entries...)
	if over := len(h) - g.cfg.MaxHistory; over > 0 {
		h = slices.Delete(h, 0, over)
	}
	rec.Job.HistoryEntry = h
}

// fitRecord trims rec's history until its encoding is at most max bytes:
// oldest entries first (the newest is kept), then the previous-job copies
// of the remaining job_updated entries, oldest first. The job definition
// and instances are never trimmed (the gateway bounds the definition).
func fitRecord(rec *internalpb.JobRecord, max int) {
	size := proto.Size(rec)
	if size <= max {
		return
	}
	h := rec.GetJob().GetHistoryEntry()
	drop := 0
	for drop < len(h)-1 && size > max {
		size -= protowire.SizeTag(2) + protowire.SizeBytes(proto.Size(h[drop]))
		drop++
	}
	h = h[drop:]
	for i := 0; i < len(h) && size > max; i++ {
		if u := h[i].GetJobUpdated(); u.GetPreviousJob() != nil {
			before := proto.Size(h[i])
			u.PreviousJob = nil
			size -= before - proto.Size(h[i])
		}
	}
	rec.Job.HistoryEntry = h
}

// commit appends next (nil: delete the job) with its events, and on success
// makes it the grain's state. A non-nil return is the reply for the caller.
func (g *grain) commit(reqID string, next *internalpb.JobRecord, events ...*managerpb.EventStreamEvent) *internalpb.Reply {
	var rec proto.Message
	if next != nil {
		next.RecentRequests = actors.RememberRequest(next.RecentRequests, reqID)
		fitRecord(next, g.cfg.MaxRecordBytes)
		rec = next
	}
	g.appended = true
	res, fail := actors.CommitAudited(g.cfg.Journal, persistence.JobKey(g.id), g.seq, reqID, rec, events, g.cfg.Clock(), g.cfg.AppendTimeout,
		g.audits.Take(reqID))
	if fail == nil && !res.Duplicate {
		g.audits.Done(reqID)
	}
	if fail != nil || res.Duplicate {
		if fail != nil {
			g.log.Warn("journal append failed; reloading the record", "error", fail.GetMessage())
		}
		g.load()
		return fail
	}
	g.rec, g.seq = next, res.Seq
	return nil
}

// stateAfter applies the PRE → ACTIVE rule to a job at time now.
func stateAfter(j *managerpb.Job, now time.Time) managerpb.Job_JobState {
	if j.GetState() == managerpb.Job_PRE && !j.GetStartDateTime().AsTime().After(now) {
		return managerpb.Job_ACTIVE
	}
	return j.GetState()
}

func instanceIndex(rec *internalpb.JobRecord, role string) int {
	return slices.IndexFunc(rec.GetInstances(), func(in *internalpb.Instance) bool { return in.GetRole() == role })
}

// putInstance records in as rec's instance of its role. An owed stop of
// that role on that node is void from then on: the instance is wanted
// there again (started on purpose, or its start was under way).
func putInstance(rec *internalpb.JobRecord, in *internalpb.Instance) {
	if j := owedIndex(rec, in.GetRole(), in.GetNodeId()); j >= 0 {
		rec.StopsOwed = slices.Delete(rec.StopsOwed, j, j+1)
	}
	if i := instanceIndex(rec, in.GetRole()); i >= 0 {
		rec.Instances[i] = in
		return
	}
	rec.Instances = append(rec.Instances, in)
	slices.SortFunc(rec.Instances, func(a, b *internalpb.Instance) int {
		switch {
		case a.GetRole() < b.GetRole():
			return -1
		case a.GetRole() > b.GetRole():
			return 1
		}
		return 0
	})
}

func removeInstance(rec *internalpb.JobRecord, role string) {
	if i := instanceIndex(rec, role); i >= 0 {
		rec.Instances = slices.Delete(rec.Instances, i, i+1)
	}
}
