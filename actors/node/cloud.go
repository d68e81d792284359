package node

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/norsk-oss/norsk-manager/actors"
	"github.com/norsk-oss/norsk-manager/proto/commonpb"
	"github.com/norsk-oss/norsk-manager/proto/errorpb"
	"github.com/norsk-oss/norsk-manager/proto/internalpb"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
	"github.com/norsk-oss/norsk-manager/proto/workerauth"
	"github.com/norsk-oss/norsk-manager/providers"
)

// Cloud nodes (AWS, OCI): the grain records the node and a single-use
// registration token, launches the instance off its mailbox (a goroutine
// per cloud call, whose result comes back as a message), polls it until it
// runs, and waits for its worker to register with the token from the user
// data; from there the node is a worker like a cluster slot's (dial-back,
// sessions, health). docs/design/providers.md.

// Messages from the cloud goroutines to the grain.
type (
	cloudLaunched struct {
		gen  uint64
		inst providers.Instance
		err  error
	}
	cloudDescribed struct {
		gen  uint64
		inst providers.Instance
		err  error
	}
	cloudTerminated struct {
		gen uint64
		// id is the instance terminated; "" when none was found (a node
		// whose launch created nothing).
		id  string
		err error
	}
	cloudTimer struct {
		gen  uint64
		kind managerpb.NodeStopping_Reason // PENDING_TIME_EXCEEDED or STARTUP_TIME_EXCEEDED
	}
	cloudPoll struct{ gen uint64 }
)

func (g *grain) provider() providers.Provider {
	return g.cfg.Providers[g.rec.GetProvider()]
}

// createCloud records an AWS or OCI node and starts launching its
// instance. The reply does not wait for the cloud: the node's lifecycle
// (node_starting, node_started or node_stopping CREATE_FAILED) follows on
// the event stream.
func (g *grain) createCloud(ctx actor.Context, reqID string, c *internalpb.CreateCloudNode) *internalpb.Reply {
	if g.rec != nil {
		return actors.Fail(errorpb.Code_ALREADY_EXISTS, "node %q already exists", g.id)
	}
	kind, name := managerpb.NodeProvider_NODE_PROVIDER_AWS, "AWS"
	cloud := &internalpb.CloudNode{}
	meta := &commonpb.ProviderMetadata{}
	var tags map[string]string
	switch r := c.GetRequest().(type) {
	case *internalpb.CreateCloudNode_Aws:
		cloud.Request = &internalpb.CloudNode_Aws{Aws: r.Aws}
		cloud.Location = r.Aws.GetRegion()
		tags = r.Aws.GetTags()
		meta.Metadata = &commonpb.ProviderMetadata_Aws{Aws: &commonpb.AwsMetadata{InstanceType: r.Aws.GetInstanceType(), Region: r.Aws.GetRegion()}}
	case *internalpb.CreateCloudNode_Oci:
		kind, name = managerpb.NodeProvider_NODE_PROVIDER_OCI, "OCI"
		cloud.Request = &internalpb.CloudNode_Oci{Oci: r.Oci}
		cloud.Location = r.Oci.GetAvailabilityDomain()
		tags = r.Oci.GetTags()
		meta.Metadata = &commonpb.ProviderMetadata_Oci{Oci: &commonpb.OciMetadata{}}
	default:
		return actors.Fail(errorpb.Code_INVALID_ARGUMENT, "node %s: create without a request", g.id)
	}
	if g.cfg.Providers[kind] == nil {
		return actors.Fail(errorpb.Code_FAILED_PRECONDITION, "the %s provider is not configured on this manager (see norsk-manager --help)", name)
	}
	now := g.cfg.Clock()
	cloud.CreatedAt = timestamppb.New(now)
	cloud.TokenExpiresAt = timestamppb.New(now.Add(g.cfg.PendingTimeout + g.cfg.StartupTimeout))
	next := &internalpb.NodeRecord{
		NodeId:   g.id,
		Provider: kind,
		State:    managerpb.NodeLifecycle_NODE_LIFECYCLE_STARTING,
		Token:    workerauth.NewSecret(),
		Metadata: &commonpb.NodeMetadata{NodeId: g.nodeID(), Tags: tags, CreatedAt: timestamppb.New(now), ProviderMetadata: meta},
		Cloud:    cloud,
	}
	next.Provisioned = c.GetProvisioned()
	if r := g.commit(reqID, next, createEvents(next)...); r != nil {
		return r
	}
	g.log.Info("cloud node created; launching its instance", "provider", name, "location", cloud.GetLocation())
	g.cloudWork(ctx)
	return actors.OK()
}

// cloudWork starts what the node's cloud phase needs (after a create, a
// result, or a grain activation after a manager restart) and arms its
// timers. Idempotent: a newer call makes older results stale.
func (g *grain) cloudWork(ctx actor.Context) {
	cl := g.rec.GetCloud()
	if cl == nil || g.provider() == nil {
		return
	}
	g.cloudGen++
	gen := g.cloudGen
	self := ctx.Self()
	prov := g.provider()
	switch cl.GetPhase() {
	case internalpb.CloudNode_LAUNCHING:
		spec := providers.LaunchSpec{NodeID: g.id, Token: fmt.Sprintf("%s-%d", g.id, cl.GetCreatedAt().AsTime().UnixNano()), Tags: g.rec.GetMetadata().GetTags(), UserData: g.userData(),
			AWS: cl.GetAws(), OCI: cl.GetOci()}
		g.goCloud(func(cctx context.Context) {
			// A manager killed mid-create launched it maybe: look first.
			inst, ok, err := prov.Find(cctx, cl.GetLocation(), g.id)
			if err == nil && !ok {
				inst, err = prov.Launch(cctx, spec)
			}
			g.system.Root.Send(self, &cloudLaunched{gen: gen, inst: inst, err: err})
		})
		g.armCloudTimer(ctx, gen, managerpb.NodeStopping_PENDING_TIME_EXCEEDED, cl.GetCreatedAt().AsTime().Add(g.cfg.PendingTimeout))
	case internalpb.CloudNode_PENDING:
		g.pollCloud(gen, self, 0)
		g.armCloudTimer(ctx, gen, managerpb.NodeStopping_PENDING_TIME_EXCEEDED, cl.GetCreatedAt().AsTime().Add(g.cfg.PendingTimeout))
	case internalpb.CloudNode_RUNNING:
		if g.rec.GetState() != managerpb.NodeLifecycle_NODE_LIFECYCLE_STARTED {
			g.armCloudTimer(ctx, gen, managerpb.NodeStopping_STARTUP_TIME_EXCEEDED, cl.GetRunningAt().AsTime().Add(g.cfg.StartupTimeout))
		}
	case internalpb.CloudNode_TERMINATING:
		id, loc := cl.GetInstanceId(), cl.GetLocation()
		g.goCloud(func(cctx context.Context) {
			var err error
			if id == "" {
				// Never answered: find what a lost launch created.
				var inst providers.Instance
				var ok bool
				if inst, ok, err = prov.Find(cctx, loc, g.id); err == nil && ok {
					id = inst.ID
				}
			}
			if err == nil && id != "" {
				err = prov.Terminate(cctx, loc, id)
			}
			g.system.Root.Send(self, &cloudTerminated{gen: gen, id: id, err: err})
		})
	}
}

// goCloud runs f off the mailbox with a context cancelled when the grain
// stops.
func (g *grain) goCloud(f func(context.Context)) {
	if g.cloudCancel == nil {
		g.cloudCtx, g.cloudCancel = context.WithCancel(context.Background())
	}
	cctx := g.cloudCtx
	go f(cctx)
}

func (g *grain) pollCloud(gen uint64, self *actor.PID, after time.Duration) {
	cl := g.rec.GetCloud()
	prov, loc, id := g.provider(), cl.GetLocation(), cl.GetInstanceId()
	g.goCloud(func(cctx context.Context) {
		if after > 0 {
			select {
			case <-time.After(after):
			case <-cctx.Done():
				return
			}
		}
		inst, err := prov.Describe(cctx, loc, id)
		g.system.Root.Send(self, &cloudDescribed{gen: gen, inst: inst, err: err})
	})
}

func (g *grain) armCloudTimer(ctx actor.Context, gen uint64, kind managerpb.NodeStopping_Reason, at time.Time) {
	d := max(at.Sub(g.cfg.Clock()), 0)
	g.timer.SendOnce(d, ctx.Self(), &cloudTimer{gen: gen, kind: kind})
}

// userData is the instance's boot script: it starts the worker with the
// node's registration token and the managers' addresses.
func (g *grain) userData() string {
	if g.cfg.UserData != nil {
		return g.cfg.UserData(g.id, g.rec.GetToken(), g.cfg.ManagerURLs)
	}
	if g.cfg.ManagerCA != nil {
		if ca := g.cfg.ManagerCA(); len(ca) > 0 {
			return TLSUserData(g.id, g.rec.GetToken(), g.cfg.ManagerURLs, ca, g.cfg.ManagerName)
		}
	}
	return DefaultUserData(g.id, g.rec.GetToken(), g.cfg.ManagerURLs)
}

// DefaultUserData is the boot script of a cloud node's instance (a shell
// script for cloud-init): it runs `norsk-ctl --mode=worker` (installed by
// the launch template's or image's own setup) with the node's single-use
// registration token and the managers' API addresses, listening on port
// 7001 of every interface and advertising the instance's first address.
func DefaultUserData(nodeID, token string, managerURLs []string) string {
	return fmt.Sprintf(`#!/bin/sh
# Norsk worker bootstrap for node %s (written by the manager).
set -e
ADDR=$(hostname -I 2>/dev/null | cut -d' ' -f1)
exec norsk-ctl --mode=worker --token=%s --manager-url=%s \
  --listen=0.0.0.0:7001 --advertise="${ADDR:-$(hostname)}" --state-dir=/var/lib/norsk-worker
`, nodeID, token, strings.Join(managerURLs, ","))
}

// TokenFromUserData returns the registration token in a user data script
// written by DefaultUserData ("" if none): tests start the worker with it.
func TokenFromUserData(userData string) string {
	_, rest, ok := strings.Cut(userData, "--token=")
	if !ok {
		return ""
	}
	token, _, _ := strings.Cut(rest, " ")
	return token
}

func (g *grain) onCloudLaunched(ctx actor.Context, m *cloudLaunched) {
	if g.rec == nil {
		return
	}
	if ph := g.rec.GetCloud().GetPhase(); m.err == nil && m.inst.ID != "" && m.inst.ID != g.rec.GetCloud().GetInstanceId() &&
		(ph == internalpb.CloudNode_TERMINATING || ph == internalpb.CloudNode_TERMINATED) {
		// A launch still being retried when the node was stopped has
		// succeeded after all: terminate what it created.
		g.log.Warn("a launch finished after the node was stopped; terminating its instance", "instance_id", m.inst.ID)
		next := g.next()
		next.Cloud.InstanceId = m.inst.ID
		next.Cloud.Phase = internalpb.CloudNode_TERMINATING
		if r := g.commit("", next); r != nil {
			g.log.Error("could not record the late instance; it is left running", "instance_id", m.inst.ID, "error", r.GetMessage())
			return
		}
		g.cloudWork(ctx)
		return
	}
	if m.gen != g.cloudGen || g.rec.GetCloud().GetPhase() != internalpb.CloudNode_LAUNCHING {
		return
	}
	if m.err != nil {
		if errors.Is(m.err, context.Canceled) {
			return
		}
		g.cloudFailed(ctx, managerpb.NodeStopping_CREATE_FAILED, m.err)
		return
	}
	next := g.next()
	next.Cloud.InstanceId = m.inst.ID
	next.Cloud.Phase = internalpb.CloudNode_PENDING
	if r := g.commit("", next); r != nil {
		g.log.Error("could not record the launched instance; retrying", "instance_id", m.inst.ID, "error", r.GetMessage())
		g.cloudWork(ctx) // Find finds it
		return
	}
	g.log.Info("instance launched", "instance_id", m.inst.ID, "location", m.inst.Location)
	g.onCloudDescribed(ctx, &cloudDescribed{gen: g.cloudGen, inst: m.inst})
}

func (g *grain) onCloudDescribed(ctx actor.Context, m *cloudDescribed) {
	cl := g.rec.GetCloud()
	if m.gen != g.cloudGen || cl.GetPhase() != internalpb.CloudNode_PENDING {
		return
	}
	switch {
	case errors.Is(m.err, context.Canceled):
		return
	case errors.Is(m.err, providers.ErrNotFound):
		g.cloudFailed(ctx, managerpb.NodeStopping_PROVIDER_TERMINATE, m.err)
		return
	case m.err != nil:
		g.log.Warn("describing the instance failed; polling again", "error", m.err)
		g.pollCloud(g.cloudGen, ctx.Self(), g.cfg.CloudPollInterval)
		return
	case m.inst.State == providers.Gone:
		g.cloudFailed(ctx, managerpb.NodeStopping_PROVIDER_TERMINATE, fmt.Errorf("instance %s was terminated by the cloud or an operator", m.inst.ID))
		return
	case m.inst.State == providers.Pending:
		g.pollCloud(g.cloudGen, ctx.Self(), g.cfg.CloudPollInterval)
		return
	}
	next := g.next()
	next.Cloud.Phase = internalpb.CloudNode_RUNNING
	next.Cloud.RunningAt = g.now()
	next.RunningMetadata = m.inst.Running
	if r := g.commit("", next); r != nil {
		g.log.Error("could not record the running instance; polling again", "error", r.GetMessage())
		g.pollCloud(g.cloudGen, ctx.Self(), g.cfg.CloudPollInterval)
		return
	}
	g.log.Info("instance running; waiting for its worker to register", "instance_id", m.inst.ID,
		"private_ip", m.inst.Running.GetPrivateIpAddress())
	g.cloudWork(ctx) // arms the startup timer
}

func (g *grain) onCloudTimer(ctx actor.Context, m *cloudTimer) {
	cl := g.rec.GetCloud()
	if m.gen != g.cloudGen || cl == nil {
		return
	}
	switch {
	case m.kind == managerpb.NodeStopping_PENDING_TIME_EXCEEDED &&
		(cl.GetPhase() == internalpb.CloudNode_LAUNCHING || cl.GetPhase() == internalpb.CloudNode_PENDING):
		g.cloudFailed(ctx, m.kind, fmt.Errorf("the instance was not running within %s", g.cfg.PendingTimeout))
	case m.kind == managerpb.NodeStopping_STARTUP_TIME_EXCEEDED && cl.GetPhase() == internalpb.CloudNode_RUNNING &&
		g.rec.GetState() != managerpb.NodeLifecycle_NODE_LIFECYCLE_STARTED:
		g.cloudFailed(ctx, m.kind, fmt.Errorf("its worker did not register and answer within %s of the instance running", g.cfg.StartupTimeout))
	}
}

// cloudFailed stops the node with reason (node_stopping, node_stopped)
// and terminates its instance.
func (g *grain) cloudFailed(ctx actor.Context, reason managerpb.NodeStopping_Reason, cause error) {
	if id := g.rec.GetCloud().GetInstanceId(); id != "" {
		g.log.Warn("cloud node failed; terminating its instance", "reason", reason.String(), "instance_id", id, "error", cause)
	} else {
		// No launch was answered with an instance (refused, or never
		// sent): there is none to terminate, only the tag to look for,
		// in case a launch whose answer was lost created one.
		g.log.Warn("cloud node failed before an instance was launched; making sure none was", "reason", reason.String(), "error", cause)
	}
	next := g.next()
	var events []*managerpb.EventStreamEvent
	if next.GetState() != managerpb.NodeLifecycle_NODE_LIFECYCLE_STOPPED {
		events = append(events, g.evStopping(reason), g.evStopped())
	}
	next.State = managerpb.NodeLifecycle_NODE_LIFECYCLE_STOPPED
	next.StopReason = &reason
	next.Cloud.Phase = internalpb.CloudNode_TERMINATING
	next.Cloud.TerminateReason = &reason
	next.Cloud.LastError = cause.Error()
	if r := g.commit("", next, events...); r != nil {
		g.log.Error("could not record the node as failed", "error", r.GetMessage())
		return
	}
	g.closeSessionGracefully(ctx)
	g.stopTimers()
	g.tellJobsNodeGone(managerpb.JobHistoryJobStopping_JOB_STOPPED_NODE_TERMINATED)
	g.cloudWork(ctx)
}

// terminateCloud starts terminating the instance of a node that was just
// recorded as stopped (TerminateNode).
func (g *grain) terminateCloud(ctx actor.Context) {
	cl := g.rec.GetCloud()
	if cl == nil || cl.GetPhase() == internalpb.CloudNode_TERMINATED || cl.GetPhase() == internalpb.CloudNode_TERMINATING {
		return
	}
	next := g.next()
	reason := managerpb.NodeStopping_USER_REQUESTED
	next.Cloud.Phase = internalpb.CloudNode_TERMINATING
	next.Cloud.TerminateReason = &reason
	if r := g.commit("", next); r != nil {
		g.log.Error("could not record the termination; the instance is left running", "error", r.GetMessage())
		return
	}
	g.cloudWork(ctx)
}

func (g *grain) onCloudTerminated(ctx actor.Context, m *cloudTerminated) {
	if m.gen != g.cloudGen || g.rec.GetCloud().GetPhase() != internalpb.CloudNode_TERMINATING {
		return
	}
	if m.err != nil {
		if errors.Is(m.err, context.Canceled) {
			return
		}
		g.terminateFailures++
		d := g.cfg.CloudPollInterval << min(g.terminateFailures-1, 10)
		d = min(d, time.Minute)
		g.log.Warn("terminating the instance failed; retrying", "in", d, "attempts", g.terminateFailures, "error", m.err)
		gen := g.cloudGen
		g.timer.SendOnce(d, ctx.Self(), &cloudPoll{gen: gen})
		return
	}
	g.terminateFailures = 0
	next := g.next()
	next.Cloud.Phase = internalpb.CloudNode_TERMINATED
	if r := g.commit("", next); r != nil {
		g.log.Error("could not record the terminated instance", "error", r.GetMessage())
		return
	}
	if m.id == "" {
		g.log.Info("no instance was launched for the node; nothing to terminate")
		return
	}
	g.log.Info("instance terminated", "instance_id", m.id)
}

// cloudBusy reports whether cloud work is in flight (the grain must not
// passivate).
func (g *grain) cloudBusy() bool {
	switch g.rec.GetCloud().GetPhase() {
	case internalpb.CloudNode_LAUNCHING, internalpb.CloudNode_PENDING, internalpb.CloudNode_TERMINATING:
		return g.rec.GetCloud() != nil
	case internalpb.CloudNode_RUNNING:
		return g.rec.GetState() == managerpb.NodeLifecycle_NODE_LIFECYCLE_STARTING
	}
	return false
}

// cloudClosed reports whether a cloud node takes no worker any more: it
// was stopped, or its instance is being (or was) terminated.
func (g *grain) cloudClosed() bool {
	cl := g.rec.GetCloud()
	return cl != nil && (g.rec.GetState() == managerpb.NodeLifecycle_NODE_LIFECYCLE_STOPPED ||
		cl.GetPhase() == internalpb.CloudNode_TERMINATING || cl.GetPhase() == internalpb.CloudNode_TERMINATED)
}

// tokenExpired reports whether a cloud node's registration token can no
// longer be used (its instance's worker never registered in time).
func (g *grain) tokenExpired() bool {
	exp := g.rec.GetCloud().GetTokenExpiresAt()
	return exp != nil && !g.rec.GetTokenUsed() && g.cfg.Clock().After(exp.AsTime())
}
