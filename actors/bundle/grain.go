package bundle

import (
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/scheduler"
	"google.golang.org/protobuf/proto"

	"github.com/norsk-oss/norsk-manager/actors"
	"github.com/norsk-oss/norsk-manager/persistence"
	"github.com/norsk-oss/norsk-manager/proto/errorpb"
	"github.com/norsk-oss/norsk-manager/proto/internalpb"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
)

// Config configures bundle grains.
type Config struct {
	Journal persistence.Journal
	// Router reaches the job grains.
	Router actors.Router
	// Clock returns the current time; nil means time.Now.
	Clock  func() time.Time
	Logger *slog.Logger
	// IdleTimeout passivates a grain that received nothing for this long
	// and has no work left. Default 20 s.
	IdleTimeout time.Duration
	// JobTimeout bounds one call to a job grain. Default 10 s.
	JobTimeout time.Duration
	// AppendTimeout bounds one journal append. Default 10 s.
	AppendTimeout time.Duration
	// RetryMin and RetryMax bound the backoff between rounds of work that
	// failed (doubling from RetryMin up to RetryMax). Defaults 200 ms and
	// 30 s.
	RetryMin, RetryMax time.Duration
}

func (c *Config) defaults() {
	if c.Clock == nil {
		c.Clock = time.Now
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.IdleTimeout <= 0 {
		c.IdleTimeout = 20 * time.Second
	}
	if c.JobTimeout <= 0 {
		c.JobTimeout = 10 * time.Second
	}
	if c.AppendTimeout <= 0 {
		c.AppendTimeout = 10 * time.Second
	}
	if c.RetryMin <= 0 {
		c.RetryMin = 200 * time.Millisecond
	}
	if c.RetryMax < c.RetryMin {
		c.RetryMax = max(30*time.Second, c.RetryMin)
	}
}

// Kind returns the bundle grain kind for an actors.Host or the cluster.
func Kind(cfg Config) actors.Kind {
	cfg.defaults()
	return actors.Kind{
		Name: actors.KindBundle,
		Props: func(id string) *actor.Props {
			return actor.PropsFromProducer(func() actor.Actor {
				return &grain{cfg: cfg, id: id, log: cfg.Logger.With("bundle_id", id)}
			})
		},
	}
}

// grain is the stateful actor of one bundle. Its fields are touched only
// from Receive and from continuations (which protoactor runs on the actor).
type grain struct {
	cfg Config
	id  string
	log *slog.Logger
	// audits holds the API commands' audit intents until their commit.
	audits actors.Audits
	// idleTimer passivates the grain after IdleTimeout without a message.
	idleTimer actors.IdleTimer
	// deleted holds, while rec is nil, the request ids the bundle's
	// tombstone keeps (commands applied before it was deleted), so that a
	// repeat of one is answered as it was, not as NOT_FOUND.
	deleted []string

	rec *internalpb.BundleRecord // nil: the bundle does not exist
	seq persistence.Seq

	// creating is the CreateBundle whose pre-check (do the derived job ids
	// exist?) is in flight; nil if none.
	creating *pendingCreate
	// checking counts the pre-checks (do job ids exist?) in flight.
	checking int
	// waiters are callers told once the derived jobs reflect a generation.
	waiters []waiter

	// working is true while a round of job calls is in flight; again asks
	// for another round as soon as it ends (the record changed).
	working, again bool
	timer          *scheduler.TimerScheduler
	cancelRetry    scheduler.CancelFunc // nil: no retry scheduled
	backoff        time.Duration
}

// pendingCreate is a CreateBundle between its arrival and its commit.
type pendingCreate struct {
	reqID   string
	senders []*actor.PID
}

// waiter is a caller waiting until every derived job reflects generation
// gen (a job changed after gen needs only to reflect gen).
type waiter struct {
	sender   *actor.PID
	gen      uint64
	reply    *internalpb.Reply // sent on success
	deadline time.Time         // zero: none; past it the caller is gone
}

// retryRound is the self-message of the backoff timer.
type retryRound struct{}

func (g *grain) Receive(ctx actor.Context) {
	if _, tick := ctx.Message().(*actors.IdleTick); !tick {
		g.idleTimer.Touch()
	}
	switch m := ctx.Message().(type) {
	case *actor.Started:
		g.timer = scheduler.NewTimerScheduler(ctx)
		g.load()
		g.idleTimer.Start(ctx, g.cfg.IdleTimeout)
		g.kick(ctx) // resume unfinished work (also after a crash)
	case *actors.IdleTick:
		if g.idleTimer.Expired() && g.idle() {
			ctx.Send(ctx.Parent(), &actors.Passivate{})
		}
	case *actor.Stopping:
		g.idleTimer.Stop()
		g.stopRetry()
	case *retryRound:
		g.cancelRetry = nil
		g.work(ctx)
	case *internalpb.BundleCommand:
		g.handle(ctx, m)
	}
}

// idle reports whether the grain may passivate: no work left or in
// flight, nobody waiting.
func (g *grain) idle() bool {
	return !g.working && g.creating == nil && g.checking == 0 && len(g.waiters) == 0 && !g.rec.GetPendingWork()
}

// load reads the record from the journal. A read failure panics: the
// supervisor restarts the grain, which loads again.
func (g *grain) load() {
	rec := &internalpb.BundleRecord{}
	found, seq, deleted, err := actors.LoadRecordOrTombstone(g.cfg.Journal, persistence.BundleKey(g.id), rec)
	if err != nil {
		panic(fmt.Sprintf("bundle %s: %v", g.id, err))
	}
	g.seq, g.deleted = seq, deleted
	g.rec = nil
	if found {
		g.rec = rec
	}
}

func (g *grain) handle(ctx actor.Context, m *internalpb.BundleCommand) {
	if actors.Expired(m.GetDeadline()) {
		if ctx.Sender() != nil {
			ctx.Respond(actors.Late(actors.KindBundle, g.id))
		}
		return
	}
	g.audits.Hold(m.GetRequestId(), m.GetAudit())
	// Answer only from the newest committed record (actors.Current).
	stale, fail := actors.Current(g.cfg.Journal, persistence.BundleKey(g.id), g.seq, m.GetDeadline())
	if fail != nil {
		if ctx.Sender() != nil {
			ctx.Respond(fail)
		}
		return
	}
	if stale {
		g.log.Info("record changed since this activation loaded it; reloading")
		g.load()
	}
	if rid := m.GetRequestId(); rid != "" && (g.rec != nil && slices.Contains(g.rec.GetRecentRequests(), rid) ||
		g.rec == nil && slices.Contains(g.deleted, rid)) {
		g.replay(ctx, m)
		return
	}
	var r *internalpb.Reply
	switch c := m.GetCmd().(type) {
	case *internalpb.BundleCommand_Create:
		g.create(ctx, m, c.Create.GetBundle()) // answers when the jobs exist
		return
	case *internalpb.BundleCommand_Update:
		g.update(ctx, m, c.Update.GetBundle(), ctx.Sender()) // answers when the jobs reflect it
		return
	case *internalpb.BundleCommand_Delete:
		r = g.delete(ctx, m.GetRequestId())
	case *internalpb.BundleCommand_SetDormant:
		r = g.setDormant(ctx, m, c.SetDormant)
	case *internalpb.BundleCommand_Get:
		r = g.get()
	case *internalpb.BundleCommand_Wake:
		g.kick(ctx)
		r = actors.OK()
	default:
		r = actors.Fail(errorpb.Code_INVALID_ARGUMENT, "bundle %s: empty command", g.id)
	}
	if r != nil && ctx.Sender() != nil {
		ctx.Respond(r)
	}
}

// replay answers a command whose request id was already applied: as it
// was answered (once the derived jobs reflect the change, for the
// commands that wait for that).
func (g *grain) replay(ctx actor.Context, m *internalpb.BundleCommand) {
	if g.rec == nil {
		// Applied before the bundle was deleted (the tombstone keeps the
		// ids): answered as it was, with nothing left to wait for.
		if _, ok := m.GetCmd().(*internalpb.BundleCommand_Create); ok {
			ctx.Respond(g.createdReply())
			return
		}
		ctx.Respond(actors.OK())
		return
	}
	switch m.GetCmd().(type) {
	case *internalpb.BundleCommand_Create:
		g.wait(ctx, m, 1, g.createdReply())
	case *internalpb.BundleCommand_Update, *internalpb.BundleCommand_SetDormant:
		// The change's generation is not recorded per request: waiting for
		// the current one is at least as strong.
		g.wait(ctx, m, g.rec.GetGeneration(), actors.OK())
	default:
		ctx.Respond(actors.OK())
	}
}

func (g *grain) createdReply() *internalpb.Reply {
	return &internalpb.Reply{Payload: &internalpb.Reply_CreateBundle{CreateBundle: &managerpb.CreateBundleResponse{
		BundleId: &managerpb.BundleId{BundleId: g.id}}}}
}

func (g *grain) get() *internalpb.Reply {
	if g.rec == nil {
		return g.notFound()
	}
	return &internalpb.Reply{Payload: &internalpb.Reply_Bundle{Bundle: g.rec}}
}

func (g *grain) notFound() *internalpb.Reply {
	return actors.Fail(errorpb.Code_NOT_FOUND, "bundle %q not found", g.id)
}

func (g *grain) deleting() bool {
	return g.rec.GetBundle().GetState() == managerpb.BundleState_BUNDLE_STATE_DELETING
}

// next returns a private copy of the record to build the next state in.
func (g *grain) next() *internalpb.BundleRecord {
	return proto.Clone(g.rec).(*internalpb.BundleRecord)
}

// commit appends next (nil: delete the bundle, leaving a tombstone) with
// its events, and on success makes it the grain's state. pending_work is
// computed here. A non-nil return is the reply for the caller (the grain
// reloaded its record).
func (g *grain) commit(reqID string, next *internalpb.BundleRecord, events ...*managerpb.EventStreamEvent) *internalpb.Reply {
	var rec proto.Message
	if next != nil {
		next.PendingWork = pending(next)
		next.RecentRequests = actors.RememberRequest(next.RecentRequests, reqID)
		rec = next
	}
	res, fail := actors.CommitAudited(g.cfg.Journal, persistence.BundleKey(g.id), g.seq, reqID, rec, events, g.cfg.Clock(), g.cfg.AppendTimeout,
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
	if next == nil {
		// What the tombstone keeps (persistence's tombstone rule): the
		// deleted record's request ids and this one's.
		g.deleted = actors.RememberRequest(slices.Clone(g.rec.GetRecentRequests()), reqID)
	}
	g.rec, g.seq = next, res.Seq
	return nil
}

// pending reports whether rec leaves work: DELETING, a removal left, or a
// derived job not synced.
func pending(rec *internalpb.BundleRecord) bool {
	if rec.GetBundle().GetState() == managerpb.BundleState_BUNDLE_STATE_DELETING || len(rec.GetRemovals()) > 0 {
		return true
	}
	return slices.ContainsFunc(rec.GetJobs(), func(js *internalpb.BundleJobState) bool {
		return js.GetSyncedGeneration() < js.GetGeneration()
	})
}

func updatedEvent(b *managerpb.Bundle) *managerpb.EventStreamEvent {
	return &managerpb.EventStreamEvent{Event: &managerpb.EventStreamEvent_BundleUpdated{BundleUpdated: &managerpb.BundleUpdated{Bundle: b}}}
}

func deletedEvent(id string) *managerpb.EventStreamEvent {
	return &managerpb.EventStreamEvent{Event: &managerpb.EventStreamEvent_BundleDeleted{BundleDeleted: &managerpb.BundleDeleted{
		BundleId: &managerpb.BundleId{BundleId: id}}}}
}
