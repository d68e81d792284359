package agent

import (
	"context"
	"fmt"
	"net"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/norsk-oss/norsk-manager/proto/commonpb"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
	"github.com/norsk-oss/norsk-manager/proto/workerauth"
)

func slots(t *testing.T, c managerpb.ManagerClient) map[string]*managerpb.ClusterNode {
	r, err := c.ListClusterNodes(context.Background(), &managerpb.ListClusterNodesRequest{})
	require.NoError(t, err)
	out := map[string]*managerpb.ClusterNode{}
	for _, n := range r.GetNodes() {
		out[n.GetNodeId().GetNodeId()] = n
	}
	return out
}

func TestClusterSlots_TokenRules(t *testing.T) {
	ctx := context.Background()
	_, c := startAgent(t, t.TempDir())
	reg, err := c.RegisterClusterNode(ctx, &managerpb.RegisterClusterNodeRequest{NodeName: "rack-1"})
	require.NoError(t, err)
	id, token := reg.GetNodeId().GetNodeId(), reg.GetToken()
	require.Len(t, token, 64, "32 random bytes, hex")
	s := slots(t, c)[id]
	require.Equal(t, "rack-1", s.GetName())
	require.Equal(t, token, s.GetToken(), "operators can copy the token again")
	require.False(t, s.GetTokenUsed())
	require.False(t, s.GetActive())

	w := newFakeWorker(t)
	_, err = c.ClusterMemberRegister(ctx, &managerpb.ClusterMemberRegisterRequest{Token: "nope", Address: "127.0.0.1", Port: w.port})
	requireCode(t, err, codes.Unauthenticated, "unknown registration token")

	// An address nobody listens on is refused and leaves the slot unbound.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	deadPort := uint32(l.Addr().(*net.TCPAddr).Port)
	l.Close()
	_, err = c.ClusterMemberRegister(ctx, &managerpb.ClusterMemberRegisterRequest{Token: token, Address: "127.0.0.1", Port: deadPort})
	requireCode(t, err, codes.FailedPrecondition, "cannot reach the worker")
	require.False(t, slots(t, c)[id].GetTokenUsed())

	first, err := c.ClusterMemberRegister(ctx, &managerpb.ClusterMemberRegisterRequest{Token: token, Address: "127.0.0.1", Port: w.port})
	require.NoError(t, err)
	require.Equal(t, id, first.GetNodeId().GetNodeId())
	w.setCredential(id, first.GetNodeCredential())
	eventually(t, "online", func() bool { return slots(t, c)[id].GetActive() })
	require.True(t, slots(t, c)[id].GetTokenUsed())

	// A second worker presenting the bound token is refused, nothing changes.
	w2 := newFakeWorker(t)
	_, err = c.ClusterMemberRegister(ctx, &managerpb.ClusterMemberRegisterRequest{Token: token, Address: "127.0.0.1", Port: w2.port})
	requireCode(t, err, codes.PermissionDenied, "already bound")
	_, err = c.ClusterMemberRegister(ctx, &managerpb.ClusterMemberRegisterRequest{Token: token, NodeCredential: "forged", Address: "127.0.0.1", Port: w2.port})
	requireCode(t, err, codes.PermissionDenied)
	require.Equal(t, w.port, slots(t, c)[id].GetPort())

	// The bound worker re-registers (after a restart) with its credential.
	again, err := c.ClusterMemberRegister(ctx, &managerpb.ClusterMemberRegisterRequest{NodeCredential: first.GetNodeCredential(), Address: "127.0.0.1", Port: w.port})
	require.NoError(t, err)
	require.Equal(t, id, again.GetNodeId().GetNodeId())
	require.Equal(t, first.GetNodeCredential(), again.GetNodeCredential())

	// Deregister: jobs stopped, stream closed, token and credential revoked.
	_, err = c.CreateJob(ctx, &managerpb.Job{JobId: &commonpb.JobId{JobId: "j"}, Services: oneService()})
	require.NoError(t, err)
	eventually(t, "online again", func() bool { return slots(t, c)[id].GetActive() })
	_, err = c.StartJob(ctx, &managerpb.StartJobRequest{JobId: &commonpb.JobId{JobId: "j"}, Role: "primary", NodeId: &commonpb.NodeId{NodeId: id}})
	require.NoError(t, err)
	eventually(t, "running", func() bool { return w.isRunning("j", "primary") })
	_, err = c.DeregisterClusterNode(ctx, &commonpb.NodeId{NodeId: id})
	require.NoError(t, err)
	eventually(t, "worker told to stop the job", func() bool { return !w.isRunning("j", "primary") })
	eventually(t, "job instance ended", func() bool { return len(instanceOf(t, c, "j")) == 0 })
	require.NotContains(t, slots(t, c), id)
	_, err = c.ClusterMemberRegister(ctx, &managerpb.ClusterMemberRegisterRequest{Token: token, Address: "127.0.0.1", Port: w.port})
	requireCode(t, err, codes.Unauthenticated, "revoked")
	requireReason(t, err, workerauth.ReasonTokenRevoked)
	// The credential alone (a worker restarting on its state dir) is told
	// the same, so that the worker stops the jobs it still runs.
	_, err = c.ClusterMemberRegister(ctx, &managerpb.ClusterMemberRegisterRequest{NodeCredential: first.GetNodeCredential(), Address: "127.0.0.1", Port: w.port})
	requireCode(t, err, codes.Unauthenticated, "node credential revoked", id)
	requireReason(t, err, workerauth.ReasonTokenRevoked)
	_, err = c.ClusterMemberRegister(ctx, &managerpb.ClusterMemberRegisterRequest{NodeCredential: "never-issued", Address: "127.0.0.1", Port: w.port})
	requireCode(t, err, codes.Unauthenticated)
	requireReason(t, err, workerauth.ReasonCredentialUnknown)
	_, err = c.DeregisterClusterNode(ctx, &commonpb.NodeId{NodeId: id})
	requireCode(t, err, codes.NotFound)
	r, err := c.JobById(ctx, &commonpb.JobId{JobId: "j"})
	require.NoError(t, err)
	h := r.GetJob().GetHistoryEntry()
	require.Equal(t, managerpb.JobHistoryJobStopping_JOB_STOPPED_NODE_TERMINATED, h[len(h)-2].GetJobStopping().GetReason())
}

func TestCreateMockNode_Pool(t *testing.T) {
	ctx := context.Background()
	w1, w2 := newFakeWorker(t), newFakeWorker(t)
	cfg := DevConfig(t.TempDir())
	cfg.Store.SyncWrites = false
	cfg.MockWorkerURLs = []string{fmt.Sprintf("127.0.0.1:%d", w1.port), fmt.Sprintf("127.0.0.1:%d", w2.port)}
	a, err := New(cfg)
	require.NoError(t, err)
	require.NoError(t, a.Start())
	t.Cleanup(a.Shutdown)
	c := dial(t, a.APIAddr())
	_, err = c.CreateMockNode(ctx, &managerpb.CreateMockNodeRequest{NodeId: &commonpb.NodeId{NodeId: "m1"}, Tags: map[string]string{"t": "1"}})
	require.NoError(t, err)
	_, err = c.CreateMockNode(ctx, &managerpb.CreateMockNodeRequest{NodeId: &commonpb.NodeId{NodeId: "m1"}})
	requireCode(t, err, codes.AlreadyExists)
	_, err = c.CreateMockNode(ctx, &managerpb.CreateMockNodeRequest{NodeId: &commonpb.NodeId{NodeId: "m2"}})
	require.NoError(t, err)
	_, err = c.CreateMockNode(ctx, &managerpb.CreateMockNodeRequest{NodeId: &commonpb.NodeId{NodeId: "m3"}})
	requireCode(t, err, codes.ResourceExhausted, "pool is empty")
	eventually(t, "mock nodes online", func() bool {
		return nodeState(t, c, "m1") == managerpb.NodeLifecycle_NODE_LIFECYCLE_STARTED && nodeState(t, c, "m2") == managerpb.NodeLifecycle_NODE_LIFECYCLE_STARTED
	})
	w1.mu.Lock()
	require.Equal(t, 1, w1.sessions, "URLs are handed out in order")
	w1.mu.Unlock()
	_, err = c.TerminateNode(ctx, &commonpb.NodeId{NodeId: "m1"})
	require.NoError(t, err)
	eventually(t, "m1 stopped", func() bool {
		r, err := c.ListNodes(ctx, &managerpb.ListNodesRequest{})
		require.NoError(t, err)
		for _, n := range r.GetNodes() {
			if n.GetMetadata().GetNodeId().GetNodeId() == "m1" {
				return n.GetState() == managerpb.NodeLifecycle_NODE_LIFECYCLE_STOPPED && !n.GetConnected()
			}
		}
		return false
	})
}

func TestGateway_BadInput(t *testing.T) {
	ctx := context.Background()
	_, c := startAgent(t, t.TempDir())
	node, _ := registerWorker(t, c, "w1")
	_, err := c.CreateJob(ctx, &managerpb.Job{JobId: &commonpb.JobId{JobId: "ok"}, Services: oneService()})
	require.NoError(t, err)
	offline, err := c.RegisterClusterNode(ctx, &managerpb.RegisterClusterNodeRequest{NodeName: "no-worker-yet"})
	require.NoError(t, err)
	_, err = c.StartJob(ctx, &managerpb.StartJobRequest{JobId: &commonpb.JobId{JobId: "ok"}, Role: "twice", NodeId: &commonpb.NodeId{NodeId: node}})
	require.NoError(t, err)
	eventually(t, "instance recorded", func() bool { return len(instanceOf(t, c, "ok")) == 1 })
	jid := func(s string) *commonpb.JobId { return &commonpb.JobId{JobId: s} }
	nid := func(s string) *commonpb.NodeId { return &commonpb.NodeId{NodeId: s} }
	cases := []struct {
		name string
		call func() error
		code codes.Code
		msg  string
	}{
		{"update without id", func() error { _, err := c.UpdateJob(ctx, &managerpb.Job{}); return err }, codes.InvalidArgument, "job.job_id"},
		{"id with slash", func() error { _, err := c.CreateJob(ctx, &managerpb.Job{JobId: jid("a/b")}); return err }, codes.InvalidArgument, "letters, digits"},
		{"id with control char", func() error { _, err := c.CreateJob(ctx, &managerpb.Job{JobId: jid("a\nb")}); return err }, codes.InvalidArgument, "letters, digits"},
		{"lookup with control char", func() error { _, err := c.JobById(ctx, jid("a\nb")); return err }, codes.InvalidArgument, "control character"},
		{"id too long", func() error {
			_, err := c.CreateJob(ctx, &managerpb.Job{JobId: jid(strings.Repeat("x", 300))})
			return err
		}, codes.InvalidArgument, "limit"},
		{"unknown job", func() error { _, err := c.JobById(ctx, jid("nope")); return err }, codes.NotFound, "nope"},
		{"delete unknown job", func() error { _, err := c.DeleteJob(ctx, jid("nope")); return err }, codes.NotFound, "nope"},
		{"update unknown job", func() error { _, err := c.UpdateJob(ctx, &managerpb.Job{JobId: jid("nope")}); return err }, codes.NotFound, "nope"},
		{"empty role", func() error {
			_, err := c.StartJob(ctx, &managerpb.StartJobRequest{JobId: jid("ok"), NodeId: nid(node)})
			return err
		}, codes.InvalidArgument, "role"},
		{"start on unknown node", func() error {
			_, err := c.StartJob(ctx, &managerpb.StartJobRequest{JobId: jid("ok"), Role: "primary", NodeId: nid("ghost")})
			return err
		}, codes.NotFound, "ghost"},
		{"start on an offline node", func() error {
			_, err := c.StartJob(ctx, &managerpb.StartJobRequest{JobId: jid("ok"), Role: "primary", NodeId: offline.GetNodeId()})
			return err
		}, codes.FailedPrecondition, "not online"},
		{"start the same (job, role) twice", func() error {
			_, err := c.StartJob(ctx, &managerpb.StartJobRequest{JobId: jid("ok"), Role: "twice", NodeId: nid(node)})
			return err
		}, codes.AlreadyExists, "twice"},
		{"start without node", func() error {
			_, err := c.StartJob(ctx, &managerpb.StartJobRequest{JobId: jid("ok"), Role: "primary"})
			return err
		}, codes.InvalidArgument, "node_id"},
		{"stop not running", func() error {
			_, err := c.StopJob(ctx, &managerpb.StopJobRequest{JobId: jid("ok"), Role: "primary", NodeId: nid(node)})
			return err
		}, codes.FailedPrecondition, "no instance"},
		{"invalid regex", func() error {
			s, err := c.JobSearch(ctx, &managerpb.JobSearchRequest{JobFilter: []*managerpb.JobFilter{{JobFilter: &managerpb.JobFilter_IdFilter{
				IdFilter: &managerpb.IdFilter{Comparison: &managerpb.IdFilter_Re{Re: "(("}}}}}})
			if err != nil {
				return err
			}
			_, err = s.Recv()
			return err
		}, codes.InvalidArgument, "job_filter[0].id_filter.re"},
		{"dependsOn unknown", func() error {
			_, err := c.CreateJob(ctx, &managerpb.Job{JobId: jid("d"), Services: []*commonpb.Service{{Name: "a", DependsOn: []string{"b"}}}})
			return err
		}, codes.InvalidArgument, "unknown service"},
		{"bad port", func() error {
			_, err := c.CreateJob(ctx, &managerpb.Job{JobId: jid("p"), Services: []*commonpb.Service{{Name: "a", Parameters: &commonpb.ServiceParameters{
				PortMappings: []*commonpb.PortMapping{{ContainerPort: 70000}}}}}})
			return err
		}, codes.InvalidArgument, "container_port"},
		{"write file escapes", func() error {
			_, err := c.CreateJob(ctx, &managerpb.Job{JobId: jid("w"), WriteFiles: []*commonpb.WriteFile{{Path: "../etc/passwd"}}})
			return err
		}, codes.InvalidArgument, "escapes"},
		{"negative window", func() error {
			s, err := c.EventStream(ctx, &managerpb.EventStreamRequest{PendingWindowS: -1})
			if err != nil {
				return err
			}
			_, err = s.Recv()
			return err
		}, codes.InvalidArgument, "pending_window_s"},
		{"register without name", func() error {
			_, err := c.RegisterClusterNode(ctx, &managerpb.RegisterClusterNodeRequest{})
			return err
		}, codes.InvalidArgument, "node_name"},
		{"member register without token", func() error {
			_, err := c.ClusterMemberRegister(ctx, &managerpb.ClusterMemberRegisterRequest{Address: "127.0.0.1", Port: 1})
			return err
		}, codes.Unauthenticated, "token"},
		{"member register bad port", func() error {
			_, err := c.ClusterMemberRegister(ctx, &managerpb.ClusterMemberRegisterRequest{Token: "x", Address: "127.0.0.1", Port: 0})
			return err
		}, codes.InvalidArgument, "port"},
		{"aws not configured", func() error {
			_, err := c.CreateAwsNode(ctx, &managerpb.CreateAwsNodeRequest{NodeId: nid("a"), Region: "eu-west-2",
				Template: &managerpb.AwsLaunchTemplate{Template: &managerpb.AwsLaunchTemplate_Name{Name: "t"}}})
			return err
		}, codes.FailedPrecondition, "AWS provider"},
		{"aws without template", func() error {
			_, err := c.CreateAwsNode(ctx, &managerpb.CreateAwsNodeRequest{NodeId: nid("a"), Region: "eu-west-2"})
			return err
		}, codes.InvalidArgument, "template"},
		{"aws without node id", func() error { _, err := c.CreateAwsNode(ctx, &managerpb.CreateAwsNodeRequest{}); return err }, codes.InvalidArgument, "node_id"},
		{"oci not configured", func() error {
			_, err := c.CreateOciNode(ctx, &managerpb.CreateOciNodeRequest{NodeId: nid("o"), AvailabilityDomain: "AD-1", Shape: "VM.Standard.E4.Flex", Subnet: "ocid1.subnet.x"})
			return err
		}, codes.FailedPrecondition, "OCI provider"},
		{"oci bad architecture", func() error {
			_, err := c.CreateOciNode(ctx, &managerpb.CreateOciNodeRequest{NodeId: nid("o"), AvailabilityDomain: "AD-1", Shape: "s", Subnet: "n", Architecture: "sparc"})
			return err
		}, codes.InvalidArgument, "architecture"},
		{"mock pool empty", func() error {
			_, err := c.CreateMockNode(ctx, &managerpb.CreateMockNodeRequest{NodeId: nid("m")})
			return err
		}, codes.ResourceExhausted, "pool is empty"},
		{"oversized request", func() error {
			_, err := c.CreateJob(ctx, &managerpb.Job{JobId: jid("big"), ManagerConfiguration: strings.Repeat("x", 5<<20)})
			return err
		}, codes.ResourceExhausted, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			before := storeFingerprint(t, c)
			requireCode(t, tc.call(), tc.code, tc.msg)
			require.Equal(t, before, storeFingerprint(t, c), "a refused request must change nothing")
		})
	}
}

// storeFingerprint summarises the visible state: jobs with hashes and
// instances, and nodes with their states.
func storeFingerprint(t *testing.T, c managerpb.ManagerClient) string {
	ctx := context.Background()
	s, err := c.JobSearch(ctx, &managerpb.JobSearchRequest{})
	require.NoError(t, err)
	var b strings.Builder
	for {
		cj, err := s.Recv()
		if err != nil {
			break
		}
		fmt.Fprintf(&b, "job %s %d %d;", cj.GetJob().GetJobId().GetJobId(), cj.GetJob().GetCurrentHash(), len(cj.GetInstances()))
	}
	nodes, err := c.ListNodes(ctx, &managerpb.ListNodesRequest{})
	require.NoError(t, err)
	for _, n := range nodes.GetNodes() {
		fmt.Fprintf(&b, "node %s %s;", n.GetMetadata().GetNodeId().GetNodeId(), n.GetState())
	}
	return b.String()
}

// requireReason checks the google.rpc.ErrorInfo reason a refusal carries
// (the worker picks what it does by it).
func requireReason(t *testing.T, err error, reason string) {
	t.Helper()
	for _, d := range status.Convert(err).Details() {
		if ei, ok := d.(*errdetails.ErrorInfo); ok && ei.GetDomain() == workerauth.ErrorDomain {
			require.Equal(t, reason, ei.GetReason(), "error: %v", err)
			return
		}
	}
	t.Fatalf("error %v carries no ErrorInfo reason, want %s", err, reason)
}
