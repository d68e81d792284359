package agent

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/norsk-oss/norsk-manager/client"
	"github.com/norsk-oss/norsk-manager/proto/commonpb"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
)

// aclAgent starts a single manager with ACLs as on says.
func aclAgent(t *testing.T, on bool) *Agent {
	t.Helper()
	cfg := DevConfig(t.TempDir())
	cfg.Store.SyncWrites = false
	cfg.ACL = on
	a, err := New(cfg)
	require.NoError(t, err)
	require.NoError(t, a.Start())
	t.Cleanup(a.Shutdown)
	return a
}

// aclClient connects to a with token (none if "").
func aclClient(t *testing.T, a *Agent, token string) *client.NorskManager {
	t.Helper()
	m, err := client.Connect(context.Background(), client.Settings{URL: a.APIAddr(), Timeout: 10 * time.Second, Token: token})
	require.NoError(t, err)
	t.Cleanup(func() { m.Close() })
	return m
}

// TestAgent_ACL_Bootstrap: the first management token comes once; a
// second bootstrap is refused, naming the reset index and the file; with
// that index in the reset file a bootstrap is accepted again, and the file
// is gone after it.
func TestAgent_ACL_Bootstrap(t *testing.T) {
	ctx := context.Background()
	a := aclAgent(t, true)
	anon := aclClient(t, a, "")
	_, err := anon.Version(ctx)
	requireCode(t, err, codes.Unauthenticated, "requires an ACL token")

	first, err := anon.AclBootstrap(ctx)
	require.NoError(t, err)
	require.NotEmpty(t, first.GetSecretId())
	require.Equal(t, "management", first.GetRole())
	require.True(t, first.GetBootstrap())

	reset := filepath.Join(a.cfg.Store.Dir, ACLResetFileName)
	_, err = anon.AclBootstrap(ctx)
	requireCode(t, err, codes.FailedPrecondition, "already bootstrapped (reset index 1)", "write 1 into "+reset)
	require.NoError(t, os.WriteFile(reset, []byte("7\n"), 0o600))
	_, err = anon.AclBootstrap(ctx)
	requireCode(t, err, codes.FailedPrecondition, `holds "7", not 1`)

	require.NoError(t, os.WriteFile(reset, []byte("1\n"), 0o600))
	second, err := anon.AclBootstrap(ctx)
	require.NoError(t, err)
	require.NotEqual(t, first.GetSecretId(), second.GetSecretId())
	require.NoFileExists(t, reset)
	_, err = anon.AclBootstrap(ctx)
	requireCode(t, err, codes.FailedPrecondition, "reset index 2")

	list, err := aclClient(t, a, first.GetSecretId()).AclTokenList(ctx)
	require.NoError(t, err)
	require.Len(t, list.GetTokens(), 2, "the first bootstrap token is kept")
	require.Equal(t, uint64(2), list.GetBootstrapIndex())
	for _, tok := range list.GetTokens() {
		require.Empty(t, tok.GetSecretId(), "a listing shows no secret")
	}
}

// TestAgent_ACL_Roles: what each role may do, refusals change nothing,
// slot tokens are blanked for a read token, revoked and expired tokens
// are refused.
func TestAgent_ACL_Roles(t *testing.T) {
	ctx := context.Background()
	a := aclAgent(t, true)
	boot, err := aclClient(t, a, "").AclBootstrap(ctx)
	require.NoError(t, err)
	mgmt := aclClient(t, a, boot.GetSecretId())
	opTok, err := mgmt.AclTokenCreate(ctx, "ci", "operator", 0)
	require.NoError(t, err)
	rdTok, err := mgmt.AclTokenCreate(ctx, "dash", "read", time.Hour)
	require.NoError(t, err)
	require.NotNil(t, rdTok.GetExpireTime())
	evTok, err := mgmt.AclTokenCreate(ctx, "exporter", "events", 0)
	require.NoError(t, err)
	_, err = mgmt.AclTokenCreate(ctx, "x", "admin", 0)
	requireCode(t, err, codes.InvalidArgument, "role", "unknown role")

	op, rd, ev := aclClient(t, a, opTok.GetSecretId()), aclClient(t, a, rdTok.GetSecretId()), aclClient(t, a, evTok.GetSecretId())
	job := &managerpb.Job{JobId: &commonpb.JobId{JobId: "j1"}, Services: oneService()}
	_, err = rd.CreateJob(ctx, job)
	requireCode(t, err, codes.PermissionDenied, "CreateJob needs a token of role operator or management", `"dash"`)
	_, err = rd.JobByID(ctx, "j1")
	requireCode(t, err, codes.NotFound) // the refused create changed nothing
	_, err = op.CreateJob(ctx, job)
	require.NoError(t, err)
	_, err = rd.JobByID(ctx, "j1")
	require.NoError(t, err)
	_, err = ev.JobByID(ctx, "j1")
	requireCode(t, err, codes.PermissionDenied, "role read, operator or management")
	_, err = op.AclTokenCreate(ctx, "y", "management", 0)
	requireCode(t, err, codes.PermissionDenied, "role management")

	_, slotToken, err := op.RegisterClusterNode(ctx, "s1", nil)
	require.NoError(t, err)
	require.NotEmpty(t, slotToken)
	seen, err := op.ListClusterNodes(ctx)
	require.NoError(t, err)
	require.Equal(t, slotToken, seen[0].GetToken(), "an operator sees the registration token")
	seen, err = rd.ListClusterNodes(ctx)
	require.NoError(t, err)
	require.Len(t, seen, 1)
	require.Empty(t, seen[0].GetToken(), "a read token sees no registration token")

	self, err := rd.AclTokenSelf(ctx)
	require.NoError(t, err)
	require.Equal(t, rdTok.GetAccessorId(), self.GetAccessorId())
	require.Empty(t, self.GetSecretId())

	require.NoError(t, mgmt.AclTokenRevoke(ctx, opTok.GetAccessorId()))
	_, err = op.JobByID(ctx, "j1")
	requireCode(t, err, codes.Unauthenticated, "unknown ACL token")
	err = mgmt.AclTokenRevoke(ctx, opTok.GetAccessorId())
	requireCode(t, err, codes.NotFound)
	err = mgmt.AclTokenRevoke(ctx, boot.GetAccessorId())
	requireCode(t, err, codes.FailedPrecondition, "last management token")

	short, err := mgmt.AclTokenCreate(ctx, "short", "read", time.Millisecond)
	require.NoError(t, err)
	sc := aclClient(t, a, short.GetSecretId())
	eventually(t, "the short token expires", func() bool {
		_, err := sc.JobByID(ctx, "j1")
		return status.Code(err) == codes.Unauthenticated && status.Convert(err).Message() != "" &&
			containsAll(status.Convert(err).Message(), "expired at")
	})
}

// TestAgent_ACL_Off: without --acl no token is needed and the ACL methods
// say ACLs are off.
func TestAgent_ACL_Off(t *testing.T) {
	ctx := context.Background()
	a := aclAgent(t, false)
	m := aclClient(t, a, "")
	_, err := m.Version(ctx)
	require.NoError(t, err)
	_, err = m.AclBootstrap(ctx)
	requireCode(t, err, codes.FailedPrecondition, "ACLs are off", "--acl")
}

func containsAll(s string, parts ...string) bool {
	for _, p := range parts {
		if !strings.Contains(s, p) {
			return false
		}
	}
	return true
}

// TestAgent_ACL_Audited: with ACLs on, each accepted ACL change and each
// accepted job change is an audit entry naming the token that made it
// (bootstrap: the anonymous caller); a refused call writes none.
func TestAgent_ACL_Audited(t *testing.T) {
	ctx := context.Background()
	a := aclAgent(t, true)
	boot, err := aclClient(t, a, "").AclBootstrap(ctx)
	require.NoError(t, err)
	mgmt := aclClient(t, a, boot.GetSecretId())
	opTok, err := mgmt.AclTokenCreate(ctx, "ci", "operator", 0)
	require.NoError(t, err)
	rdTok, err := mgmt.AclTokenCreate(ctx, "dash", "read", 0)
	require.NoError(t, err)
	op, rd := aclClient(t, a, opTok.GetSecretId()), aclClient(t, a, rdTok.GetSecretId())
	job := &managerpb.Job{JobId: &commonpb.JobId{JobId: "audited"}, Services: oneService()}
	_, err = rd.CreateJob(ctx, job)
	requireCode(t, err, codes.PermissionDenied)
	_, err = op.CreateJob(ctx, job)
	require.NoError(t, err)
	require.NoError(t, mgmt.AclTokenRevoke(ctx, rdTok.GetAccessorId()))
	_, err = op.SnapshotSave(ctx, io.Discard, nil)
	requireCode(t, err, codes.PermissionDenied)
	_, err = mgmt.SnapshotSave(ctx, io.Discard, nil)
	require.NoError(t, err)

	entries, err := mgmt.ListAuditEntries(ctx, nil)
	require.NoError(t, err)
	var got []string
	for _, e := range entries.GetEntries() {
		got = append(got, e.GetKind()+" by "+e.GetWho())
	}
	require.Equal(t, []string{
		"acl.bootstrap by anonymous",
		"acl.token_create by " + boot.GetName(),
		"acl.token_create by " + boot.GetName(),
		"job.create by ci",
		"acl.token_revoke by " + boot.GetName(),
		"snapshot.save by " + boot.GetName(),
	}, got)
}
