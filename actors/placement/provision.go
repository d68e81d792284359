package placement

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/norsk-oss/norsk-manager/actors"
	"github.com/norsk-oss/norsk-manager/actors/node"
	"github.com/norsk-oss/norsk-manager/actors/placement/scheduler"
	"github.com/norsk-oss/norsk-manager/actors/provisioner"
	"github.com/norsk-oss/norsk-manager/persistence"
	"github.com/norsk-oss/norsk-manager/proto/commonpb"
	"github.com/norsk-oss/norsk-manager/proto/errorpb"
	"github.com/norsk-oss/norsk-manager/proto/internalpb"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
)

// Provisioning and release (issue 13 §1; placement.md, "Provisioning and
// release"): after the pass decided what fits, the roles no node fitted
// are given to provisioner.Plan, and the nodes it plans are created
// through the node grains' ordinary create commands; the engine-created
// nodes that run nothing are marked idle and, after their tier's linger,
// terminated. Every decision is read from the records (the node records
// carry the engine's mark, the idle instant and the capacity failures), so
// a new leader goes on where the old one stopped: the only memory is what
// is in flight.

// provState is the provisioning work in flight. Guarded by its mu.
type provState struct {
	mu sync.Mutex
	// creating holds the creates sent and not yet answered, as the
	// planner's Creating nodes (room already coming).
	creating map[string]provisioner.Node
	// nodeOps holds the nodes with a SetIdle or release in flight.
	nodeOps map[string]bool
	// retryAt paces a node id whose create was refused.
	retryAt map[string]time.Time
	// unserved is the last reason logged per waiting role.
	unserved map[string]string
	// refused holds, per node id, the error of its last refused create
	// (logged at warn once per change of it, said in the note of its
	// jobs); forgotten when a create of it is accepted.
	refused map[string]string
	// notes holds, per waiting role ("job/role"), what the last plan did
	// for it, added to its placement failure by the next pass (provNote).
	notes map[string]string
	// coming and planned are what the last plan counts on and saw, for
	// NodeComing (coming.go).
	coming  map[string]comingNode
	planned map[string]bool
	// groups holds the security groups found missing (provision_groups.go).
	groups groupState
}

// provisionRetry is how long a refused create (or idle/release write)
// waits before it is sent again.
const provisionRetry = 5 * time.Second

// waitFor notes a role the scheduler found no node for (from decide).
func (w *world) waitFor(c *candidate, a scheduler.Ask) {
	need := a.Requirements.Capacity
	gpu := a.Requirements.GPUCapacity
	var templates []provisioner.TemplateRef
	addTemplate := func(t scheduler.TemplateRef) {
		if ref := (provisioner.TemplateRef{Name: t.Name, Version: t.Version}); !t.IsZero() && !slices.Contains(templates, ref) {
			templates = append(templates, ref)
		}
	}
	addTemplate(a.Template)
	for _, m := range a.CoLocated {
		need += m.Requirements.Capacity
		gpu += m.Requirements.GPUCapacity
		addTemplate(m.Template)
	}
	w.waiting = append(w.waiting, provisioner.Waiting{Key: c.key.String(), Pool: c.pool, Capacity: need, GPU: gpu, SecurityGroups: a.SecurityGroups,
		Templates: templates})
}

// provisionPass creates the nodes planned for the roles waiting in w and
// releases the engine-created nodes that lingered idle. Sends are in the
// background, like StartJobs; a later pass decides again on the records.
func (e *Engine) provisionPass(ctx context.Context, w *world) {
	e.prov.mu.Lock()
	if e.prov.creating == nil {
		e.prov.creating, e.prov.nodeOps = map[string]provisioner.Node{}, map[string]bool{}
		e.prov.retryAt, e.prov.unserved, e.prov.refused = map[string]time.Time{}, map[string]string{}, map[string]string{}
	}
	var nodes []provisioner.Node
	var others []string
	for id, rec := range w.nodeRecs {
		if n, ok := provisioner.NodeOf(rec); ok {
			nodes = append(nodes, n)
		} else {
			others = append(others, id)
		}
		delete(e.prov.creating, id) // recorded: the record says the rest
	}
	for _, n := range e.prov.creating {
		nodes = append(nodes, n)
	}
	e.prov.mu.Unlock()
	slices.SortFunc(nodes, func(a, b provisioner.Node) int { return strings.Compare(a.ID, b.ID) })
	e.releasePass(ctx, w, nodes)
	if len(w.waiting) == 0 {
		e.keepNotes(provisioner.Decision{})
		e.keepComing(provisioner.Decision{}, nil, nil, w.now)
		return
	}
	health, err := readHealth(e.cfg.Store)
	if err != nil {
		e.log.Warn("read provider health for provisioning", "error", err)
	}
	slices.Sort(others)
	d := provisioner.Plan(provisioner.Input{Now: w.now, Pools: w.pools, Waiting: w.waiting, Nodes: nodes, Health: health, OtherIDs: others,
		MissingGroups: e.missingGroups(ctx, w.now)})
	e.logUnserved(d.Unserved)
	e.keepNotes(d)
	e.keepComing(d, nodes, w.waiting, w.now)
	for _, c := range d.Creates {
		e.create(ctx, w.now, c)
	}
}

// keepNotes keeps what plan d did for each waiting role, for its next
// placement failure: the node being created for it, or why none can be.
func (e *Engine) keepNotes(d provisioner.Decision) {
	notes := map[string]string{}
	for k, id := range d.Coming {
		notes[k] = "; node " + id + " is being created for it"
	}
	e.prov.mu.Lock()
	for _, c := range d.Creates {
		note := "; node " + c.NodeID + " is being created for it"
		if why, ok := e.prov.refused[c.NodeID]; ok {
			note = "; node " + c.NodeID + " cannot be created (" + why + "); tried again every " + provisionRetry.String()
		}
		for _, k := range c.ForJobs {
			notes[k] = note
		}
	}
	for k, why := range d.Unserved {
		notes[k] = "; " + why
	}
	e.prov.notes = notes
	e.prov.mu.Unlock()
}

// provNote is what the last plan did for k ("" if nothing), appended to
// the text of k's placement failure so that GetPlacement and
// placement_failed say a node is coming, or why none can.
func (e *Engine) provNote(k key) string {
	e.prov.mu.Lock()
	defer e.prov.mu.Unlock()
	return e.prov.notes[k.String()]
}

// create sends the create of c unless it is in flight or paced.
func (e *Engine) create(ctx context.Context, now time.Time, c provisioner.Create) {
	e.prov.mu.Lock()
	if _, busy := e.prov.creating[c.NodeID]; busy || now.Before(e.prov.retryAt[c.NodeID]) {
		e.prov.mu.Unlock()
		return
	}
	e.prov.creating[c.NodeID] = provisioner.Node{ID: c.NodeID, Pool: c.Pool, Tier: c.Tier.GetName(), Offering: c.Offering.Name(),
		State: provisioner.Creating, Capacity: c.Offering.Capacity, GPU: c.Offering.GPU, ForJobs: c.ForJobs, SecurityGroups: c.SecurityGroups, CreatedAt: now}
	e.prov.mu.Unlock()
	log := e.log.With("node_id", c.NodeID, "pool", c.Pool, "tier", c.Tier.GetName(), "offering", c.Offering.Name(), "for_jobs", strings.Join(c.ForJobs, ","))
	e.inBackground(func() {
		if e.groupsMissing(ctx, now, c, log) {
			e.prov.mu.Lock()
			delete(e.prov.creating, c.NodeID) // the next pass plans without the jobs that need the group
			e.prov.mu.Unlock()
			return
		}
		err := e.sendCreate(ctx, c)
		var re *actors.ReplyError
		switch {
		case err == nil:
			e.prov.mu.Lock()
			delete(e.prov.refused, c.NodeID)
			e.prov.mu.Unlock()
			e.cfg.Metrics.countProvisioned(c.Pool, c.Tier.GetName(), ProvisionCreated)
			log.Info("node created for waiting jobs")
		case errors.As(err, &re) && re.Code == errorpb.Code_ALREADY_EXISTS:
			log.Debug("node already created", "reply", err)
		case ctx.Err() != nil:
		default:
			e.cfg.Metrics.countProvisioned(c.Pool, c.Tier.GetName(), ProvisionFailed)
			e.prov.mu.Lock()
			delete(e.prov.creating, c.NodeID)
			e.prov.retryAt[c.NodeID] = e.cfg.Clock().Add(provisionRetry)
			same := e.prov.refused[c.NodeID] == err.Error()
			if len(e.prov.refused) >= maxPreemptLogged {
				e.prov.refused = map[string]string{} // bounded: forgetting only logs a line again
			}
			e.prov.refused[c.NodeID] = err.Error()
			e.prov.mu.Unlock()
			if same {
				log.Debug("create a node for waiting jobs: refused again", "error", err)
			} else {
				log.Warn("create a node for waiting jobs (retried every "+provisionRetry.String()+", logged again when the error changes)", "error", err)
			}
		}
	})
}

// sendCreate sends the node grain command that creates c, with the request
// id "provision/<node>": a retried pass or a second leader creates it once
// (the second create is ALREADY_EXISTS or a repeat).
func (e *Engine) sendCreate(ctx context.Context, c provisioner.Create) error {
	reqID := "provision/" + c.NodeID
	mark := &internalpb.Provisioned{Pool: c.Pool, Tier: c.Tier.GetName(), Offering: c.Offering.Name(), Capacity: uint32(c.Offering.Capacity),
		GpuCapacity: uint32(c.Offering.GPU), ForJobs: c.ForJobs, SecurityGroups: c.SecurityGroups}
	tags := provisioner.NodeTags(c.Pool, c.Tier)
	id := &commonpb.NodeId{NodeId: c.NodeID}
	cmd := &internalpb.NodeCommand{RequestId: reqID, NodeId: c.NodeID}
	switch p := c.Tier.GetProvisioner().(type) {
	case *managerpb.PoolTier_Aws:
		cmd.Cmd = &internalpb.NodeCommand_CreateCloud{CreateCloud: &internalpb.CreateCloudNode{Provisioned: mark, Request: &internalpb.CreateCloudNode_Aws{Aws: &managerpb.CreateAwsNodeRequest{
			NodeId: id, Tags: tags, Region: p.Aws.GetRegion(), InstanceType: c.Offering.InstanceType, Template: p.Aws.GetTemplate(),
			ExtraSecurityGroups: c.SecurityGroups, AvailabilityZone: c.Offering.Zone}}}}
	case *managerpb.PoolTier_Oci:
		cmd.Cmd = &internalpb.NodeCommand_CreateCloud{CreateCloud: &internalpb.CreateCloudNode{Provisioned: mark, Request: &internalpb.CreateCloudNode_Oci{Oci: &managerpb.CreateOciNodeRequest{
			NodeId: id, Tags: tags, AvailabilityDomain: c.Offering.Zone, Architecture: p.Oci.GetArchitecture(), Shape: c.Offering.InstanceType, Subnet: p.Oci.GetSubnet()}}}}
	case *managerpb.PoolTier_Mock:
		r, err := e.requestKind(ctx, actors.KindPool, "mock", &internalpb.PoolCommand{RequestId: reqID, Cmd: &internalpb.PoolCommand_Pop{Pop: &internalpb.PopMockUrl{}}})
		if err != nil {
			return fmt.Errorf("take a mock pool URL: %w", err)
		}
		cmd.Cmd = &internalpb.NodeCommand_CreateMock{CreateMock: &internalpb.CreateMockNode{Url: r.GetMockUrl(), Tags: tags, Provisioned: mark}}
	default:
		return fmt.Errorf("tier %s has no provisioner", c.Tier.GetName())
	}
	_, err := e.requestKind(ctx, actors.KindNode, c.NodeID, cmd)
	return err
}

// releasePass marks idle, clears and releases the engine-created nodes
// (provisioner.Release), one command per node in flight.
func (e *Engine) releasePass(ctx context.Context, w *world, nodes []provisioner.Node) {
	busy := w.busyByNode()
	for _, n := range nodes {
		rec := w.nodeRecs[n.ID]
		if rec == nil {
			continue
		}
		idle := provisioner.Idle{Started: n.State == provisioner.Running, Creating: n.State == provisioner.Creating, CreatedAt: n.CreatedAt,
			CreateTimeout: e.cfg.NodeCreateTimeout,
			Cordoned:      node.Cordoned(rec) || node.Draining(rec),
			Instances:     busy[n.ID], Linger: provisioner.LingerOf(w.pools, n.Pool, n.Tier)}
		if t := rec.GetIdleSince(); t != nil {
			idle.IdleSince = t.AsTime()
		}
		var cmd *internalpb.NodeCommand
		result := ""
		switch provisioner.Release(idle, w.now) {
		case provisioner.MarkIdle:
			cmd = &internalpb.NodeCommand{RequestId: fmt.Sprintf("provision/idle/%s/%d", n.ID, w.now.UnixNano()),
				Cmd: &internalpb.NodeCommand_SetIdle{SetIdle: &internalpb.SetIdle{Since: timestamppb.New(w.now)}}}
		case provisioner.ClearIdle:
			cmd = &internalpb.NodeCommand{RequestId: fmt.Sprintf("provision/busy/%s/%d", n.ID, idle.IdleSince.UnixNano()),
				Cmd: &internalpb.NodeCommand_SetIdle{SetIdle: &internalpb.SetIdle{}}}
		case provisioner.Terminate:
			cmd = &internalpb.NodeCommand{RequestId: fmt.Sprintf("provision/release/%s/%d", n.ID, idle.IdleSince.UnixNano()),
				Cmd: &internalpb.NodeCommand_Terminate{Terminate: &internalpb.TerminateNode{ReleaseIdleSince: rec.GetIdleSince()}}}
			result = ProvisionReleased
		case provisioner.GiveUp:
			cmd = &internalpb.NodeCommand{RequestId: "provision/giveup/" + n.ID, Cmd: &internalpb.NodeCommand_Terminate{Terminate: &internalpb.TerminateNode{}}}
			result = ProvisionGaveUp
		default:
			continue
		}
		cmd.NodeId = n.ID
		e.nodeOp(ctx, n, cmd, result)
	}
}

// nodeOp sends one idle/release command cmd to node n in the background,
// unless one is in flight or paced; result, if set, is counted on
// success.
func (e *Engine) nodeOp(ctx context.Context, n provisioner.Node, cmd *internalpb.NodeCommand, result string) {
	e.prov.mu.Lock()
	if e.prov.nodeOps[n.ID] || e.cfg.Clock().Before(e.prov.retryAt["op/"+n.ID]) {
		e.prov.mu.Unlock()
		return
	}
	e.prov.nodeOps[n.ID] = true
	e.prov.mu.Unlock()
	e.inBackground(func() {
		_, err := e.requestKind(ctx, actors.KindNode, n.ID, cmd)
		e.prov.mu.Lock()
		delete(e.prov.nodeOps, n.ID)
		if err != nil {
			e.prov.retryAt["op/"+n.ID] = e.cfg.Clock().Add(provisionRetry)
		}
		e.prov.mu.Unlock()
		switch {
		case err == nil && result == ProvisionGaveUp:
			e.cfg.Metrics.countProvisioned(n.Pool, n.Tier, result)
			e.log.Warn("node given up: still being created after the create timeout; terminated", "node_id", n.ID, "pool", n.Pool, "tier", n.Tier,
				"created_at", n.CreatedAt, "timeout", e.cfg.NodeCreateTimeout, "for_jobs", strings.Join(n.ForJobs, ","))
		case err == nil && result != "":
			e.cfg.Metrics.countProvisioned(n.Pool, n.Tier, result)
			e.log.Info("node released: it ran nothing for its tier's linger", "node_id", n.ID, "pool", n.Pool, "tier", n.Tier)
		case err != nil && ctx.Err() == nil:
			e.log.Warn("idle or release of an engine-created node", "node_id", n.ID, "request_id", cmd.GetRequestId(), "error", err)
		}
	})
}

// logUnserved logs, once per change of its reason, each waiting role no
// node can be created for.
func (e *Engine) logUnserved(unserved map[string]string) {
	e.prov.mu.Lock()
	defer e.prov.mu.Unlock()
	for k, why := range unserved {
		if e.prov.unserved[k] != why {
			e.prov.unserved[k] = why
			e.log.Warn("no node can be provisioned for a waiting job", "job_role", k, "reason", why)
		}
	}
	for k := range e.prov.unserved {
		if _, ok := unserved[k]; !ok {
			delete(e.prov.unserved, k)
		}
	}
}

// requestKind sends cmd to a grain of kind and returns its reply, or its
// error.
func (e *Engine) requestKind(ctx context.Context, kind, id string, cmd proto.Message) (*internalpb.Reply, error) {
	rctx, cancel := context.WithTimeout(ctx, e.cfg.RequestTimeout)
	defer cancel()
	r, err := e.cfg.Router.Request(rctx, kind, id, cmd)
	if err != nil {
		return nil, err
	}
	return r, actors.AsError(r)
}

// readHealth reads the providers' health records into a HealthFunc.
func readHealth(store *persistence.Store) (provisioner.HealthFunc, error) {
	var hs []*managerpb.ProviderHealth
	err := store.View(func(r *persistence.Reader) error {
		var err error
		hs, err = r.ProviderHealth()
		return err
	})
	type loc struct {
		p   managerpb.NodeProvider
		loc string
	}
	m := map[loc]managerpb.Health{}
	for _, h := range hs {
		for _, r := range h.GetAws().GetRegionHealth() {
			m[loc{managerpb.NodeProvider_NODE_PROVIDER_AWS, r.GetRegion()}] = r.GetHealth()
		}
		for _, r := range h.GetOci().GetRegionHealth() {
			m[loc{managerpb.NodeProvider_NODE_PROVIDER_OCI, r.GetAvailabilityDomain()}] = r.GetHealth()
		}
	}
	return func(p managerpb.NodeProvider, l string) managerpb.Health { return m[loc{p, l}] }, err
}
