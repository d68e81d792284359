package agent

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	"github.com/norsk-oss/norsk-manager/proto/commonpb"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
	"github.com/norsk-oss/norsk-manager/proto/workerpb"
)

// templateJob is a job placed by hand that runs product template name at
// version.
func templateJob(id, name, version string) *managerpb.Job {
	return &managerpb.Job{JobId: &commonpb.JobId{JobId: id}, Services: oneService(),
		ProductTemplate: &commonpb.ProductTemplateRef{Name: name, Version: version}}
}

// provisions counts the provision_job messages the worker received for job.
func (w *fakeWorker) provisions(job string) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	for _, m := range w.received {
		if m.GetProvisionJob().GetJobId().GetJobId() == job {
			n++
		}
	}
	return n
}

// TestNodeTemplates_HelloListNodesAndStartJob (issue 14 §1): the catalogue
// a worker's hello reports is stored with its node and shown by ListNodes;
// a StartJob by hand of a job whose template (or version) the node does
// not offer is FailedPrecondition naming the template, the version and
// what the node has, and changes nothing; a worker that refuses the job
// anyway leaves its reason in the job record; a later hello without
// templates replaces the catalogue, and an invalid one is refused at
// registration and ignored in a hello.
func TestNodeTemplates_HelloListNodesAndStartJob(t *testing.T) {
	ctx := context.Background()
	_, c := startAgent(t, t.TempDir())
	reg, err := c.RegisterClusterNode(ctx, &managerpb.RegisterClusterNodeRequest{NodeName: "rack-1"})
	require.NoError(t, err)
	id := reg.GetNodeId().GetNodeId()
	node := &commonpb.NodeId{NodeId: id}

	w := newFakeWorker(t)
	res := &commonpb.NodeResources{Capacity: 4, Templates: []*commonpb.ProductTemplateOffer{
		{Name: "hello", Versions: []string{"1.0"}}, {Name: "ingest", Versions: []string{"2", "3"}}}}
	w.setResources(res)
	_, err = c.ClusterMemberRegister(ctx, &managerpb.ClusterMemberRegisterRequest{Token: reg.GetToken(), Address: "127.0.0.1", Port: w.port,
		Resources: &commonpb.NodeResources{Capacity: 4, Templates: []*commonpb.ProductTemplateOffer{{Name: "../etc", Versions: []string{"1"}}}}})
	requireCode(t, err, codes.InvalidArgument, "resources.templates[0]", "name")
	first, err := c.ClusterMemberRegister(ctx, &managerpb.ClusterMemberRegisterRequest{Token: reg.GetToken(), Address: "127.0.0.1", Port: w.port, Resources: res})
	require.NoError(t, err)
	w.setCredential(id, first.GetNodeCredential())
	eventually(t, "online", func() bool { return slots(t, c)[id].GetActive() })
	require.True(t, proto.Equal(res, nodeInfo(t, c, id).GetResources()), "resources %v", nodeInfo(t, c, id).GetResources())

	// By hand on a node without the version: refused, nothing recorded or sent.
	_, err = c.CreateJob(ctx, templateJob("v2", "hello", "2.0"))
	require.NoError(t, err)
	_, err = c.StartJob(ctx, &managerpb.StartJobRequest{JobId: &commonpb.JobId{JobId: "v2"}, Role: "primary", NodeId: node})
	requireCode(t, err, codes.FailedPrecondition, "node "+id+" has no product template hello 2.0; it has: hello (1.0), ingest (2, 3)")
	r, err := c.JobById(ctx, &commonpb.JobId{JobId: "v2"})
	require.NoError(t, err)
	require.Empty(t, r.GetInstances())
	require.Equal(t, []string{"Created"}, jobHistoryKinds(r), "a refused start records nothing")
	require.Zero(t, w.provisions("v2"), "a refused start sends nothing to the worker")

	// The version the node has: started.
	_, err = c.CreateJob(ctx, templateJob("v1", "hello", "1.0"))
	require.NoError(t, err)
	_, err = c.StartJob(ctx, &managerpb.StartJobRequest{JobId: &commonpb.JobId{JobId: "v1"}, Role: "primary", NodeId: node})
	require.NoError(t, err)
	eventually(t, "the worker runs v1", func() bool { return w.isRunning("v1", "primary") })

	// A worker whose catalogue changed since its hello refuses the job: its
	// reason is the job's last failure, word for word.
	const why = "worker: product template unavailable: ingest 3 is not in the catalogue; it has: ingest (2)"
	w.mu.Lock()
	w.refuse = func(j *workerpb.WorkerJob) string {
		if j.GetProductTemplate().GetName() == "ingest" {
			return why
		}
		return ""
	}
	w.mu.Unlock()
	_, err = c.CreateJob(ctx, templateJob("in3", "ingest", "3"))
	require.NoError(t, err)
	_, err = c.StartJob(ctx, &managerpb.StartJobRequest{JobId: &commonpb.JobId{JobId: "in3"}, Role: "primary", NodeId: node})
	require.NoError(t, err)
	eventually(t, "the refusal recorded", func() bool {
		r, err := c.JobById(ctx, &commonpb.JobId{JobId: "in3"})
		require.NoError(t, err)
		return len(r.GetLastFailures()) == 1 && len(r.GetInstances()) == 0
	})
	r, err = c.JobById(ctx, &commonpb.JobId{JobId: "in3"})
	require.NoError(t, err)
	require.Equal(t, why, r.GetLastFailures()[0].GetReason())

	// A new session whose hello reports no templates replaces them; one
	// with an invalid catalogue is ignored (the stored one stays).
	plain := &commonpb.NodeResources{Capacity: 4}
	for _, tc := range []struct {
		hello, want *commonpb.NodeResources
	}{
		{plain, plain},
		{&commonpb.NodeResources{Capacity: 4, Templates: []*commonpb.ProductTemplateOffer{{Name: "hello"}}}, plain},
	} {
		w.setResources(tc.hello)
		sessions := w.sessionCount()
		_, err = c.ClusterMemberRegister(ctx, &managerpb.ClusterMemberRegisterRequest{NodeCredential: first.GetNodeCredential(), Address: "127.0.0.1", Port: w.port})
		require.NoError(t, err)
		eventually(t, "a new session", func() bool { return w.sessionCount() > sessions && slots(t, c)[id].GetActive() })
		eventually(t, "the hello's resources", func() bool { return proto.Equal(tc.want, nodeInfo(t, c, id).GetResources()) })
	}
	_, err = c.StopJob(ctx, &managerpb.StopJobRequest{JobId: &commonpb.JobId{JobId: "v1"}, Role: "primary", NodeId: node})
	require.NoError(t, err)
	eventually(t, "v1 stopped", func() bool { return len(instanceOf(t, c, "v1")) == 0 })
	_, err = c.StartJob(ctx, &managerpb.StartJobRequest{JobId: &commonpb.JobId{JobId: "v1"}, Role: "primary", NodeId: node})
	requireCode(t, err, codes.FailedPrecondition, "node "+id+" has no product template hello 1.0; it has: none")
}

// TestNodeTemplates_ProvisionWaitingForHello: StartJobs sent while a
// restarted manager's session to the node waits for the worker's hello
// (held by the test) are judged on the catalogue of that hello, not the
// one stored before: the worker was upgraded from hello 1.0 to 2.0
// meanwhile. The starts are sent before the hello is released, so they
// normally wait in the node grain's queue (flushProvisions); should one
// arrive after the hello it is judged on the same record, so the test
// holds on either path.
func TestNodeTemplates_ProvisionWaitingForHello(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	a, c := startAgent(t, dir)
	offers := func(v string) *commonpb.NodeResources {
		return &commonpb.NodeResources{Capacity: 4, Templates: []*commonpb.ProductTemplateOffer{{Name: "hello", Versions: []string{v}}}}
	}
	reg, err := c.RegisterClusterNode(ctx, &managerpb.RegisterClusterNodeRequest{NodeName: "w1"})
	require.NoError(t, err)
	id := reg.GetNodeId().GetNodeId()
	w := newFakeWorker(t)
	w.setResources(offers("1.0"))
	resp, err := c.ClusterMemberRegister(ctx, &managerpb.ClusterMemberRegisterRequest{Token: reg.GetToken(), Address: "127.0.0.1", Port: w.port, Resources: offers("1.0")})
	require.NoError(t, err)
	w.setCredential(id, resp.GetNodeCredential())
	eventually(t, "online", func() bool { return nodeState(t, c, id) == managerpb.NodeLifecycle_NODE_LIFECYCLE_STARTED })
	for _, j := range []*managerpb.Job{templateJob("new", "hello", "2.0"), templateJob("old", "hello", "1.0")} {
		_, err = c.CreateJob(ctx, j)
		require.NoError(t, err)
	}
	a.Shutdown()

	gate := make(chan struct{})
	w.mu.Lock()
	w.resources, w.helloGate = offers("2.0"), gate
	sessions := w.sessions
	w.mu.Unlock()
	_, c2 := startAgent(t, dir)
	node := &commonpb.NodeId{NodeId: id}
	errs := map[string]chan error{"new": make(chan error, 1), "old": make(chan error, 1)}
	for job, ch := range errs {
		go func() {
			_, err := c2.StartJob(ctx, &managerpb.StartJobRequest{JobId: &commonpb.JobId{JobId: job}, Role: "primary", NodeId: node})
			ch <- err
		}()
	}
	eventually(t, "the new manager's session opened", func() bool { return w.sessionCount() > sessions })
	close(gate)
	require.NoError(t, <-errs["new"])
	requireCode(t, <-errs["old"], codes.FailedPrecondition, "node "+id+" has no product template hello 1.0; it has: hello (2.0)")
	eventually(t, "the worker runs new", func() bool { return w.isRunning("new", "primary") })
	require.Zero(t, w.provisions("old"))
}
