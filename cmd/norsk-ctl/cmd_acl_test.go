package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/norsk-oss/norsk-manager/cluster/agent"
)

// startACLManager starts a real single manager with --acl.
func startACLManager(t *testing.T) string {
	t.Helper()
	cfg := agent.DevConfig(t.TempDir())
	cfg.Store.SyncWrites = false
	cfg.Store.GCInterval = 0
	cfg.ACL = true
	a, err := agent.New(cfg)
	require.NoError(t, err)
	require.NoError(t, a.Start())
	t.Cleanup(a.Shutdown)
	return a.APIAddr()
}

var secretLine = regexp.MustCompile(`(?m)^secret\s+(\S+)$`)

// ctlSecret is the secret printed by acl bootstrap or acl token create.
func ctlSecret(t *testing.T, out string) string {
	t.Helper()
	m := secretLine.FindStringSubmatch(out)
	require.NotNil(t, m, "no secret in:\n%s", out)
	return m[1]
}

// TestCtl_ACL: bootstrap once, tokens from --token-file and NORSK_TOKEN,
// a read token refused a write (exit 7, naming the role) and shown no
// slot tokens, a revoked token refused.
func TestCtl_ACL(t *testing.T) {
	addr := startACLManager(t)
	r := runCtl(t, testCtx(), "", "--manager-url", addr, "slot", "list")
	require.Equal(t, ctlExitUnauthorised, r.code, r.stderr)
	require.Contains(t, r.stderr, "requires an ACL token")

	mgmt := ctlSecret(t, mustRun(t, addr, "acl", "bootstrap"))
	r = runCtl(t, testCtx(), "", "--manager-url", addr, "acl", "bootstrap")
	require.Equal(t, ctlExitPrecondition, r.code, r.stderr)
	require.Contains(t, r.stderr, "reset index 1")

	dir := t.TempDir()
	mgmtFile := filepath.Join(dir, "mgmt")
	require.NoError(t, os.WriteFile(mgmtFile, []byte(mgmt+"\n"), 0o600))
	withMgmt := func(args ...string) string {
		return mustRun(t, addr, append([]string{"--token-file", mgmtFile}, args...)...)
	}
	opSecret := ctlSecret(t, withMgmt("acl", "token", "create", "--name", "ci", "--role", "operator"))
	readOut := withMgmt("acl", "token", "create", "--name", "dash", "--role", "read", "--ttl", "24h")
	readSecret := ctlSecret(t, readOut)
	list := withMgmt("acl", "token", "list")
	require.Contains(t, list, "dash")
	require.NotContains(t, list, readSecret, "a listing shows no secret")
	require.NotContains(t, list, mgmt)

	t.Setenv(ctlEnvToken, opSecret)
	mustRun(t, addr, "slot", "register", "rack-1")
	require.Contains(t, mustRun(t, addr, "slot", "list", "-o", "json"), `"token"`, "an operator sees registration tokens")

	t.Setenv(ctlEnvToken, readSecret)
	require.Contains(t, mustRun(t, addr, "acl", "token", "self"), "dash")
	listed := mustRun(t, addr, "slot", "list", "-o", "json")
	require.Contains(t, listed, "rack-1")
	require.NotContains(t, listed, `"token"`, "a read token sees no registration token")
	r = runCtl(t, testCtx(), "", "--manager-url", addr, "slot", "register", "rack-2")
	require.Equal(t, ctlExitUnauthorised, r.code, r.stderr)
	require.Contains(t, r.stderr, "needs a token of role operator or management")
	r = runCtl(t, testCtx(), "", "--manager-url", addr, "acl", "token", "list")
	require.Equal(t, ctlExitUnauthorised, r.code, r.stderr)
	require.Contains(t, r.stderr, "role management")

	readID := regexp.MustCompile(`(?m)^accessor id\s+(\S+)$`).FindStringSubmatch(readOut)[1]
	require.Contains(t, withMgmt("acl", "token", "revoke", readID), "revoked")
	r = runCtl(t, testCtx(), "", "--manager-url", addr, "slot", "list")
	require.Equal(t, ctlExitUnauthorised, r.code, r.stderr)
	require.Contains(t, r.stderr, "unknown ACL token")

	r = runCtl(t, testCtx(), "", "--manager-url", addr, "--token-file", filepath.Join(dir, "missing"), "slot", "list")
	require.Equal(t, ctlExitUsage, r.code, r.stderr)
	require.True(t, strings.Contains(r.stderr, "--token-file"), r.stderr)
}
