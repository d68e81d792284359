package ha

// TestACL_ThreeManagers and its helpers. Helper names start with acl so
// that they never collide with the package's other helpers.

import (
	"context"
	"crypto/tls"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"

	"github.com/norsk-oss/norsk-manager/client"
	"github.com/norsk-oss/norsk-manager/cluster/pki"
	"github.com/norsk-oss/norsk-manager/proto/commonpb"
	"github.com/norsk-oss/norsk-manager/proto/internalpb"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
	"github.com/norsk-oss/norsk-manager/test/testproc"
)

// TestACL_ThreeManagers: three managers with --acl (issue 12 §2, §5).
// Concurrent bootstraps through all three give exactly one management
// token; a call without a token is Unauthenticated on every manager; a
// read token's write is PermissionDenied on every manager and changes
// nothing; a read token lists the slots without their registration
// tokens; a token revoked through one manager is refused by all three
// (each authenticates from its own replica), and an expired one too. ACLs
// in a cluster need mutual TLS: the managers' internal service on the API
// port refuses an operator's certificate of the same CA.
func TestACL_ThreeManagers(t *testing.T) {
	skipShort(t)
	dir := t.TempDir()
	ca, caFile := pki.TestCA(t, dir)
	_, server := pki.TestIssue(t, ca, dir, "server", pki.CertOptions{Role: pki.RoleServer})
	_, cli := pki.TestIssue(t, ca, dir, "client", pki.CertOptions{Role: pki.RoleClient})
	clientTLS, err := client.TLSFiles{CACert: caFile, ClientCert: cli.Cert, ClientKey: cli.Key}.Config()
	if err != nil {
		t.Fatal(err)
	}
	c := testproc.NewCluster(t, 3, "--acl", "--tls-cert", server.Cert, "--tls-key", server.Key, "--tls-ca", caFile)
	c.TLS = clientTLS
	for _, m := range c.Managers {
		m.TLS = clientTLS
	}
	c.StartAll()
	ctx := context.Background()
	aclInternalRefused(t, c.Managers[0], clientTLS)

	mgmt := aclBootstrapOnce(t, c.Managers)
	for _, m := range c.Managers {
		_, err := aclClient(t, "", m).Version(ctx)
		aclRequireCode(t, err, codes.Unauthenticated, m.Name+": Version without a token")
	}
	admin := aclClient(t, mgmt.GetSecretId(), c.Managers...)
	op, err := admin.AclTokenCreate(ctx, "ci", "operator", 0)
	aclNoError(t, err, "create the operator token")
	rd, err := admin.AclTokenCreate(ctx, "dash", "read", 0)
	aclNoError(t, err, "create the read token")
	_, slotToken, err := aclClient(t, op.GetSecretId(), c.Managers...).RegisterClusterNode(ctx, "rack-1", nil)
	aclNoError(t, err, "register a slot with the operator token")
	if slotToken == "" {
		t.Fatal("RegisterClusterNode answered no token")
	}

	for _, m := range c.Managers {
		r := aclClient(t, rd.GetSecretId(), m)
		_, err := r.CreateJob(ctx, &managerpb.Job{JobId: &commonpb.JobId{JobId: "acl-" + m.Name}, Services: []*commonpb.Service{{Name: "s", Command: "true"}}})
		aclRequireCode(t, err, codes.PermissionDenied, m.Name+": CreateJob with a read token")
		_, err = r.JobByID(ctx, client.JobID("acl-"+m.Name))
		aclRequireCode(t, err, codes.NotFound, m.Name+": the refused job")
		slots, err := r.ListClusterNodes(ctx)
		aclNoError(t, err, m.Name+": slot list with a read token")
		if len(slots) != 1 || slots[0].GetName() != "rack-1" || slots[0].GetToken() != "" {
			t.Fatalf("%s: a read token lists %v, want rack-1 without its token", m.Name, slots)
		}
	}

	start := time.Now()
	aclNoError(t, aclClient(t, mgmt.GetSecretId(), c.Managers[0]).AclTokenRevoke(ctx, op.GetAccessorId()), "revoke the operator token through "+c.Managers[0].Name)
	aclRefusedEverywhere(t, c.Managers, op.GetSecretId(), "the revoked token")
	t.Logf("revocation refused on all three managers %v after the revoke was sent", time.Since(start).Round(time.Millisecond))

	short, err := admin.AclTokenCreate(ctx, "short", "read", 500*time.Millisecond)
	aclNoError(t, err, "create a short-lived token")
	aclRefusedEverywhere(t, c.Managers, short.GetSecretId(), "the expired token")
	_, err = aclClient(t, short.GetSecretId(), c.Managers[0]).ListClusterNodes(ctx)
	if st := status.Convert(err); st.Code() != codes.Unauthenticated || !strings.Contains(st.Message(), "expired at") {
		t.Fatalf("the expired token: %v, want Unauthenticated saying it expired", err)
	}
}

// aclBootstrapOnce sends AclBootstrap through every manager at once and
// requires exactly one management token among the answers; the others
// must be FailedPrecondition (a bootstrap refused because another won). An
// Unavailable answer (a forwarded append during an election) is retried.
func aclBootstrapOnce(t *testing.T, ms []*testproc.Manager) *managerpb.AclToken {
	t.Helper()
	var mu sync.Mutex
	var won []*managerpb.AclToken
	var wg sync.WaitGroup
	for _, m := range ms {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cl := aclClient(t, "", m)
			deadline := time.Now().Add(formTimeout)
			for {
				tok, err := cl.AclBootstrap(context.Background())
				switch {
				case err == nil:
					mu.Lock()
					won = append(won, tok)
					mu.Unlock()
					return
				case status.Code(err) == codes.FailedPrecondition:
					return
				case isUnavailable(err) && time.Now().Before(deadline):
					continue
				}
				t.Errorf("%s: AclBootstrap: %v", m.Name, err)
				return
			}
		}()
	}
	wg.Wait()
	if len(won) != 1 {
		t.Fatalf("%d bootstraps succeeded, want exactly 1", len(won))
	}
	return won[0]
}

// aclRefusedEverywhere waits until every manager refuses secret as
// Unauthenticated (each from its own replica: no read barrier).
func aclRefusedEverywhere(t *testing.T, ms []*testproc.Manager, secret, what string) {
	t.Helper()
	for _, m := range ms {
		cl := aclClient(t, secret, m)
		testproc.Await(t, 10*time.Second, fmt.Sprintf("%s refused by %s", what, m.Name), func() error {
			_, err := cl.Version(context.Background())
			if status.Code(err) == codes.Unauthenticated {
				return nil
			}
			return fmt.Errorf("Version = %v", err)
		})
	}
}

// aclClient connects to ms (in order, failing over, with the TLS of ms[0]) with the token secret
// ("" for none).
func aclClient(t testing.TB, secret string, ms ...*testproc.Manager) *client.NorskManager {
	t.Helper()
	addrs := ""
	for i, m := range ms {
		if i > 0 {
			addrs += ","
		}
		addrs += m.APIAddr
	}
	cl, err := client.Connect(context.Background(), client.Settings{URL: addrs, Timeout: callTimeout, Token: secret, TLS: ms[0].TLS})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.Close() })
	return cl
}

func aclRequireCode(t *testing.T, err error, code codes.Code, what string) {
	t.Helper()
	if status.Code(err) != code {
		t.Fatalf("%s: %v, want %s", what, err, code)
	}
}

func aclNoError(t *testing.T, err error, what string) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// aclInternalRefused: the managers' internal service on m's API port
// refuses an operator's client certificate of the cluster CA (it does not
// carry server.norsk): only another manager may append to the log.
func aclInternalRefused(t *testing.T, m *testproc.Manager, cfg *tls.Config) {
	t.Helper()
	conn, err := grpc.NewClient(m.APIAddr, grpc.WithTransportCredentials(credentials.NewTLS(cfg)))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	_, err = internalpb.NewClusterClient(conn).Append(ctx, &internalpb.AppendCommand{})
	if st := status.Convert(err); st.Code() != codes.PermissionDenied || !strings.Contains(st.Message(), "managers of the cluster only") {
		t.Fatalf("Cluster.Append with an operator's certificate: %v, want PermissionDenied", err)
	}
}
