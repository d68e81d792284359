package compat_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/norsk-oss/norsk-manager/cluster/pki"
	"github.com/norsk-oss/norsk-manager/proto/commonpb"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
	"github.com/norsk-oss/norsk-manager/test/testproc"
)

// mockNodeID is the node compat.mjs starts its job on.
const mockNodeID = "compat-mock-1"

// TestNorskAPI_Wire_1_0_384 runs compat.mjs — the published client package's
// own classes and grpc-js client — against a real norsk-manager whose mock
// node is a real worker (norsk-ctl --mode=worker without a token).
func TestNorskAPI_Wire_1_0_384(t *testing.T) {
	requireNodeModules(t)
	managerBin, ctlBin := buildBinaries(t)

	workerAddr := freeAddr(t)
	workerDir := filepath.Join(t.TempDir(), "worker")
	// A root worker runs its jobs as the job user, who must reach the
	// default --job-dir beside the state dir (docs/design/security.md).
	testproc.OpenTempDirs(t, workerDir)
	worker := startProcess(t, "worker", ctlBin, "--mode=worker",
		"--listen="+workerAddr, "--state-dir="+workerDir)
	waitFor(t, 20*time.Second, "the worker to listen on "+workerAddr, func() (bool, string) {
		c, err := net.DialTimeout("tcp", workerAddr, time.Second)
		if err != nil {
			return false, err.Error()
		}
		c.Close()
		return true, ""
	}, worker)

	apiAddr := freeAddr(t)
	manager := startProcess(t, "manager", managerBin,
		"--data-dir", filepath.Join(t.TempDir(), "manager"),
		"--api-addr", apiAddr,
		"--mock-worker-urls", workerAddr)
	conn := dial(t, apiAddr)
	waitServing(t, conn, manager)
	client := managerpb.NewManagerClient(conn)
	t.Cleanup(func() { stopLeftoverJobs(t, client) })

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := client.CreateMockNode(ctx, &managerpb.CreateMockNodeRequest{
		NodeId: &commonpb.NodeId{NodeId: mockNodeID}, Tags: map[string]string{"purpose": "compat"},
	}); err != nil {
		t.Fatalf("CreateMockNode %s: %v", mockNodeID, err)
	}
	waitFor(t, 20*time.Second, "mock node "+mockNodeID+" to be STARTED and connected", func() (bool, string) {
		return nodeStarted(client, mockNodeID)
	}, manager, worker)

	out, err := runNode(60*time.Second, "compat.mjs", apiAddr, mockNodeID)
	if err != nil {
		t.Fatalf("node compat.mjs %s %s: %v: the manager does not answer @norskvideo/norsk-api@1.0.384 as published; its checks:\n%s",
			apiAddr, mockNodeID, err, out)
	}
	logLines(t, "compat.mjs: ", out)
}

// dial returns an insecure client connection to addr that reconnects fast,
// closed when the test ends.
func dial(t *testing.T, addr string) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(addr,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: 20 * time.Millisecond, Multiplier: 1.6, MaxDelay: 200 * time.Millisecond},
			MinConnectTimeout: time.Second,
		}))
	if err != nil {
		t.Fatalf("grpc.NewClient(%s): %v", addr, err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// waitServing waits, through grpc.health.v1 Watch, until the manager's
// Manager service is SERVING; it fails the test at once if the manager
// exits.
func waitServing(t *testing.T, conn *grpc.ClientConn, manager *process) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	stopWatching := make(chan struct{})
	defer close(stopWatching)
	go func() {
		select {
		case <-manager.exited:
			cancel()
		case <-stopWatching:
		}
	}()
	service := managerpb.Manager_ServiceDesc.ServiceName
	stream, err := healthpb.NewHealthClient(conn).Watch(ctx, &healthpb.HealthCheckRequest{Service: service}, grpc.WaitForReady(true))
	for err == nil {
		var resp *healthpb.HealthCheckResponse
		if resp, err = stream.Recv(); err == nil && resp.GetStatus() == healthpb.HealthCheckResponse_SERVING {
			return
		}
	}
	if exited := manager.exitedError(); exited != nil {
		t.Fatalf("waiting for health of %s: %v", service, exited)
	}
	t.Fatalf("waiting for health of %s to be SERVING: %v", service, err)
}

// nodeStarted reports whether ListNodes shows id STARTED and connected.
func nodeStarted(client managerpb.ManagerClient, id string) (bool, string) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	r, err := client.ListNodes(ctx, &managerpb.ListNodesRequest{})
	if err != nil {
		return false, fmt.Sprintf("ListNodes: %v", err)
	}
	for _, n := range r.GetNodes() {
		if n.GetMetadata().GetNodeId().GetNodeId() == id {
			return n.GetState() == managerpb.NodeLifecycle_NODE_LIFECYCLE_STARTED && n.GetConnected(),
				fmt.Sprintf("state %s, connected %t", n.GetState(), n.GetConnected())
		}
	}
	return false, fmt.Sprintf("ListNodes has no node %s", id)
}

// stopLeftoverJobs completes every job that still has an instance, so that
// a failed run leaves no service processes behind once the worker is
// killed (they run in their own sessions and outlive it). Best effort: it
// only logs.
func stopLeftoverJobs(t *testing.T, client managerpb.ManagerClient) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	running := func() ([]string, error) {
		stream, err := client.JobSearch(ctx, &managerpb.JobSearchRequest{})
		if err != nil {
			return nil, err
		}
		var ids []string
		for {
			cj, err := stream.Recv()
			if errors.Is(err, io.EOF) {
				return ids, nil
			}
			if err != nil {
				return ids, err
			}
			if len(cj.GetInstances()) > 0 {
				ids = append(ids, cj.GetJob().GetJobId().GetJobId())
			}
		}
	}
	ids, err := running()
	for _, id := range ids {
		if _, err := client.CompleteJob(ctx, &commonpb.JobId{JobId: id}); err != nil {
			t.Logf("cleanup: CompleteJob %s: %v", id, err)
		}
	}
	for len(ids) > 0 && err == nil && ctx.Err() == nil {
		time.Sleep(50 * time.Millisecond) // polling interval
		ids, err = running()
	}
	if len(ids) > 0 || err != nil {
		t.Logf("cleanup: jobs still running on the worker: %v (%v)", ids, err)
	}
}

// TestNorskAPI_Wire_1_0_384_TLSToken runs the same compat.mjs checks with
// security on (issue 12 §5): the manager serves mutual TLS (--tls-cert,
// --tls-key, --tls-ca) with ACLs (--acl), the worker serves its dial-back
// port with a worker certificate, and the published client connects with
// grpc-js's own SSL channel credentials and an operator token passed as
// call metadata.
func TestNorskAPI_Wire_1_0_384_TLSToken(t *testing.T) {
	requireNodeModules(t)
	managerBin, ctlBin := buildBinaries(t)
	dir := t.TempDir()
	ca, caFile := pki.TestCA(t, dir)
	_, server := pki.TestIssue(t, ca, dir, "server", pki.CertOptions{Role: pki.RoleServer})
	_, worker := pki.TestIssue(t, ca, dir, "worker", pki.CertOptions{Role: pki.RoleWorker})
	_, cli := pki.TestIssue(t, ca, dir, "client", pki.CertOptions{Role: pki.RoleClient})

	workerAddr := freeAddr(t)
	testproc.OpenTempDirs(t, dir)
	workerProc := startProcess(t, "worker", ctlBin, "--mode=worker", "--ca-cert", caFile,
		"--tls-cert", worker.Cert, "--tls-key", worker.Key,
		"--listen="+workerAddr, "--state-dir="+filepath.Join(dir, "worker"))
	waitFor(t, 20*time.Second, "the worker to listen on "+workerAddr, func() (bool, string) {
		c, err := net.DialTimeout("tcp", workerAddr, time.Second)
		if err != nil {
			return false, err.Error()
		}
		c.Close()
		return true, ""
	}, workerProc)

	apiAddr := freeAddr(t)
	manager := startProcess(t, "manager", managerBin,
		"--data-dir", filepath.Join(dir, "manager"), "--api-addr", apiAddr, "--mock-worker-urls", workerAddr,
		"--tls-cert", server.Cert, "--tls-key", server.Key, "--tls-ca", caFile, "--acl")
	pair, err := tls.LoadX509KeyPair(cli.Cert, cli.Key)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(ca.CertPEM)
	tlsConf := &tls.Config{RootCAs: roots, Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12}
	anon, err := grpc.NewClient(apiAddr, grpc.WithTransportCredentials(credentials.NewTLS(tlsConf)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { anon.Close() })
	waitServing(t, anon, manager)

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	root, err := managerpb.NewManagerClient(anon).AclBootstrap(ctx, &managerpb.AclBootstrapRequest{})
	if err != nil {
		t.Fatalf("AclBootstrap: %v", err)
	}
	mgmt := metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+root.GetSecretId())
	op, err := managerpb.NewManagerClient(anon).AclTokenCreate(mgmt, &managerpb.AclTokenCreateRequest{Name: "compat", Role: "operator"})
	if err != nil {
		t.Fatalf("AclTokenCreate operator: %v", err)
	}
	tokenFile := filepath.Join(dir, "operator.token")
	if err := os.WriteFile(tokenFile, []byte(op.GetSecretId()+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient(apiAddr, grpc.WithTransportCredentials(credentials.NewTLS(tlsConf)),
		grpc.WithPerRPCCredentials(bearer(op.GetSecretId())))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	client := managerpb.NewManagerClient(conn)
	t.Cleanup(func() { stopLeftoverJobs(t, client) })

	if _, err := managerpb.NewManagerClient(anon).ListNodes(ctx, &managerpb.ListNodesRequest{}); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("ListNodes without a token: %v, want Unauthenticated", err)
	}
	if _, err := client.CreateMockNode(ctx, &managerpb.CreateMockNodeRequest{
		NodeId: &commonpb.NodeId{NodeId: mockNodeID}, Tags: map[string]string{"purpose": "compat"},
	}); err != nil {
		t.Fatalf("CreateMockNode %s: %v", mockNodeID, err)
	}
	waitFor(t, 20*time.Second, "mock node "+mockNodeID+" to be STARTED and connected", func() (bool, string) {
		return nodeStarted(client, mockNodeID)
	}, manager, workerProc)

	out, err := runNode(60*time.Second, "compat.mjs", apiAddr, mockNodeID,
		"--ca", caFile, "--cert", cli.Cert, "--key", cli.Key, "--token-file", tokenFile)
	if err != nil {
		t.Fatalf("node compat.mjs over mutual TLS with an operator token: %v: the manager does not answer @norskvideo/norsk-api@1.0.384 so secured; its checks:\n%s",
			err, out)
	}
	logLines(t, "compat.mjs: ", out)
}

// bearer is gRPC per-RPC credentials sending an ACL token.
type bearer string

func (b bearer) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + string(b)}, nil
}

func (bearer) RequireTransportSecurity() bool { return true }
