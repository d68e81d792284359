package client_test

import (
	"context"
	"errors"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/norsk-oss/norsk-manager/client"
	"github.com/norsk-oss/norsk-manager/client/clienttest"
	"github.com/norsk-oss/norsk-manager/proto/commonpb"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
)

func testJob(id string) *managerpb.Job {
	return &managerpb.Job{JobId: &commonpb.JobId{JobId: id}, Tags: map[string]string{"example": id}}
}

// wantCode fails the test unless err has gRPC code want.
func wantCode(t *testing.T, what string, err error, want codes.Code) {
	t.Helper()
	if got := status.Code(err); got != want {
		t.Fatalf("%s: code %v (%v), want %v", what, got, err, want)
	}
}

func TestNorskManager_JobLifecycle(t *testing.T) {
	_, _, m := serveFake(t)
	ctx := context.Background()

	hash, err := m.CreateJob(ctx, testJob("j1"))
	if err != nil || hash == 0 {
		t.Fatalf("CreateJob = %d, %v", hash, err)
	}
	_, err = m.CreateJob(ctx, testJob("j1"))
	wantCode(t, "CreateJob again", err, codes.AlreadyExists)

	stale := testJob("j1")
	stale.CurrentHash = hash + 1
	_, err = m.UpdateJob(ctx, stale)
	wantCode(t, "UpdateJob with a stale hash", err, codes.FailedPrecondition)

	upd := testJob("j1")
	upd.CurrentHash, upd.Description = hash, "updated"
	hash2, err := m.UpdateJob(ctx, upd)
	if err != nil || hash2 == hash {
		t.Fatalf("UpdateJob = %d, %v (old hash %d)", hash2, err, hash)
	}

	if err := m.CreateMockNode(ctx, "n1", map[string]string{"pool": "a"}); err != nil {
		t.Fatalf("CreateMockNode: %v", err)
	}
	if err := m.StartJob(ctx, "j1", "primary", "n1"); err != nil {
		t.Fatalf("StartJob: %v", err)
	}
	got, err := m.JobByID(ctx, "j1")
	if err != nil {
		t.Fatalf("JobByID: %v", err)
	}
	if got.GetJob().GetJob().GetDescription() != "updated" || len(got.GetInstances()) != 1 {
		t.Fatalf("JobByID = %v, want the updated job with one instance", got)
	}
	nodes, err := m.ListNodes(ctx)
	if err != nil || len(nodes) != 1 || len(nodes[0].GetInstances()) != 1 {
		t.Fatalf("ListNodes = %v, %v; want n1 with one instance", nodes, err)
	}

	wantCode(t, "StopJob of another role", m.StopJob(ctx, "j1", "backup", "n1"), codes.NotFound)
	if err := m.StopJob(ctx, "j1", "primary", "n1"); err != nil {
		t.Fatalf("StopJob: %v", err)
	}
	if err := m.CompleteJob(ctx, "j1"); err != nil {
		t.Fatalf("CompleteJob: %v", err)
	}
	if err := m.TerminateNode(ctx, "n1"); err != nil {
		t.Fatalf("TerminateNode: %v", err)
	}
	if err := m.DeleteJob(ctx, "j1"); err != nil {
		t.Fatalf("DeleteJob: %v", err)
	}
	_, err = m.JobByID(ctx, "j1")
	wantCode(t, "JobByID after delete", err, codes.NotFound)
}

func TestNorskManager_ClusterSlots(t *testing.T) {
	_, _, m := serveFake(t)
	ctx := context.Background()
	id, token, err := m.RegisterClusterNode(ctx, "rack-1", map[string]string{"site": "x"})
	if err != nil || id == "" || token == "" {
		t.Fatalf("RegisterClusterNode = %q, %q, %v", id, token, err)
	}
	_, err = m.ClusterMemberRegister(ctx, &managerpb.ClusterMemberRegisterRequest{Token: "wrong"})
	wantCode(t, "ClusterMemberRegister with a bad token", err, codes.Unauthenticated)
	resp, err := m.ClusterMemberRegister(ctx, &managerpb.ClusterMemberRegisterRequest{Token: token, Address: "127.0.0.1", Port: 7001})
	if err != nil || resp.GetNodeId().GetNodeId() != string(id) {
		t.Fatalf("ClusterMemberRegister = %v, %v", resp, err)
	}
	slots, err := m.ListClusterNodes(ctx)
	if err != nil || len(slots) != 1 || !slots[0].GetActive() || slots[0].GetPort() != 7001 {
		t.Fatalf("ListClusterNodes = %v, %v; want one active slot on port 7001", slots, err)
	}
	if err := m.DeregisterClusterNode(ctx, id); err != nil {
		t.Fatalf("DeregisterClusterNode: %v", err)
	}
	wantCode(t, "DeregisterClusterNode again", m.DeregisterClusterNode(ctx, id), codes.NotFound)
}

func TestNorskManager_VersionAndStatusChannel(t *testing.T) {
	_, _, m := serveFake(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	v, err := m.Version(ctx)
	if err != nil || v.GetManagerVersion() != clienttest.ManagerVersion {
		t.Fatalf("Version = %v, %v", v, err)
	}
	for ev, err := range m.CreateStatusChannel(ctx) {
		if err != nil {
			t.Fatalf("CreateStatusChannel: %v", err)
		}
		if ev.GetHello() == nil {
			t.Fatalf("first status event = %v, want hello", ev)
		}
		break
	}
}

// TestNorskManager_ClientSideValidation checks that obviously bad requests
// fail with InvalidArgument before anything is sent: the fake fails every
// call with Internal, so a request that reached it would say so.
func TestNorskManager_ClientSideValidation(t *testing.T) {
	fake, _, m := serveFake(t)
	fake.Fail("", status.Error(codes.Internal, "the request reached the manager"))
	ctx := context.Background()
	cases := []struct {
		name   string
		method string
		call   func() error
	}{
		{"CreateJob nil", "CreateJob", func() error { _, err := m.CreateJob(ctx, nil); return err }},
		{"CreateJob no id", "CreateJob", func() error { _, err := m.CreateJob(ctx, &managerpb.Job{}); return err }},
		{"UpdateJob no id", "UpdateJob", func() error { _, err := m.UpdateJob(ctx, &managerpb.Job{}); return err }},
		{"DeleteJob", "DeleteJob", func() error { return m.DeleteJob(ctx, "") }},
		{"JobByID", "JobById", func() error { _, err := m.JobByID(ctx, ""); return err }},
		{"JobSearch nil filter", "JobSearch", func() error { _, err := m.JobSearch(ctx, nil); return err }},
		{"JobSearch empty filter", "JobSearch", func() error { _, err := m.JobSearch(ctx, &managerpb.JobFilter{}); return err }},
		{"StartJob no role", "StartJob", func() error { return m.StartJob(ctx, "j", "", "n") }},
		{"StartJob no node", "StartJob", func() error { return m.StartJob(ctx, "j", "primary", "") }},
		{"StopJob no job", "StopJob", func() error { return m.StopJob(ctx, "", "primary", "n") }},
		{"CompleteJob", "CompleteJob", func() error { return m.CompleteJob(ctx, "") }},
		{"TerminateNode", "TerminateNode", func() error { return m.TerminateNode(ctx, "") }},
		{"CordonNode", "CordonNode", func() error { return m.CordonNode(ctx, "", "why") }},
		{"UncordonNode", "UncordonNode", func() error { return m.UncordonNode(ctx, "") }},
		{"DrainNode", "DrainNode", func() error { return m.DrainNode(ctx, "", "") }},
		{"MigrateJob no job", "MigrateJob", func() error { _, err := m.MigrateJob(ctx, "", "primary", client.AnyNode, ""); return err }},
		{"MigrateJob no role", "MigrateJob", func() error { _, err := m.MigrateJob(ctx, "j", "", client.AnyNode, ""); return err }},
		{"AbortMigration no target", "AbortMigration", func() error { return m.AbortMigration(ctx, "j", "primary", "", "") }},
		{"CreateMockNode", "CreateMockNode", func() error { return m.CreateMockNode(ctx, "", nil) }},
		{"CreateAwsNode", "CreateAwsNode", func() error { return m.CreateAwsNode(ctx, nil) }},
		{"CreateOciNode", "CreateOciNode", func() error { return m.CreateOciNode(ctx, nil) }},
		{"UpdatePhysicalNode", "UpdatePhysicalNode", func() error { return m.UpdatePhysicalNode(ctx, "", "1") }},
		{"RegisterClusterNode", "RegisterClusterNode", func() error { _, _, err := m.RegisterClusterNode(ctx, "", nil); return err }},
		{"DeregisterClusterNode", "DeregisterClusterNode", func() error { return m.DeregisterClusterNode(ctx, "") }},
		{"ClusterMemberRegister", "ClusterMemberRegister", func() error { _, err := m.ClusterMemberRegister(ctx, nil); return err }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.call()
			wantCode(t, tc.name, err, codes.InvalidArgument)
			ce, ok := errors.AsType[*client.CallError](err)
			if !ok || ce.Method != tc.method {
				t.Fatalf("error %v is not a *CallError for %s", err, tc.method)
			}
		})
	}
}

// TestNorskManager_ErrorPassing checks that the manager's status reaches
// the caller unchanged, wrapped in a *CallError naming the RPC.
func TestNorskManager_ErrorPassing(t *testing.T) {
	fake, _, m := serveFake(t)
	ctx := context.Background()
	cases := []struct {
		method string
		code   codes.Code
		call   func() error
	}{
		{"JobById", codes.PermissionDenied, func() error { _, err := m.JobByID(ctx, "x"); return err }},
		{"CreateJob", codes.Unavailable, func() error { _, err := m.CreateJob(ctx, testJob("x")); return err }},
		{"JobSearch", codes.ResourceExhausted, func() error { _, err := m.JobSearch(ctx); return err }},
		{"StartJob", codes.FailedPrecondition, func() error { return m.StartJob(ctx, "x", "primary", "n") }},
		{"CreateMockNode", codes.ResourceExhausted, func() error { return m.CreateMockNode(ctx, "n", nil) }},
		{"ListClusterNodes", codes.Internal, func() error { _, err := m.ListClusterNodes(ctx); return err }},
		{"Version", codes.Unauthenticated, func() error { _, err := m.Version(ctx); return err }},
	}
	for _, tc := range cases {
		t.Run(tc.method, func(t *testing.T) {
			msg := "injected " + tc.code.String()
			fake.Fail(tc.method, status.Error(tc.code, msg))
			defer fake.Fail(tc.method, nil)
			err := tc.call()
			wantCode(t, tc.method, err, tc.code)
			if got := status.Convert(err).Message(); got != msg {
				t.Errorf("message %q, want %q", got, msg)
			}
			ce, ok := errors.AsType[*client.CallError](err)
			if !ok || ce.Method != tc.method {
				t.Errorf("error %v is not a *CallError for %s", err, tc.method)
			}
		})
	}
	// Unimplemented RPCs of the fake come back as such.
	err := m.CreateAwsNode(ctx, &managerpb.CreateAwsNodeRequest{})
	wantCode(t, "CreateAwsNode", err, codes.Unimplemented)
}

func TestNorskManager_Failover_FirstDown(t *testing.T) {
	fake := clienttest.NewManager(nil)
	up := clienttest.Serve(t, fake, "127.0.0.1:0")
	m := connect(t, clienttest.UnusedAddr(t), up.Addr)
	ctx := context.Background()
	for i := range 5 {
		if _, err := m.Version(ctx); err != nil {
			t.Fatalf("Version #%d: %v", i, err)
		}
		if _, err := m.CreateJob(ctx, testJob("j"+string(rune('a'+i)))); err != nil {
			t.Fatalf("CreateJob #%d: %v", i, err)
		}
	}
}

func TestNorskManager_Failover_ManagerStops(t *testing.T) {
	fake := clienttest.NewManager(nil)
	a := clienttest.Serve(t, fake, "127.0.0.1:0")
	b := clienttest.Serve(t, fake, "127.0.0.1:0")
	m := connect(t, a.Addr, b.Addr)
	ctx := context.Background()
	for i := range 4 {
		if _, err := m.Version(ctx); err != nil {
			t.Fatalf("Version #%d with both up: %v", i, err)
		}
	}
	a.Stop()
	for i := range 6 {
		if _, err := m.ListNodes(ctx); err != nil {
			t.Fatalf("ListNodes #%d after the first manager stopped: %v", i, err)
		}
	}
}

// TestNorskManager_Failover_Unavailable checks that a read answered with
// Unavailable (a manager without quorum) is retried on the other manager.
func TestNorskManager_Failover_Unavailable(t *testing.T) {
	partitioned := clienttest.NewManager(nil)
	partitioned.Fail("", status.Error(codes.Unavailable, "no quorum"))
	a := clienttest.Serve(t, partitioned, "127.0.0.1:0")
	b := clienttest.Serve(t, clienttest.NewManager(nil), "127.0.0.1:0")
	m := connect(t, a.Addr, b.Addr)
	ctx := context.Background()
	for i := range 6 {
		if _, err := m.Version(ctx); err != nil {
			t.Fatalf("Version #%d: %v", i, err)
		}
		if _, err := m.JobSearch(ctx); err != nil {
			t.Fatalf("JobSearch #%d: %v", i, err)
		}
	}
}

func TestNorskManager_AllDown(t *testing.T) {
	m := connect(t, clienttest.UnusedAddr(t))
	_, err := m.Version(context.Background())
	wantCode(t, "Version with no manager", err, codes.Unavailable)
}
