package node

import (
	"context"
	"log/slog"

	"fmt"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"math/rand/v2"
	"net"
	"slices"
	"strconv"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"google.golang.org/grpc"

	"github.com/norsk-oss/norsk-manager/actors"
	"github.com/norsk-oss/norsk-manager/proto/commonpb"
	"github.com/norsk-oss/norsk-manager/proto/errorpb"
	"github.com/norsk-oss/norsk-manager/proto/internalpb"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
	"github.com/norsk-oss/norsk-manager/proto/workerauth"
	"github.com/norsk-oss/norsk-manager/proto/workerpb"
)

// wantsSession reports whether the node should have a worker session: it
// has a dial-back address and was not stopped on purpose.
func (g *grain) wantsSession() bool {
	if g.rec == nil || g.rec.GetAddress() == "" {
		return false
	}
	switch g.rec.GetState() {
	case managerpb.NodeLifecycle_NODE_LIFECYCLE_STARTING, managerpb.NodeLifecycle_NODE_LIFECYCLE_STARTED:
		return true
	case managerpb.NodeLifecycle_NODE_LIFECYCLE_STOPPED:
		// Declared stopped because the worker went away: keep trying, so
		// a worker that comes back is taken back.
		return g.rec.GetStopReason() != managerpb.NodeStopping_USER_REQUESTED
	}
	return false
}

// ensureSession dials the worker unless a session exists.
func (g *grain) ensureSession(ctx actor.Context) {
	if g.session != nil || !g.wantsSession() {
		return
	}
	g.sessionEpoch++
	p := sessionParams{
		nodeID:        g.id,
		target:        net.JoinHostPort(g.rec.GetAddress(), strconv.Itoa(int(g.rec.GetPort()))),
		epoch:         g.sessionEpoch,
		nonce:         workerauth.NewNonce(),
		helloTimeout:  g.cfg.HelloTimeout,
		initialHealth: g.cfg.InitialHealthTimeout,
		health:        g.cfg.HealthTimeout,
		dialOptions:   g.dialOptions(),
	}
	g.session = ctx.Spawn(newSessionProps(p))
	g.pendingNonce = p.nonce
	g.log.Debug("dialling worker", "target", p.target, "epoch", p.epoch)
}

// dialOptions are the options of a dial of this node's worker: the
// configured ones, then those of its pinned certificate if it has one.
func (g *grain) dialOptions() []grpc.DialOption {
	pin := g.rec.GetWorkerCertSha256()
	if len(pin) == 0 || g.cfg.PinnedDialOptions == nil {
		return g.cfg.DialOptions
	}
	return append(slices.Clip(g.cfg.DialOptions), g.cfg.PinnedDialOptions(pin)...)
}

// closeSession stops the current session child (if any) at once.
func (g *grain) closeSession(ctx actor.Context) {
	if g.session != nil {
		ctx.Stop(g.session)
		g.session = nil
	}
	g.markDisconnected()
	g.stopResendTicker()
}

// closeSessionGracefully lets the session deliver what was sent to it
// before closing (used after stop_job messages).
func (g *grain) closeSessionGracefully(ctx actor.Context) {
	if g.session != nil {
		ctx.Send(g.session, &closeGracefully{})
		g.session = nil
	}
	g.markDisconnected()
	g.stopResendTicker()
}

func (g *grain) markDisconnected() {
	g.healthy = false
	if g.connected {
		g.connected = false
		g.cfg.Liveness.Update(g.id, func(l *actors.NodeLiveness) { l.Connected = false })
	}
}

// verifyHello checks the worker's proof of the node credential.
func (g *grain) verifyHello(h *workerpb.WorkerHello) error {
	if id := h.GetNodeMetadata().GetNodeId().GetNodeId(); id != "" && id != g.id {
		return fmt.Errorf("worker says it is node %q", id)
	}
	if g.rec.GetProvider() == managerpb.NodeProvider_NODE_PROVIDER_MOCK {
		return nil // mock-pool workers hold no credential
	}
	tok := h.GetToken()
	switch {
	case g.rec.GetCredential() == "":
		return fmt.Errorf("the slot has no node credential yet (no worker registered)")
	case tok == nil || tok.GetCookie() == "":
		return fmt.Errorf("the worker presented no node credential proof")
	case tok.GetInstanceId() != g.id:
		return fmt.Errorf("the worker's proof is for node %q", tok.GetInstanceId())
	case !workerauth.Equal(tok.GetCookie(), workerauth.WorkerProof(g.rec.GetCredential(), g.id, g.pendingNonce)):
		return fmt.Errorf("the worker's node credential proof does not match")
	}
	return nil
}

func (g *grain) onHello(ctx actor.Context, m *sessionHello) {
	if g.session == nil || m.epoch != g.sessionEpoch || g.rec == nil {
		return
	}
	if err := g.verifyHello(m.hello); err != nil {
		g.log.Warn("refusing worker session", "error", err, "address", g.rec.GetAddress(), "port", g.rec.GetPort())
		g.closeSession(ctx)
		g.sessionLost(ctx, managerpb.NodeStopping_STARTUP_TIME_EXCEEDED)
		return
	}
	next := g.next()
	next.SessionEpoch = m.epoch
	next.LastConnected = g.now()
	next.Contested = ""
	g.takeResources(next, m.hello.GetResources())
	if r := g.commit("", next); r != nil {
		if g.rec.GetSessionEpoch() > m.epoch {
			// The commit reloaded the record: another activation recorded
			// a newer session meanwhile.
			g.onSuperseded(ctx, "another activation recorded a newer worker session")
			return
		}
		level := slog.LevelError
		if r.GetCode() == errorpb.Code_ABORTED {
			level = slog.LevelWarn // another activation wrote first (a failover): the re-dial heals it
		}
		g.log.Log(context.Background(), level, "could not record the worker session; dropping it", "error", r.GetMessage())
		g.closeSession(ctx)
		g.sessionLost(ctx, managerpb.NodeStopping_STARTUP_TIME_EXCEEDED)
		return
	}
	var sig string
	if w := m.hello.GetToken().GetSignature(); w != nil && g.rec.GetCredential() != "" {
		sig = workerauth.ManagerProof(g.rec.GetCredential(), g.id, w.GetValue())
	}
	ctx.Send(g.session, &acceptHello{signature: sig})
	g.connected, g.healthy = true, false
	g.helloRunning = m.hello.GetRunningJobs()
	g.cfg.Liveness.Set(g.id, actors.NodeLiveness{Connected: true, LastSeen: g.cfg.Clock(),
		CPUBusy: m.hello.GetMeasuredLoad().GetVCpus(), MemoryUsedMiB: m.hello.GetMeasuredLoad().GetMemory(),
		RuntimeConditions: m.hello.GetRuntimeConditions()})
	g.log.Info("worker session up", "epoch", m.epoch, "running_jobs", len(g.helloRunning))
}

// onHealthy runs at the first health ping of a verified session: only a
// worker that pings counts as back (one that answers hello and then stays
// silent keeps being lost). The node is STARTED from here, the health h is
// acknowledged (the fence's lease), and the jobs of the hello are
// reconciled.
func (g *grain) onHealthy(ctx actor.Context, h *workerpb.Health) {
	g.healthy = true
	next := g.next()
	var events []*managerpb.EventStreamEvent
	if next.GetState() != managerpb.NodeLifecycle_NODE_LIFECYCLE_STARTED {
		next.State = managerpb.NodeLifecycle_NODE_LIFECYCLE_STARTED
		next.StopReason = nil
		events = append(events, evStarted(next))
	}
	instances := make([]*managerpb.RunningJob, 0, len(g.helloRunning))
	for _, rj := range g.helloRunning {
		instances = append(instances, &managerpb.RunningJob{
			JobKey: &commonpb.ActiveJobKey{JobId: rj.GetJob().GetJobId(), Role: rj.GetJob().GetRole(), InstanceId: rj.GetJob().GetInstanceId()},
			NodeId: g.nodeID(),
		})
	}
	events = append(events, g.evConnected(next, instances))
	if r := g.commit("", next, events...); r != nil {
		// Not healthy yet: the next health ping (every 2 s) tries again.
		// Left healthy, the node stayed unrecorded as STARTED for as long
		// as the session lasted — placement saw it offline (a leader
		// SIGKILLed during this commit; TestHA_ProvisionSurvivesLeaderKills).
		g.healthy = false
		g.log.Error("could not record the node as started; retrying at the next health ping", "error", r.GetMessage())
		return
	}
	g.backoff = 0
	g.lostSince = time.Time{}
	if g.cancelLost != nil {
		g.cancelLost()
		g.cancelLost = nil
	}
	// Before any command: a fenced job provisioned below must find the
	// worker's lease renewed.
	g.ackHealth(h)
	// Adopt what the worker runs (after a manager restart, or after the
	// node was declared stopped while the worker kept its jobs).
	g.reconcile(g.helloRunning)
	g.forgetMissingOrphans(g.helloRunning)
	g.scheduleOrphans(ctx)
	g.flushProvisions()
	g.startStopResend(ctx)
}

// reconcile tells job grains what the worker runs (adoption) and which of
// the instances recorded on this node it no longer runs.
func (g *grain) reconcile(running []*workerpb.WorkerRunningJob) {
	reported := map[[2]string]bool{}
	for _, rj := range running {
		job, role := rj.GetJob().GetJobId().GetJobId(), rj.GetJob().GetRole()
		reported[[2]string{job, role}] = true
		g.report(job, &internalpb.InstanceReport{Kind: internalpb.InstanceReport_STARTED, Role: role, ServicePortMappings: rj.GetServicePortMappings(),
			InstanceId: rj.GetJob().GetInstanceId()})
	}
	for _, ref := range g.instancesOnNode() {
		if !reported[[2]string{ref.JobID, ref.Role}] {
			g.report(ref.JobID, &internalpb.InstanceReport{Kind: internalpb.InstanceReport_MISSING, Role: ref.Role,
				Reason: "not running on the worker when its session started"})
		}
	}
}

// report sends an instance report about job to its grain.
func (g *grain) report(job string, r *internalpb.InstanceReport) {
	if job == "" || r.GetRole() == "" {
		g.log.Warn("worker reported an instance without job id or role; ignoring")
		return
	}
	r.NodeId = g.id
	r.SessionEpoch = g.sessionEpoch
	r.NodeMetadata, r.RunningNodeMetadata = g.rec.GetMetadata(), g.rec.GetRunningMetadata()
	g.cfg.Router.Send(actors.KindJob, job, &internalpb.JobCommand{JobId: job, Cmd: &internalpb.JobCommand_InstanceReport{InstanceReport: r}})
}

func (g *grain) onWorkerMessage(ctx actor.Context, m *workerMessage) {
	if !g.connected || m.epoch != g.sessionEpoch {
		return
	}
	now := g.cfg.Clock()
	g.cfg.Liveness.Update(g.id, func(l *actors.NodeLiveness) {
		l.LastSeen = now
		if h := m.msg.GetHealth(); h != nil {
			l.CPUBusy, l.MemoryUsedMiB = h.GetMeasuredLoad().GetVCpus(), h.GetMeasuredLoad().GetMemory()
			l.RuntimeConditions = h.GetRuntimeConditions()
		}
	})
	switch x := m.msg.GetMessage().(type) {
	case *workerpb.WorkerMessage_Health:
		if !g.healthy {
			g.onHealthy(ctx, x.Health)
		} else {
			g.ackHealth(x.Health)
		}
	case *workerpb.WorkerMessage_JobStarted:
		g.report(x.JobStarted.GetJobKey().GetJobId().GetJobId(), &internalpb.InstanceReport{Kind: internalpb.InstanceReport_STARTED,
			Role: x.JobStarted.GetJobKey().GetRole(), ServicePortMappings: x.JobStarted.GetServicePortMappings(),
			InstanceId: x.JobStarted.GetInstanceId()})
	case *workerpb.WorkerMessage_JobStopped:
		g.report(x.JobStopped.GetJobId().GetJobId(), &internalpb.InstanceReport{Kind: internalpb.InstanceReport_STOPPED, Role: x.JobStopped.GetRole(),
			InstanceId: x.JobStopped.GetInstanceId(), Fenced: x.JobStopped.GetFenced()})
		g.orphanEnded(x.JobStopped.GetJobId().GetJobId(), x.JobStopped.GetRole(), "stopped")
	case *workerpb.WorkerMessage_JobFailed:
		g.report(x.JobFailed.GetJobKey().GetJobId().GetJobId(), &internalpb.InstanceReport{Kind: internalpb.InstanceReport_FAILED,
			Role: x.JobFailed.GetJobKey().GetRole(), Reason: x.JobFailed.GetReason(), InstanceId: x.JobFailed.GetInstanceId()})
		g.orphanEnded(x.JobFailed.GetJobKey().GetJobId().GetJobId(), x.JobFailed.GetJobKey().GetRole(), "failed: "+x.JobFailed.GetReason())
	case *workerpb.WorkerMessage_JobInfo:
		ev := &managerpb.EventStreamEvent{Event: &managerpb.EventStreamEvent_JobInfo{JobInfo: x.JobInfo}}
		if r := g.commit("", g.next(), ev); r != nil {
			g.log.Warn("could not record job_info", "error", r.GetMessage())
		}
	}
}

func (g *grain) onSessionDown(ctx actor.Context, m *sessionDown) {
	if g.session == nil || m.epoch != g.sessionEpoch {
		return
	}
	wasConnected := g.connected
	g.closeSession(ctx)
	if status.Code(m.err) == codes.Aborted {
		// The worker took a newer session, which only another activation
		// of this grain can have opened (one on the manager that owns it
		// now, or a stray one left by a topology change): leave the
		// session to it rather than dial again and take it back, which
		// would make the two supersede each other forever, and passivate.
		// The next command activates the grain afresh on its owner. If no
		// activation of this cluster recorded a newer session, a manager
		// outside it holds the worker: contested.
		g.onSessionTaken(ctx, m.epoch)
		return
	}
	if have, ok := workerauth.StaleEpochOf(m.err); ok {
		// The worker verified a newer epoch than this grain knows (a store
		// restored from an old backup, or epochs spent on dials the record
		// never saw): dial again above it now.
		g.log.Info("worker refused a stale session epoch; dialling again above its epoch", "epoch", m.epoch, "worker_epoch", have)
		g.sessionEpoch = max(g.sessionEpoch, have)
		g.backoff = 0 // the next dial within RedialMin
		g.sessionLost(ctx, m.reason)
		return
	}
	if wasConnected {
		level := slog.LevelWarn
		if status.Code(m.err) == codes.Unavailable {
			level = slog.LevelInfo // the worker or its host went away in an orderly way
		}
		g.log.Log(context.Background(), level, "worker session lost", "error", m.err, "epoch", m.epoch)
	} else {
		g.log.Debug("worker dial failed", "error", m.err, "epoch", m.epoch)
	}
	g.sessionLost(ctx, m.reason)
}

// sessionLost schedules a re-dial and, if the node was not already lost,
// the timer that declares it stopped.
func (g *grain) sessionLost(ctx actor.Context, reason managerpb.NodeStopping_Reason) {
	g.failProvisions(ctx, g.notOnline())
	if g.rec.GetState() == managerpb.NodeLifecycle_NODE_LIFECYCLE_STARTING {
		reason = managerpb.NodeStopping_STARTUP_TIME_EXCEEDED
	}
	if g.lostSince.IsZero() {
		// The first failure says why the node went away; the re-dials that
		// fail after it (nothing listens any more) must not overwrite it.
		g.lastFailure = reason
	}
	g.scheduleRedial(ctx)
	if g.lostSince.IsZero() && g.rec.GetState() != managerpb.NodeLifecycle_NODE_LIFECYCLE_STOPPED {
		g.lostSince = g.cfg.Clock()
		g.cancelLost = g.timer.SendOnce(g.cfg.LostTimeout, ctx.Self(), &lostTimeout{since: g.lostSince})
	}
}

func (g *grain) scheduleRedial(ctx actor.Context) {
	if !g.wantsSession() || g.cancelRedial != nil {
		return
	}
	g.backoff = min(max(2*g.backoff, g.cfg.RedialMin), g.cfg.RedialMax)
	d := g.backoff/2 + rand.N(g.backoff/2+1) // jitter: [b/2, b]
	g.cancelRedial = g.timer.SendOnce(d, ctx.Self(), &redial{})
}

// redialNow replaces any session with a fresh dial (a worker registered
// again: it restarted, or moved).
func (g *grain) redialNow(ctx actor.Context) {
	g.closeSession(ctx)
	if g.cancelRedial != nil {
		g.cancelRedial()
		g.cancelRedial = nil
	}
	g.backoff = 0
	g.ensureSession(ctx)
}

// onLost declares a node that stayed without a session stopped.
func (g *grain) onLost(ctx actor.Context, m *lostTimeout) {
	g.cancelLost = nil
	if g.healthy || g.rec == nil || !m.since.Equal(g.lostSince) {
		return
	}
	reason := g.lastFailure
	if g.rec.GetCloud() != nil {
		// A cloud node whose worker went silent is replaced, not waited
		// for: stop it with the session's reason and terminate its
		// instance.
		g.cloudFailed(ctx, reason, fmt.Errorf("no worker session since %s", g.lostSince.Format(time.RFC3339)))
		return
	}
	next := g.next()
	next.State = managerpb.NodeLifecycle_NODE_LIFECYCLE_STOPPED
	next.StopReason = &reason
	if r := g.commit("", next, g.evStopping(reason), g.evStopped()); r != nil {
		g.log.Error("could not record the node as stopped", "error", r.GetMessage())
		g.cancelLost = g.timer.SendOnce(g.cfg.RedialMax, ctx.Self(), m)
		return
	}
	g.log.Warn("node declared stopped: no worker session", "reason", reason.String(), "since", g.lostSince)
	g.tellJobsNodeGone(managerpb.JobHistoryJobStopping_JOB_STOPPED_NODE_STOPPED)
}

func (g *grain) wake(ctx actor.Context) {
	g.ensureSession(ctx)
}
