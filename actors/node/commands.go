package node

import (
	"net"
	"strconv"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/norsk-oss/norsk-manager/actors"
	"github.com/norsk-oss/norsk-manager/proto/commonpb"
	"github.com/norsk-oss/norsk-manager/proto/errorpb"
	"github.com/norsk-oss/norsk-manager/proto/internalpb"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
	"github.com/norsk-oss/norsk-manager/proto/workerauth"
	"github.com/norsk-oss/norsk-manager/proto/workerpb"
)

// registerSlot creates a cluster slot with a fresh registration token.
func (g *grain) registerSlot(reqID string, c *internalpb.RegisterSlot) *internalpb.Reply {
	if g.rec != nil {
		return actors.Fail(errorpb.Code_ALREADY_EXISTS, "node %q already exists", g.id)
	}
	token := c.GetToken()
	if token == "" {
		token = workerauth.NewSecret()
	}
	now := g.now()
	next := &internalpb.NodeRecord{
		NodeId:       g.id,
		Provider:     managerpb.NodeProvider_NODE_PROVIDER_CLUSTER,
		State:        managerpb.NodeLifecycle_NODE_LIFECYCLE_REGISTERED,
		SlotName:     c.GetName(),
		Token:        token,
		RegisteredAt: now,
		Metadata:     &commonpb.NodeMetadata{NodeId: g.nodeID(), Tags: c.GetTags(), CreatedAt: now},
	}
	if r := g.commit(reqID, next); r != nil {
		return r
	}
	g.log.Info("cluster slot registered", "name", c.GetName())
	return g.registerReply()
}

func (g *grain) registerReply() *internalpb.Reply {
	return &internalpb.Reply{Payload: &internalpb.Reply_RegisterClusterNode{RegisterClusterNode: &managerpb.RegisterClusterNodeResponse{
		NodeId: g.nodeID(), Token: g.rec.GetToken()}}}
}

func (g *grain) memberReply() *internalpb.Reply {
	return &internalpb.Reply{Payload: &internalpb.Reply_ClusterMemberRegister{ClusterMemberRegister: &managerpb.ClusterMemberRegisterResponse{
		NodeId: g.nodeID(), NodeCredential: g.rec.GetCredential(), NodeName: g.rec.GetSlotName()}}}
}

// memberRegister binds the slot to a worker (first registration) or
// re-registers the bound worker, then dials it back.
func (g *grain) memberRegister(ctx actor.Context, reqID string, c *internalpb.MemberRegister) *internalpb.Reply {
	if g.rec == nil || (g.rec.GetProvider() != managerpb.NodeProvider_NODE_PROVIDER_CLUSTER && g.rec.GetCloud() == nil) {
		return actors.FailWithReason(errorpb.Code_UNAUTHENTICATED, workerauth.ReasonTokenUnknown, "unknown registration token or node credential")
	}
	if g.rec.GetCloud() != nil && (g.cloudClosed() || c.GetCredential() == "" && g.tokenExpired()) {
		// Neither the token nor the node credential brings a stopped cloud
		// node back: its instance is (being) terminated.
		return actors.FailWithReason(errorpb.Code_UNAUTHENTICATED, workerauth.ReasonTokenUnknown,
			"the registration token of node %s has expired or its node was stopped", g.id)
	}
	if c.GetToken() != "" && !workerauth.Equal(c.GetToken(), g.rec.GetToken()) {
		return actors.FailWithReason(errorpb.Code_UNAUTHENTICATED, workerauth.ReasonTokenUnknown, "unknown registration token")
	}
	bound := g.rec.GetTokenUsed()
	credOK := c.GetCredential() != "" && workerauth.Equal(c.GetCredential(), g.rec.GetCredential())
	if r := g.checkTerminated(); r != nil {
		return r
	}
	if r := g.checkIdentityInUse(c, bound && credOK); r != nil {
		return r
	}
	switch {
	case bound && !credOK && c.GetCredential() != "":
		return actors.FailWithReason(errorpb.Code_PERMISSION_DENIED, workerauth.ReasonSlotBound,
			"cluster slot %q (node %s): the node credential presented does not match; the slot is bound to another worker", g.rec.GetSlotName(), g.id)
	case bound && !credOK:
		return actors.FailWithReason(errorpb.Code_PERMISSION_DENIED, workerauth.ReasonSlotBound,
			"cluster slot %q (node %s) is already bound to a worker; its token cannot be used by a second worker", g.rec.GetSlotName(), g.id)
	case !bound && c.GetCredential() != "":
		return actors.FailWithReason(errorpb.Code_UNAUTHENTICATED, workerauth.ReasonCredentialUnknown,
			"cluster slot %q (node %s) has no bound worker: register with the token only", g.rec.GetSlotName(), g.id)
	}
	if r := g.checkCertPin(c, bound); r != nil {
		return r
	}
	next := g.next()
	if !bound {
		next.TokenUsed = true
		next.Credential = workerauth.NewSecret()
		next.WorkerCertSha256 = c.GetWorkerCertSha256() // pinned (certpin.go)
	}
	next.Address, next.Port = c.GetAddress(), c.GetPort()
	next.Hardware, next.WorkerVersion = c.GetHardware(), c.GetWorkerVersion()
	if c.GetResources() != nil {
		// Validated by the gateway; an older worker sends none and keeps
		// what is stored.
		next.Resources = c.GetResources()
	}
	if next.GetCloud() == nil {
		// A cloud node keeps what its provider reported (instance id, IPs
		// and DNS names); a slot's worker is described by its registration.
		next.RunningMetadata = &commonpb.RunningNodeMetadata{PrivateIpAddress: c.GetAddress(), PrivateDnsName: c.GetHardware().GetHostname()}
	}
	var events []*managerpb.EventStreamEvent
	if next.GetState() != managerpb.NodeLifecycle_NODE_LIFECYCLE_STARTED {
		if next.GetState() != managerpb.NodeLifecycle_NODE_LIFECYCLE_STARTING {
			events = append(events, evStarting(next)) // a cloud node's was sent at its create
		}
		next.State = managerpb.NodeLifecycle_NODE_LIFECYCLE_STARTING
		next.StopReason = nil
	}
	if r := g.commit(reqID, next, events...); r != nil {
		return r
	}
	g.log.Info("worker registered on cluster slot", "name", g.rec.GetSlotName(), "address", c.GetAddress(), "port", c.GetPort(), "first", !bound)
	g.redialNow(ctx)
	return g.memberReply()
}

// deregister removes a cluster slot: its worker's jobs are stopped, its
// stream closed, and its token and credential revoked.
func (g *grain) deregister(ctx actor.Context, reqID string) *internalpb.Reply {
	if g.rec == nil {
		return g.notFound()
	}
	if g.rec.GetProvider() != managerpb.NodeProvider_NODE_PROVIDER_CLUSTER {
		return actors.Fail(errorpb.Code_FAILED_PRECONDITION, "node %q is not a cluster slot (provider %s): use TerminateNode",
			g.id, g.rec.GetProvider().String())
	}
	var events []*managerpb.EventStreamEvent
	if s := g.rec.GetState(); s == managerpb.NodeLifecycle_NODE_LIFECYCLE_STARTING || s == managerpb.NodeLifecycle_NODE_LIFECYCLE_STARTED {
		events = append(events, g.evStopping(managerpb.NodeStopping_USER_REQUESTED), g.evStopped())
	}
	name := g.rec.GetSlotName()
	if r := g.commit(reqID, nil, events...); r != nil {
		return r
	}
	g.rec = nil
	g.stopAllOnWorker()
	g.closeSessionGracefully(ctx)
	g.stopTimers()
	g.tellJobsNodeGone(managerpb.JobHistoryJobStopping_JOB_STOPPED_NODE_TERMINATED)
	g.cfg.Liveness.Delete(g.id)
	g.log.Info("cluster slot deregistered", "name", name)
	// Not passivated here: the closing session child must get to deliver
	// the stop_job messages; the idle timeout passivates the grain later.
	return actors.OK()
}

// terminate stops a node on purpose: jobs stopped, session closed, no
// re-dial until its worker registers again.
// extra, when set, is an event committed with the stop (node_released).
func (g *grain) terminate(ctx actor.Context, reqID string, extra *managerpb.EventStreamEvent) *internalpb.Reply {
	if g.rec == nil {
		return g.notFound()
	}
	if g.rec.GetState() == managerpb.NodeLifecycle_NODE_LIFECYCLE_STOPPED && g.rec.GetStopReason() == managerpb.NodeStopping_USER_REQUESTED {
		return actors.OK()
	}
	if g.rec.GetCloud() != nil && g.rec.GetState() == managerpb.NodeLifecycle_NODE_LIFECYCLE_STOPPED {
		// A cloud node that already failed keeps its reason; make sure its
		// instance goes.
		g.terminateCloud(ctx)
		return actors.OK()
	}
	reason := managerpb.NodeStopping_USER_REQUESTED
	next := g.next()
	next.State = managerpb.NodeLifecycle_NODE_LIFECYCLE_STOPPED
	next.StopReason = &reason
	events := []*managerpb.EventStreamEvent{g.evStopping(reason), g.evStopped()}
	if extra != nil {
		events = append(events, extra)
	}
	if r := g.commit(reqID, next, events...); r != nil {
		return r
	}
	g.stopAllOnWorker()
	g.closeSessionGracefully(ctx)
	g.stopTimers()
	g.tellJobsNodeGone(managerpb.JobHistoryJobStopping_JOB_STOPPED_NODE_TERMINATED)
	g.terminateCloud(ctx)
	g.log.Info("node terminated")
	return actors.OK()
}

// stopAllOnWorker sends stop_job for every instance recorded on the node.
func (g *grain) stopAllOnWorker() {
	if !g.connected {
		return
	}
	for _, ref := range g.instancesOnNode() {
		g.sendToWorker(&workerpb.NodeControllerMessage{Message: &workerpb.NodeControllerMessage_StopJob{StopJob: &commonpb.ActiveJobKey{
			JobId: &commonpb.JobId{JobId: ref.JobID}, Role: ref.Role}}})
	}
}

// sendToWorker sends msg on the current session (dropped if none).
func (g *grain) sendToWorker(msg *workerpb.NodeControllerMessage) {
	if g.session != nil {
		g.system.Root.Send(g.session, &sendToWorker{msg: msg})
	}
}

// createMock records a node of the mock pool and dials its worker.
func (g *grain) createMock(ctx actor.Context, reqID string, c *internalpb.CreateMockNode) *internalpb.Reply {
	if g.rec != nil {
		return actors.Fail(errorpb.Code_ALREADY_EXISTS, "node %q already exists", g.id)
	}
	host, portStr, err := net.SplitHostPort(c.GetUrl())
	port, perr := strconv.ParseUint(portStr, 10, 16)
	if err != nil || perr != nil || host == "" || port == 0 {
		return actors.Fail(errorpb.Code_FAILED_PRECONDITION, "mock pool URL %q is not host:port", c.GetUrl())
	}
	now := g.now()
	next := &internalpb.NodeRecord{
		NodeId:   g.id,
		Provider: managerpb.NodeProvider_NODE_PROVIDER_MOCK,
		State:    managerpb.NodeLifecycle_NODE_LIFECYCLE_STARTING,
		Address:  host,
		Port:     uint32(port),
		MockUrl:  c.GetUrl(),
		Metadata: &commonpb.NodeMetadata{NodeId: g.nodeID(), Tags: c.GetTags(), CreatedAt: now,
			ProviderMetadata: &commonpb.ProviderMetadata{Metadata: &commonpb.ProviderMetadata_Test{Test: &commonpb.AwsMetadata{InstanceType: "mock", Region: "local"}}}},
		RunningMetadata: &commonpb.RunningNodeMetadata{PrivateIpAddress: host,
			ProviderMetadata: &commonpb.RunningNodeProviderMetadata{Instance: &commonpb.RunningNodeProviderMetadata_Test{Test: &commonpb.RunningAwsMetadata{InstanceId: c.GetUrl()}}}},
	}
	next.Provisioned = c.GetProvisioned()
	if r := g.commit(reqID, next, createEvents(next)...); r != nil {
		return r
	}
	g.log.Info("mock node created", "url", c.GetUrl())
	g.redialNow(ctx)
	return actors.OK()
}

// provision sends provision_job to the node's worker. It answers with the
// node record (the job grain records the node's metadata in its history).
// A node that should have a session but has none healthy yet (the grain
// was just activated, or is re-dialling) queues the provision until the
// session is healthy, its dial fails, or the caller's deadline nears: nil
// is returned then, and the answer comes later. A job whose product
// template the node does not offer is refused (templateRefusal).
func (g *grain) provision(ctx actor.Context, c *internalpb.Provision, deadline *timestamppb.Timestamp) *internalpb.Reply {
	if g.rec == nil {
		return g.notFound()
	}
	if !g.healthy || g.rec.GetState() != managerpb.NodeLifecycle_NODE_LIFECYCLE_STARTED {
		if g.stateAllowsProvision() && ctx.Sender() != nil {
			var dl time.Time
			if deadline != nil {
				dl = deadline.AsTime()
			}
			g.queueProvision(ctx, c, dl)
			return nil
		}
		return g.notOnline()
	}
	if r := g.templateRefusal(c.GetJob()); r != nil {
		return r
	}
	g.sendToWorker(g.provisionMessage(c.GetJob()))
	g.provisionSentAt = g.cfg.Clock()
	return &internalpb.Reply{Payload: &internalpb.Reply_Node{Node: g.rec}}
}

// stopInstance sends stop_job to the worker, naming the instance the job
// grain has recorded (the worker echoes it in job_stopped if it runs
// nothing for (job, role), so the answer cannot be taken for the end of a
// later instance). Without a session (the grain
// is contested, or between dials) it dials now: the new session's hello
// reconcile and the stop re-send then deliver it, since the record says
// STOPPING.
func (g *grain) stopInstance(ctx actor.Context, c *internalpb.StopInstance) *internalpb.Reply {
	if g.connected {
		g.sendToWorker(&workerpb.NodeControllerMessage{Message: &workerpb.NodeControllerMessage_StopJob{StopJob: &commonpb.ActiveJobKey{
			JobId: &commonpb.JobId{JobId: c.GetJobId()}, Role: c.GetRole(), InstanceId: c.GetInstanceId()}}})
		return actors.OK()
	}
	if g.session == nil && g.wantsSession() {
		if g.cancelRedial != nil {
			g.cancelRedial()
			g.cancelRedial = nil
		}
		g.ensureSession(ctx)
	}
	return actors.OK()
}

// deleteJobData sends delete_job (a job was deleted on the manager) to the
// worker if its session is up now; a node without a session ignores it,
// and its worker keeps what it holds for the job (best effort, not
// retried when the session comes back).
func (g *grain) deleteJobData(c *internalpb.DeleteJobData) *internalpb.Reply {
	if g.connected && c.GetJobId() != "" {
		g.sendToWorker(&workerpb.NodeControllerMessage{Message: &workerpb.NodeControllerMessage_DeleteJob{
			DeleteJob: &commonpb.JobId{JobId: c.GetJobId()}}})
		g.log.Debug("told the worker that a job was deleted", "job_id", c.GetJobId())
	}
	return actors.OK()
}

func (g *grain) updatePhysical(reqID string, c *internalpb.UpdatePhysicalNode) *internalpb.Reply {
	if g.rec == nil {
		return g.notFound()
	}
	next := g.next()
	next.DaemonVersion = c.GetDaemonVersion()
	if r := g.commit(reqID, next); r != nil {
		return r
	}
	return actors.OK()
}
