package gateway

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/emptypb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/norsk-oss/norsk-manager/actors"
	"github.com/norsk-oss/norsk-manager/actors/job"
	"github.com/norsk-oss/norsk-manager/actors/node"
	"github.com/norsk-oss/norsk-manager/persistence"
	"github.com/norsk-oss/norsk-manager/proto/commonpb"
	"github.com/norsk-oss/norsk-manager/proto/internalpb"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
	"github.com/norsk-oss/norsk-manager/proto/noderesources"
	"github.com/norsk-oss/norsk-manager/proto/workerauth"
)

type commonJobID = commonpb.JobId

func runningJobs(rec *internalpb.JobRecord) []*managerpb.RunningJob { return job.RunningJobs(rec) }

// nodeInstances returns the instances job records place on node, as
// RunningJob (read in the same view as the node).
func nodeInstances(r *persistence.Reader, node string) ([]*managerpb.RunningJob, error) {
	refs, err := r.InstancesOnNode(node)
	if err != nil {
		return nil, err
	}
	out := make([]*managerpb.RunningJob, 0, len(refs))
	for _, ref := range refs {
		out = append(out, &managerpb.RunningJob{
			JobKey: &commonpb.ActiveJobKey{JobId: &commonpb.JobId{JobId: ref.JobID}, Role: ref.Role},
			NodeId: &commonpb.NodeId{NodeId: node},
		})
	}
	return out, nil
}

// ListNodes returns the nodes the manager knows (cluster slots not yet
// registered by a worker included, in state REGISTERED), in node-id order,
// with what the live registry knows of its worker session (connected, last
// seen, load, and the runtime conditions of a connected worker), and its
// placement view: the resources its worker reported, zone, cloud, and the
// capacity allocated to and free of the job instances recorded on it. One
// page (paging.go): at most page_size nodes and the reply budget in bytes;
// next_page_token is set when nodes are left over. InvalidArgument naming
// page_token for a token not of this listing.
func (s *Server) ListNodes(ctx context.Context, in *managerpb.ListNodesRequest) (*managerpb.ListNodesResponse, error) {
	pg, err := newPager("nodes", in.GetPageSize(), in.GetPageToken(), s.listBudget())
	if err != nil {
		return nil, err
	}
	resp := &managerpb.ListNodesResponse{}
	lives := s.liveView(ctx)
	err = s.view(ctx, func(r *persistence.Reader) error {
		allocs, err := r.NodeAllocations()
		if err != nil {
			return err
		}
		return pg.done(r.Nodes(func(n *internalpb.NodeRecord) error {
			if pg.skip(n.GetNodeId()) {
				return nil
			}
			inst, err := nodeInstances(r, n.GetNodeId())
			if err != nil {
				return err
			}
			live := lives[n.GetNodeId()]
			info := &managerpb.NodeInfo{
				Metadata:        n.GetMetadata(),
				RunningMetadata: n.GetRunningMetadata(),
				Provider:        n.GetProvider(),
				State:           n.GetState(),
				Instances:       inst,
				Connected:       live.Connected,
				StopReason:      n.StopReason,
				CpuPercentage:   live.CPUBusy,
				MemoryUsedMib:   live.MemoryUsedMiB,
				Orphans:         n.GetOrphans(),
				Contested:       n.GetContested(),
				Scheduling:      n.GetScheduling(),
			}
			setCapacity(info, n, allocs[n.GetNodeId()])
			if !live.LastSeen.IsZero() {
				info.LastSeen = timestamppb.New(live.LastSeen)
			} else {
				info.LastSeen = n.GetLastConnected()
			}
			if live.Connected {
				info.RuntimeConditions = live.RuntimeConditions
			}
			if !pg.fits(n.GetNodeId(), info) {
				return errPageFull
			}
			resp.Nodes = append(resp.Nodes, info)
			return nil
		}))
	})
	resp.NextPageToken = pg.next
	return resp, toStatus(err)
}

// setCapacity fills info's placement fields from the node record n (what
// its worker reported, unknown counting as 0 units; what it is,
// node.FactsOf) and alloc, what the job records place on it
// (persistence.Reader.NodeAllocations), the pinned cores included.
func setCapacity(info *managerpb.NodeInfo, n *internalpb.NodeRecord, alloc persistence.Allocation) {
	res := n.GetResources()
	info.Resources = res
	info.Zone = node.Zone(n)
	info.Cloud = noderesources.Cloud(n.GetProvider())
	info.AllocatedCapacity, info.AllocatedGpuCapacity = alloc.Capacity, alloc.GPUCapacity
	info.FreeCapacity = res.GetCapacity() - alloc.Capacity
	info.FreeGpuCapacity = res.GetGpuCapacity() - alloc.GPUCapacity
	facts := node.FactsOf(n)
	info.Architecture, info.Shape, info.AvailabilityDomain, info.Subnet = facts.Architecture, facts.Shape, facts.AvailabilityDomain, facts.Subnet
	info.Cores, info.PinnedCores = facts.Cores, alloc.PinnedCores
}

// ListClusterNodes returns the cluster slots, bound or not, in node-id
// order, with their tokens (blanked for a caller whose ACL role may not
// operate slots: a read token). Paged as ListNodes.
func (s *Server) ListClusterNodes(ctx context.Context, in *managerpb.ListClusterNodesRequest) (*managerpb.ListClusterNodesResponse, error) {
	pg, err := newPager("slots", in.GetPageSize(), in.GetPageToken(), s.listBudget())
	if err != nil {
		return nil, err
	}
	resp := &managerpb.ListClusterNodesResponse{}
	lives := s.liveView(ctx)
	err = s.view(ctx, func(r *persistence.Reader) error {
		return pg.done(r.Nodes(func(n *internalpb.NodeRecord) error {
			if n.GetProvider() != managerpb.NodeProvider_NODE_PROVIDER_CLUSTER || pg.skip(n.GetNodeId()) {
				return nil
			}
			live := lives[n.GetNodeId()]
			cn := &managerpb.ClusterNode{
				Name:         n.GetSlotName(),
				NodeId:       &commonpb.NodeId{NodeId: n.GetNodeId()},
				Token:        n.GetToken(),
				Active:       live.Connected && n.GetState() == managerpb.NodeLifecycle_NODE_LIFECYCLE_STARTED,
				Address:      n.GetAddress(),
				Port:         n.GetPort(),
				Hardware:     n.GetHardware(),
				TokenUsed:    n.GetTokenUsed(),
				RegisteredAt: n.GetRegisteredAt(),
				Tags:         n.GetMetadata().GetTags(),
				State:        n.GetState(),
				LastSeen:     n.GetLastConnected(),
			}
			if !live.LastSeen.IsZero() {
				cn.LastSeen = timestamppb.New(live.LastSeen)
			}
			if !pg.fits(n.GetNodeId(), cn) {
				return errPageFull
			}
			resp.Nodes = append(resp.Nodes, cn)
			return nil
		}))
	})
	resp.NextPageToken = pg.next
	s.blankSlotTokens(ctx, resp.Nodes)
	return resp, toStatus(err)
}

// RegisterClusterNode creates a cluster slot and returns its node id and
// registration token.
func (s *Server) RegisterClusterNode(ctx context.Context, in *managerpb.RegisterClusterNodeRequest) (*managerpb.RegisterClusterNodeResponse, error) {
	if err := checkText("node_name", in.GetNodeName(), maxNameLen); err != nil {
		return nil, err
	}
	if err := checkTags("tags", in.GetTags()); err != nil {
		return nil, err
	}
	id := newUUID()
	r, err := s.node(ctx, id, &internalpb.NodeCommand{Cmd: &internalpb.NodeCommand_RegisterSlot{RegisterSlot: &internalpb.RegisterSlot{
		Name: in.GetNodeName(), Tags: in.GetTags()}}})
	if err != nil {
		return nil, err
	}
	return r.GetRegisterClusterNode(), nil
}

// DeregisterClusterNode removes a cluster slot: closes its worker's stream,
// stops its jobs and revokes its token and credential.
func (s *Server) DeregisterClusterNode(ctx context.Context, in *commonpb.NodeId) (*emptypb.Empty, error) {
	id, err := nodeID("node_id", in)
	if err != nil {
		return nil, err
	}
	_, err = s.node(ctx, id, &internalpb.NodeCommand{Cmd: &internalpb.NodeCommand_Deregister{Deregister: &internalpb.DeregisterSlot{}}})
	return empty(err)
}

// ClusterMemberRegister is the worker's registration: token (first time) or
// node credential (again), and where to dial it back. Unauthenticated for
// an unknown or revoked token; PermissionDenied for a bound slot's token
// presented without its credential, or a worker_cert_sha256 other than the
// one pinned when the slot was bound (reason CERT_CHANGED); InvalidArgument
// for a worker_cert_sha256 that is neither empty nor 32 bytes;
// FailedPrecondition if the dial-back address does not accept connections;
// ResourceExhausted (with a RetryInfo) when the calling address registers
// faster than LimitsConfig allows. With mutual TLS it is the one method a
// connection without a client certificate may call (cluster/agent
// clientcert_guard.go).
func (s *Server) ClusterMemberRegister(ctx context.Context, in *managerpb.ClusterMemberRegisterRequest) (*managerpb.ClusterMemberRegisterResponse, error) {
	if src := sourceIP(ctx); src != "" {
		if err := s.registers.allow(src); err != nil {
			return nil, err
		}
	}
	if err := validateMemberRegister(in); err != nil {
		return nil, err
	}
	if n := len(in.GetWorkerCertSha256()); n != 0 && n != sha256.Size {
		return nil, invalid("worker_cert_sha256", "want the %d-byte SHA-256 of the worker's certificate, got %d bytes", sha256.Size, n)
	}
	var id string
	err := s.view(ctx, func(r *persistence.Reader) error {
		if in.GetToken() != "" {
			nid, revoked, err := r.NodeIDByToken(in.GetToken())
			switch {
			case errors.Is(err, persistence.ErrNotFound):
				return withReason(codes.Unauthenticated, workerauth.ReasonTokenUnknown, "unknown registration token")
			case err != nil:
				return err
			case revoked:
				return withReason(codes.Unauthenticated, workerauth.ReasonTokenRevoked,
					fmt.Sprintf("registration token revoked: cluster slot %s was deregistered", nid))
			}
			id = nid
			return nil
		}
		nid, err := r.NodeIDByCredential(in.GetNodeCredential())
		if !errors.Is(err, persistence.ErrNotFound) {
			id = nid
			return err
		}
		// The reason a revoked token gets: the worker of a deregistered
		// slot stops the jobs it still runs for it.
		if nid, err := r.NodeIDByRevokedCredential(in.GetNodeCredential()); err == nil {
			return withReason(codes.Unauthenticated, workerauth.ReasonTokenRevoked,
				fmt.Sprintf("node credential revoked: cluster slot %s was deregistered", nid))
		} else if !errors.Is(err, persistence.ErrNotFound) {
			return err
		}
		return withReason(codes.Unauthenticated, workerauth.ReasonCredentialUnknown, "unknown or revoked node credential")
	})
	if err != nil {
		return nil, toStatus(err)
	}
	if err := s.probeDialBack(ctx, in.GetAddress(), in.GetPort()); err != nil {
		return nil, err
	}
	r, err := s.node(ctx, id, &internalpb.NodeCommand{Cmd: &internalpb.NodeCommand_MemberRegister{MemberRegister: &internalpb.MemberRegister{
		Token: in.GetToken(), Address: in.GetAddress(), Port: in.GetPort(), Hardware: in.GetHardware(),
		Credential: in.GetNodeCredential(), WorkerVersion: in.GetWorkerVersion(), Resources: in.GetResources(),
		WorkerCertSha256: in.GetWorkerCertSha256()}}})
	if err != nil {
		return nil, err
	}
	return r.GetClusterMemberRegister(), nil
}

// validateMemberRegister checks a registration before anything is read:
// Unauthenticated without a token or credential, InvalidArgument naming
// the field for a bad dial-back address or resources.
func validateMemberRegister(in *managerpb.ClusterMemberRegisterRequest) error {
	if in.GetToken() == "" && in.GetNodeCredential() == "" {
		return status.Error(codes.Unauthenticated, "token: a registration token (or, for a registered worker, its node credential) is required")
	}
	if err := checkDialBack(in.GetAddress(), in.GetPort()); err != nil {
		return err
	}
	return checkResources(in.GetResources())
}

// checkResources validates what a worker reports it offers
// (noderesources.Validate): InvalidArgument naming the field, as
// "resources.capacity: …" or "resources.capabilities[nvenc]: …".
func checkResources(r *commonpb.NodeResources) error {
	err := noderesources.Validate(r)
	if fe, ok := errors.AsType[*noderesources.FieldError](err); ok {
		field := "resources." + fe.Field
		if fe.Key != "" {
			field += "[" + fe.Key + "]"
		}
		return invalid(field, "%s", fe.Reason)
	}
	return err
}

// CreateMockNode takes the next URL of the mock pool and makes it node_id
// (InvalidArgument for an id outside the id rule, checkNewID).
func (s *Server) CreateMockNode(ctx context.Context, in *managerpb.CreateMockNodeRequest) (*emptypb.Empty, error) {
	id, err := newNodeID("node_id", in.GetNodeId())
	if err != nil {
		return nil, err
	}
	if err := checkTags("tags", in.GetTags()); err != nil {
		return nil, err
	}
	err = s.view(ctx, func(r *persistence.Reader) error {
		_, _, err := r.Node(id)
		if err == nil {
			return status.Errorf(codes.AlreadyExists, "node %q already exists", id)
		}
		if errors.Is(err, persistence.ErrNotFound) {
			return nil
		}
		return err
	})
	if err != nil {
		return nil, toStatus(err)
	}
	pr, err := s.request(ctx, actors.KindPool, "mock", &internalpb.PoolCommand{RequestId: newRequestID(), Cmd: &internalpb.PoolCommand_Pop{Pop: &internalpb.PopMockUrl{}}})
	if err != nil {
		return nil, err
	}
	_, err = s.node(ctx, id, &internalpb.NodeCommand{Cmd: &internalpb.NodeCommand_CreateMock{CreateMock: &internalpb.CreateMockNode{
		Url: pr.GetMockUrl(), Tags: in.GetTags()}}})
	return empty(err)
}

// TerminateNode stops a node on purpose: its jobs are stopped and its
// worker session closed.
func (s *Server) TerminateNode(ctx context.Context, in *commonpb.NodeId) (*emptypb.Empty, error) {
	id, err := nodeID("node_id", in)
	if err != nil {
		return nil, err
	}
	_, err = s.node(ctx, id, &internalpb.NodeCommand{Cmd: &internalpb.NodeCommand_Terminate{Terminate: &internalpb.TerminateNode{}}})
	return empty(err)
}

// StopOrphan stops an orphan instance (a job its node's worker runs that
// the store does not know) now instead of when its grace ends.
// InvalidArgument for a bad node id, job id or role; NotFound when the
// node has no such orphan; FailedPrecondition when the node's worker
// session is down.
func (s *Server) StopOrphan(ctx context.Context, in *managerpb.StopOrphanRequest) (*emptypb.Empty, error) {
	id, err := nodeID("node_id", in.GetNodeId())
	if err != nil {
		return nil, err
	}
	job, role := in.GetJobKey().GetJobId().GetJobId(), in.GetJobKey().GetRole()
	if err := checkID("job_key.job_id", job); err != nil {
		return nil, err
	}
	if err := checkText("job_key.role", role, maxNameLen); err != nil {
		return nil, err
	}
	_, err = s.node(ctx, id, &internalpb.NodeCommand{Cmd: &internalpb.NodeCommand_StopOrphan{StopOrphan: &internalpb.StopOrphan{JobId: job, Role: role}}})
	return empty(err)
}

// UpdatePhysicalNode records a node's worker daemon version.
func (s *Server) UpdatePhysicalNode(ctx context.Context, in *managerpb.UpdatePhysicalNodeRequest) (*emptypb.Empty, error) {
	if err := checkID("id", in.GetId()); err != nil {
		return nil, err
	}
	if err := checkText("daemon_version", in.GetDaemonVersion(), maxNameLen); err != nil {
		return nil, err
	}
	_, err := s.node(ctx, in.GetId(), &internalpb.NodeCommand{Cmd: &internalpb.NodeCommand_UpdatePhysical{
		UpdatePhysical: &internalpb.UpdatePhysicalNode{DaemonVersion: in.GetDaemonVersion()}}})
	return empty(err)
}

// CreateAwsNode creates a node backed by an EC2 instance: the node grain
// records it (node_starting) and launches the instance from the request's
// launch template in its region; its worker registers with the token in
// the user data (node_started), or the node stops with CREATE_FAILED,
// PENDING_TIME_EXCEEDED or STARTUP_TIME_EXCEEDED (docs/design/providers.md).
// Errors: InvalidArgument naming the field (node_id follows the id rule,
// checkNewID); AlreadyExists for a known node id; FailedPrecondition when
// this manager has no AWS provider.
func (s *Server) CreateAwsNode(ctx context.Context, in *managerpb.CreateAwsNodeRequest) (*emptypb.Empty, error) {
	id, err := newNodeID("node_id", in.GetNodeId())
	if err != nil {
		return nil, err
	}
	if err := validateAwsNode(in); err != nil {
		return nil, err
	}
	_, err = s.node(ctx, id, &internalpb.NodeCommand{Cmd: &internalpb.NodeCommand_CreateCloud{CreateCloud: &internalpb.CreateCloudNode{
		Request: &internalpb.CreateCloudNode_Aws{Aws: in}}}})
	return empty(err)
}

// CreateOciNode creates a node backed by an OCI compute instance in the
// request's availability domain, shape and subnet, with an image chosen by
// architecture; otherwise as CreateAwsNode. Errors: InvalidArgument naming
// the field; AlreadyExists; FailedPrecondition when this manager has no
// OCI provider.
func (s *Server) CreateOciNode(ctx context.Context, in *managerpb.CreateOciNodeRequest) (*emptypb.Empty, error) {
	id, err := newNodeID("node_id", in.GetNodeId())
	if err != nil {
		return nil, err
	}
	if err := validateOciNode(in); err != nil {
		return nil, err
	}
	_, err = s.node(ctx, id, &internalpb.NodeCommand{Cmd: &internalpb.NodeCommand_CreateCloud{CreateCloud: &internalpb.CreateCloudNode{
		Request: &internalpb.CreateCloudNode_Oci{Oci: in}}}})
	return empty(err)
}

// maxCloudTags bounds a cloud node's tags: EC2 allows 50 per instance, one
// of which is the node id tag.
const maxCloudTags = 49

func validateAwsNode(in *managerpb.CreateAwsNodeRequest) error {
	if err := checkTags("tags", in.GetTags()); err != nil {
		return err
	}
	if err := checkText("region", in.GetRegion(), maxNameLen); err != nil {
		return err
	}
	if !isCloudName(in.GetRegion()) || strings.ContainsAny(in.GetRegion(), "._") {
		return invalid("region", "%q is not a region name (like eu-west-2)", in.GetRegion())
	}
	if len(in.GetTags()) > maxCloudTags {
		return invalid("tags", "%d tags; an instance takes at most %d (with the node id tag)", len(in.GetTags()), maxCloudTags)
	}
	t := in.GetTemplate()
	switch {
	case t.GetId() == "" && t.GetName() == "":
		return invalid("template", "a launch template id or name is required (it holds the image, network and role)")
	case len(in.GetInstanceType()) > maxNameLen || in.GetInstanceType() != "" && !isCloudName(in.GetInstanceType()):
		return invalid("instance_type", "%q is not an instance type", in.GetInstanceType())
	case len(in.GetAvailabilityZone()) > maxNameLen || in.GetAvailabilityZone() != "" && !isCloudName(in.GetAvailabilityZone()):
		return invalid("availability_zone", "%q is not an availability zone name (like eu-west-2a)", in.GetAvailabilityZone())
	}
	for i, g := range in.GetExtraSecurityGroups() {
		if err := checkText(fmt.Sprintf("extra_security_groups[%d]", i), g, maxNameLen); err != nil {
			return err
		}
	}
	return nil
}

func validateOciNode(in *managerpb.CreateOciNodeRequest) error {
	if err := checkTags("tags", in.GetTags()); err != nil {
		return err
	}
	for _, f := range []struct{ name, v string }{
		{"availabilityDomain", in.GetAvailabilityDomain()}, {"shape", in.GetShape()}, {"subnet", in.GetSubnet()},
	} {
		if err := checkText(f.name, f.v, maxNameLen*4); err != nil {
			return err
		}
	}
	switch strings.ToLower(in.GetArchitecture()) {
	case "", "x86_64", "amd64", "aarch64", "arm64":
	default:
		return invalid("architecture", "%q is not x86_64 or aarch64", in.GetArchitecture())
	}
	return nil
}

// isCloudName reports whether s looks like an instance type or shape name
// (letters, digits, '.', '-', '_').
func isCloudName(s string) bool {
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '-' || r == '_') {
			return false
		}
	}
	return s != ""
}

// ClusterMembers answers the managers of the cluster (a single manager:
// itself, as the leader of a cluster of one).
func (s *Server) ClusterMembers(ctx context.Context, _ *managerpb.ClusterMembersRequest) (*managerpb.ClusterMembersResponse, error) {
	if s.cfg.Members != nil {
		resp, err := s.cfg.Members(ctx)
		return resp, toStatus(err)
	}
	return &managerpb.ClusterMembersResponse{Members: []*managerpb.ClusterMember{{
		Name: "local", RaftState: "leader", GossipState: "alive", Voter: true,
		AppliedIndex: s.cfg.Store.FSM().AppliedIndex(), CommitIndex: s.cfg.Store.FSM().AppliedIndex(),
		Version: s.cfg.Version.GetManagerVersion(),
	}}, Leader: "local"}, nil
}
