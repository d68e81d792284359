package node

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/scheduler"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/norsk-oss/norsk-manager/actors"
	"github.com/norsk-oss/norsk-manager/persistence"
	"github.com/norsk-oss/norsk-manager/proto/commonpb"
	"github.com/norsk-oss/norsk-manager/proto/errorpb"
	"github.com/norsk-oss/norsk-manager/proto/internalpb"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
	"github.com/norsk-oss/norsk-manager/proto/workerpb"
	"github.com/norsk-oss/norsk-manager/providers"
)

// Config configures node grains.
type Config struct {
	Journal  persistence.Journal
	Store    *persistence.Store
	Router   actors.Router
	Liveness *actors.Liveness
	// Clock returns the current time; nil means time.Now.
	Clock  func() time.Time
	Logger *slog.Logger
	// HelloTimeout bounds the wait for a worker's hello after the stream
	// opens. Default 10 s.
	HelloTimeout time.Duration
	// InitialHealthTimeout bounds the gap between hello and the first
	// health ping (INITIALISATION_HEALTH_PING_TIME_EXCEEDED). Default 10 s.
	InitialHealthTimeout time.Duration
	// HealthTimeout bounds the gap between two messages of a worker
	// (HEALTH_PING_TIME_EXCEEDED). Default 10 s; workers ping every 2 s.
	HealthTimeout time.Duration
	// LostTimeout is how long a node may be without a session before it is
	// declared stopped. Default 30 s.
	LostTimeout time.Duration
	// RedialMin and RedialMax bound the backoff between dials. Defaults
	// 250 ms and 10 s.
	RedialMin, RedialMax time.Duration
	// AppendTimeout bounds one journal append. Default 10 s.
	AppendTimeout time.Duration
	// IdleTimeout passivates a grain with no session and nothing to redial.
	// Default 5 minutes.
	IdleTimeout time.Duration
	// DialOptions are added to every dial of a worker.
	DialOptions []grpc.DialOption
	// PinnedDialOptions, if set, returns the options added after
	// DialOptions to the dial of a worker whose record pins a self-signed
	// certificate (its SHA-256, certpin.go): TLS accepting that
	// certificate only. Nil: such a worker is dialled with DialOptions
	// alone (and its certificate is not accepted where they verify a CA).
	PinnedDialOptions func(sha256 []byte) []grpc.DialOption
	// Providers are the cloud providers by kind (AWS, OCI); a missing one
	// makes CreateAwsNode/CreateOciNode fail with FAILED_PRECONDITION.
	Providers map[managerpb.NodeProvider]providers.Provider
	// ManagerURLs are the API addresses written into a cloud node's user
	// data, for its worker to register with.
	ManagerURLs []string
	// UserData builds a cloud node's boot script; nil: DefaultUserData,
	// or TLSUserData when ManagerCA returns a CA bundle.
	UserData func(nodeID, token string, managerURLs []string) string
	// ManagerCA, if set, returns the CA bundle (PEM) that signed the
	// managers' certificates, written into a cloud node's user data so
	// that its worker registers over TLS and verifies the managers
	// (TLSUserData); empty: plaintext. Called at every launch, so a
	// reloaded bundle is used by the next one. It must not block.
	ManagerCA func() []byte
	// ManagerName is the name the managers' certificates carry, which a
	// cloud node's worker verifies instead of each URL's host
	// (--tls-server-name). Used with ManagerCA.
	ManagerName string
	// PendingTimeout bounds a cloud node's create → instance running
	// (PENDING_TIME_EXCEEDED). Default 10 minutes.
	PendingTimeout time.Duration
	// StartupTimeout bounds instance running → worker registered and
	// pinging (STARTUP_TIME_EXCEEDED). Default 10 minutes. The registration
	// token expires PendingTimeout + StartupTimeout after the create.
	StartupTimeout time.Duration
	// CloudPollInterval is how often a pending instance is described, and
	// the delay before a failed termination is retried. Default 5 s.
	CloudPollInterval time.Duration
	// MoveGrace is how long a node's worker session must have been down
	// before a worker at another address with the node's credential is
	// accepted as the same host moved (identity.go). Default
	// DefaultMoveGrace (15 s).
	MoveGrace time.Duration
	// OrphanGrace is how long a job a worker runs that the store does not
	// know keeps running before it is stopped (orphans.go). Default
	// DefaultOrphanGrace (10 minutes); negative: stopped at once.
	OrphanGrace time.Duration
	// StopResendInterval is how often a node grain holding a healthy
	// worker session re-sends stop_job for the instances job records on
	// the node still mark STOPPING (resendStops). Default 3 s.
	StopResendInterval time.Duration
	// Barrier, if set (an HA cluster), is called before reading which
	// instances job records place on the node, so the read reflects every
	// acknowledged write.
	Barrier func(ctx context.Context) error
}

func (c *Config) defaults() {
	if c.Clock == nil {
		c.Clock = time.Now
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Liveness == nil {
		c.Liveness = actors.NewLiveness()
	}
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&c.HelloTimeout, 10*time.Second)
	def(&c.InitialHealthTimeout, 10*time.Second)
	def(&c.HealthTimeout, 10*time.Second)
	def(&c.LostTimeout, 30*time.Second)
	def(&c.RedialMin, 250*time.Millisecond)
	def(&c.RedialMax, 10*time.Second)
	def(&c.AppendTimeout, 10*time.Second)
	def(&c.IdleTimeout, 5*time.Minute)
	def(&c.PendingTimeout, 10*time.Minute)
	def(&c.StartupTimeout, 10*time.Minute)
	def(&c.CloudPollInterval, 5*time.Second)
	def(&c.StopResendInterval, 3*time.Second)
	def(&c.MoveGrace, DefaultMoveGrace)
	if c.OrphanGrace == 0 {
		c.OrphanGrace = DefaultOrphanGrace
	}
}

// Kind returns the node grain kind for an actors.Host.
func Kind(cfg Config) actors.Kind {
	cfg.defaults()
	return actors.Kind{
		Name: actors.KindNode,
		Props: func(id string) *actor.Props {
			return actor.PropsFromProducer(func() actor.Actor {
				return &grain{cfg: cfg, id: id, log: cfg.Logger.With("node_id", id)}
			})
		},
	}
}

// Timer messages to the grain itself.
type (
	redial      struct{}
	lostTimeout struct{ since time.Time }
)

// grain is the stateful actor of one node.
type grain struct {
	cfg Config
	id  string
	log *slog.Logger
	// audits holds the API commands' audit intents until their commit.
	audits actors.Audits
	// idle passivates the grain after IdleTimeout without a message.
	idle   actors.IdleTimer
	timer  *scheduler.TimerScheduler
	system *actor.ActorSystem
	// actx is the grain's own actor context, kept so that commit can act
	// on a reload that shows the session superseded; used only from
	// Receive and its continuations.
	actx actor.Context

	rec *internalpb.NodeRecord // nil: unknown (or deregistered)
	seq persistence.Seq

	session      *actor.PID                   // current session child, nil if none
	sessionEpoch uint64                       // epoch of the current (or last) session
	connected    bool                         // the current session's hello was accepted
	healthy      bool                         // the current session has sent a health ping
	helloRunning []*workerpb.WorkerRunningJob // running_jobs of the current session's hello
	backoff      time.Duration
	cancelRedial scheduler.CancelFunc
	lostSince    time.Time // zero while connected
	cancelLost   scheduler.CancelFunc
	lastFailure  managerpb.NodeStopping_Reason
	pendingNonce string // nonce of the current session

	cloudGen    uint64             // generation of the cloud work in flight; older results are stale
	cloudCtx    context.Context    // of the cloud goroutines; cancelled when the grain stops
	cloudCancel context.CancelFunc // nil until the first cloud call
	// terminateFailures counts failed terminations in a row (backoff).
	terminateFailures int

	// superseded is set once another activation of the grain holds the
	// worker session: this one passivates (ownership.go).
	superseded bool
	// provisions wait for the session being dialled (queueProvision).
	provisions []pendingProvision
	// provisionSentAt is when a provision was last sent to the worker:
	// a release waits releaseSettle after it (provisioned.go).
	provisionSentAt time.Time
	// cancelResend stops the stop-resend ticker (nil: not running).
	cancelResend scheduler.CancelFunc
	// activatedAt is when this activation started.
	activatedAt time.Time
	// cancelOrphans stops the orphan timer (nil: not armed).
	cancelOrphans scheduler.CancelFunc
}

func (g *grain) Receive(ctx actor.Context) {
	if _, tick := ctx.Message().(*actors.IdleTick); !tick {
		g.idle.Touch()
	}
	switch m := ctx.Message().(type) {
	case *actor.Started:
		g.timer = scheduler.NewTimerScheduler(ctx)
		g.system = ctx.ActorSystem()
		g.actx = ctx
		g.activatedAt = g.cfg.Clock()
		g.load()
		g.idle.Start(ctx, g.cfg.IdleTimeout)
		if g.rec != nil {
			g.cloudWork(ctx) // resume a create or termination after a restart
		}
		// An activation that wants a session dials at once: commands for
		// the worker must not be refused by a grain that merely has not
		// dialled yet (ownership.go).
		g.ensureSession(ctx)
	case *actors.IdleTick:
		if g.idle.Expired() && g.session == nil && g.cancelRedial == nil && !g.cloudBusy() {
			ctx.Send(ctx.Parent(), &actors.Passivate{})
		}
	case *actor.Stopping:
		g.idle.Stop()
		g.stopTimers()
		g.failProvisions(ctx, g.supersededReply())
		if g.cloudCancel != nil {
			g.cloudCancel()
		}
		if g.connected {
			g.cfg.Liveness.Update(g.id, func(l *actors.NodeLiveness) { l.Connected = false })
		}
	case *internalpb.NodeCommand:
		g.handle(ctx, m)
	case *sessionHello:
		g.onHello(ctx, m)
	case *workerMessage:
		g.onWorkerMessage(ctx, m)
	case *sessionDown:
		g.onSessionDown(ctx, m)
	case *redial:
		g.cancelRedial = nil
		g.ensureSession(ctx)
	case *lostTimeout:
		g.onLost(ctx, m)
	case *provisionTimeout:
		g.onProvisionTimeout(ctx)
	case *stopResend:
		g.resendStops()
	case *orphanDue:
		g.onOrphansDue(ctx)
	case *cloudLaunched:
		g.onCloudLaunched(ctx, m)
	case *cloudDescribed:
		g.onCloudDescribed(ctx, m)
	case *cloudTerminated:
		g.onCloudTerminated(ctx, m)
	case *cloudTimer:
		g.onCloudTimer(ctx, m)
	case *cloudPoll:
		if m.gen == g.cloudGen {
			g.cloudWork(ctx)
		}
	}
}

func (g *grain) load() {
	rec := &internalpb.NodeRecord{}
	found, seq, err := actors.LoadRecord(g.cfg.Journal, persistence.NodeKey(g.id), rec)
	if err != nil {
		panic(fmt.Sprintf("node %s: %v", g.id, err))
	}
	g.seq = seq
	g.rec = nil
	if found {
		g.rec = rec
		g.sessionEpoch = max(g.sessionEpoch, rec.GetSessionEpoch())
	}
}

func (g *grain) stopTimers() {
	if g.cancelRedial != nil {
		g.cancelRedial()
		g.cancelRedial = nil
	}
	if g.cancelLost != nil {
		g.cancelLost()
		g.cancelLost = nil
	}
	g.stopResendTicker()
	if g.cancelOrphans != nil {
		g.cancelOrphans()
		g.cancelOrphans = nil
	}
}

func (g *grain) stopResendTicker() {
	if g.cancelResend != nil {
		g.cancelResend()
		g.cancelResend = nil
	}
}

func (g *grain) handle(ctx actor.Context, m *internalpb.NodeCommand) {
	if actors.Expired(m.GetDeadline()) {
		if ctx.Sender() != nil {
			ctx.Respond(actors.Late(actors.KindNode, g.id))
		}
		return
	}
	g.audits.Hold(m.GetRequestId(), m.GetAudit())
	if r := g.refresh(ctx, m); r != nil {
		if ctx.Sender() != nil {
			ctx.Respond(r)
		}
		return
	}
	if g.rec != nil && m.GetRequestId() != "" && slices.Contains(g.rec.GetRecentRequests(), m.GetRequestId()) {
		ctx.Respond(g.replayReply(m))
		return
	}
	var r *internalpb.Reply
	switch c := m.GetCmd().(type) {
	case *internalpb.NodeCommand_RegisterSlot:
		r = g.registerSlot(m.GetRequestId(), c.RegisterSlot)
	case *internalpb.NodeCommand_MemberRegister:
		r = g.memberRegister(ctx, m.GetRequestId(), c.MemberRegister)
	case *internalpb.NodeCommand_Deregister:
		r = g.deregister(ctx, m.GetRequestId())
	case *internalpb.NodeCommand_Terminate:
		if c.Terminate.GetReleaseIdleSince() != nil {
			r = g.release(ctx, m.GetRequestId(), c.Terminate)
		} else {
			r = g.terminate(ctx, m.GetRequestId(), nil)
		}
	case *internalpb.NodeCommand_CreateMock:
		r = g.createMock(ctx, m.GetRequestId(), c.CreateMock)
	case *internalpb.NodeCommand_CreateCloud:
		r = g.createCloud(ctx, m.GetRequestId(), c.CreateCloud)
	case *internalpb.NodeCommand_Provision:
		if r = g.provision(ctx, c.Provision, m.GetDeadline()); r == nil {
			return // queued for the session being dialled
		}
	case *internalpb.NodeCommand_StopInstance:
		r = g.stopInstance(ctx, c.StopInstance)
	case *internalpb.NodeCommand_DeleteJobData:
		r = g.deleteJobData(c.DeleteJobData)
	case *internalpb.NodeCommand_Get:
		r = g.get()
	case *internalpb.NodeCommand_Wake:
		g.wake(ctx)
		r = actors.OK()
	case *internalpb.NodeCommand_OrphanFound:
		r = g.onOrphanFound(ctx, c.OrphanFound)
	case *internalpb.NodeCommand_StopOrphan:
		r = g.stopOrphan(ctx, m.GetRequestId(), c.StopOrphan)
	case *internalpb.NodeCommand_UpdatePhysical:
		r = g.updatePhysical(m.GetRequestId(), c.UpdatePhysical)
	case *internalpb.NodeCommand_SetScheduling:
		r = g.setScheduling(m.GetRequestId(), c.SetScheduling)
	case *internalpb.NodeCommand_SetIdle:
		r = g.setIdle(m.GetRequestId(), c.SetIdle)
	default:
		r = actors.Fail(errorpb.Code_INVALID_ARGUMENT, "node %s: empty command", g.id)
	}
	if ctx.Sender() != nil {
		ctx.Respond(r)
	}
}

// replayReply answers a command whose request id was already applied.
func (g *grain) replayReply(m *internalpb.NodeCommand) *internalpb.Reply {
	switch m.GetCmd().(type) {
	case *internalpb.NodeCommand_RegisterSlot:
		return g.registerReply()
	case *internalpb.NodeCommand_MemberRegister:
		return g.memberReply()
	}
	return actors.OK()
}

func (g *grain) get() *internalpb.Reply {
	if g.rec == nil {
		return g.notFound()
	}
	return &internalpb.Reply{Payload: &internalpb.Reply_Node{Node: g.rec}}
}

func (g *grain) notFound() *internalpb.Reply {
	return actors.Fail(errorpb.Code_NOT_FOUND, "node %q not found", g.id)
}

func (g *grain) now() *timestamppb.Timestamp { return timestamppb.New(g.cfg.Clock()) }

func (g *grain) next() *internalpb.NodeRecord {
	if g.rec == nil {
		return &internalpb.NodeRecord{NodeId: g.id}
	}
	return proto.Clone(g.rec).(*internalpb.NodeRecord)
}

// commit appends next (nil: delete) with its events; on success it becomes
// the grain's state. A non-nil return is the reply for the caller.
func (g *grain) commit(reqID string, next *internalpb.NodeRecord, events ...*managerpb.EventStreamEvent) *internalpb.Reply {
	var rec proto.Message
	if next != nil {
		next.RecentRequests = actors.RememberRequest(next.RecentRequests, reqID)
		rec = next
	}
	res, fail := actors.CommitAudited(g.cfg.Journal, persistence.NodeKey(g.id), g.seq, reqID, rec, events, g.cfg.Clock(), g.cfg.AppendTimeout,
		g.audits.Take(reqID))
	if fail == nil && !res.Duplicate {
		g.audits.Done(reqID)
	}
	if fail != nil || res.Duplicate {
		if fail != nil {
			g.log.Warn("journal append failed; reloading the record", "error", fail.GetMessage())
		}
		g.reloadChecked(g.actx)
		return fail
	}
	g.rec, g.seq = next, res.Seq
	return nil
}

// Event constructors.

func (g *grain) nodeID() *commonpb.NodeId { return &commonpb.NodeId{NodeId: g.id} }

func evStarting(rec *internalpb.NodeRecord) *managerpb.EventStreamEvent {
	return &managerpb.EventStreamEvent{Event: &managerpb.EventStreamEvent_NodeStarting{NodeStarting: &managerpb.NodeStarting{NodeMetadata: rec.GetMetadata()}}}
}

func evStarted(rec *internalpb.NodeRecord) *managerpb.EventStreamEvent {
	return &managerpb.EventStreamEvent{Event: &managerpb.EventStreamEvent_NodeStarted{NodeStarted: &managerpb.NodeStarted{
		NodeMetadata: rec.GetMetadata(), RunningNodeMetadata: rec.GetRunningMetadata()}}}
}

func (g *grain) evStopping(reason managerpb.NodeStopping_Reason) *managerpb.EventStreamEvent {
	return &managerpb.EventStreamEvent{Event: &managerpb.EventStreamEvent_NodeStopping{NodeStopping: &managerpb.NodeStopping{NodeId: g.nodeID(), Reason: reason}}}
}

func (g *grain) evStopped() *managerpb.EventStreamEvent {
	return &managerpb.EventStreamEvent{Event: &managerpb.EventStreamEvent_NodeStopped{NodeStopped: &managerpb.NodeStopped{NodeId: g.nodeID()}}}
}

func (g *grain) evConnected(rec *internalpb.NodeRecord, instances []*managerpb.RunningJob) *managerpb.EventStreamEvent {
	return &managerpb.EventStreamEvent{Event: &managerpb.EventStreamEvent_PhysicalNodeConnected{PhysicalNodeConnected: &managerpb.PhysicalNodeConnected{
		Node:      &managerpb.PhysicalNode{Id: g.id, Tags: rec.GetMetadata().GetTags(), IpAddress: rec.GetAddress()},
		Instances: instances,
	}}}
}

// instancesOnNode lists the instances job records place on this node.
func (g *grain) instancesOnNode() []persistence.InstanceRef {
	var refs []persistence.InstanceRef
	if g.cfg.Barrier != nil {
		ctx, cancel := context.WithTimeout(context.Background(), g.cfg.AppendTimeout)
		err := g.cfg.Barrier(ctx)
		cancel()
		if err != nil {
			g.log.Warn("read instances on node without catching up", "error", err)
		}
	}
	err := g.cfg.Store.View(func(r *persistence.Reader) error {
		var err error
		refs, err = r.InstancesOnNode(g.id)
		return err
	})
	if err != nil {
		g.log.Error("read instances on node", "error", err)
	}
	return refs
}

// tellJobsNodeGone ends every instance on this node in the job records.
func (g *grain) tellJobsNodeGone(reason managerpb.JobHistoryJobStopping_Reason) {
	seen := map[string]bool{}
	for _, ref := range g.instancesOnNode() {
		if seen[ref.JobID] {
			continue
		}
		seen[ref.JobID] = true
		g.cfg.Router.Send(actors.KindJob, ref.JobID, &internalpb.JobCommand{JobId: ref.JobID, Cmd: &internalpb.JobCommand_NodeGone{
			NodeGone: &internalpb.NodeGone{NodeId: g.id, Reason: reason}}})
	}
}
