package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/norsk-oss/norsk-manager/client/clienttest"
	"github.com/norsk-oss/norsk-manager/cmd/internal/buildinfo"
	"github.com/norsk-oss/norsk-manager/proto/workerauth"
	"github.com/norsk-oss/norsk-manager/worker"
)

// runWorkerCtl starts norsk-ctl --mode=worker with args in the background;
// it runs until ctx ends. Its stderr (the worker's logs) is errOut.
func runWorkerCtl(t *testing.T, ctx context.Context, errOut *notifyBuffer, args ...string) <-chan ctlResult {
	t.Helper()
	doneCh := make(chan ctlResult, 1)
	go func() {
		doneCh <- runCtlTo(t, ctx, "", &notifyBuffer{}, errOut, append([]string{"--mode=worker", "--listen=127.0.0.1:0"}, args...)...)
	}()
	return doneCh
}

// TestCtl_Worker_StateDirInUse runs two workers over one --state-dir: the
// second is refused with a usage error naming --state-dir and the holder.
func TestCtl_Worker_StateDirInUse(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "worker")
	ctx, cancel := context.WithCancel(testCtx())
	defer cancel()
	firstErr := &notifyBuffer{}
	firstDone := runWorkerCtl(t, ctx, firstErr, "--state-dir="+dir)
	firstErr.waitFor(t, "worker listening")

	r := runCtl(t, testCtx(), "", "--mode=worker", "--listen=127.0.0.1:0", "--state-dir="+dir)
	want := fmt.Sprintf("norsk-ctl: --state-dir %s is in use by another worker (pid %d)", dir, os.Getpid())
	if r.code != ctlExitUsage || !strings.Contains(r.stderr, want) {
		t.Errorf("second worker: exit %d, stderr %q; want exit %d and %q", r.code, r.stderr, ctlExitUsage, want)
	}
	if strings.Contains(r.stderr, "worker listening") {
		t.Errorf("the second worker started listening:\n%s", r.stderr)
	}

	cancel()
	if r := <-firstDone; r.code != 0 {
		t.Fatalf("first worker: exit %d, stderr:\n%s", r.code, r.stderr)
	}
}

// TestCtl_Worker_Refused checks the exit code, the hint and the single
// report of each registration refusal, with the manager from
// NORSK_MANAGER_URL or --manager-url.
func TestCtl_Worker_Refused(t *testing.T) {
	cases := []struct {
		name    string
		fail    error // injected into ClusterMemberRegister; nil: the fake's own answer
		fromEnv bool  // the manager comes from NORSK_MANAGER_URL, not --manager-url
		exit    int
		msg     string // the manager's message
		hint    string
		notHint string
	}{
		{"unknown token from env", nil, true, workerExitUnauthorised,
			"unknown registration token", "does not know this registration token", "--state-dir"},
		{"revoked token", clienttest.WithReason(codes.Unauthenticated, workerauth.ReasonTokenRevoked, "registration token revoked: cluster slot node-1 was deregistered"), false,
			workerExitUnauthorised, "registration token revoked", "register a new slot", "--state-dir"},
		{"slot bound", clienttest.WithReason(codes.PermissionDenied, workerauth.ReasonSlotBound, "cluster slot \"r\" (node node-1) is already bound to a worker"), false,
			workerExitSlotBound, "already bound", "restart the original worker with its --state-dir", "revoked"},
		{"invalid", status.Error(codes.InvalidArgument, "address: not an IP"), false,
			workerExitUsage, "address: not an IP", "check --advertise and --listen", "--token"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			fake, addr := newTestFake(t)
			if tc.fail != nil {
				fake.Fail("ClusterMemberRegister", tc.fail)
			}
			args := []string{"--mode=worker", "--token=not-a-token", "--listen=127.0.0.1:0", "--state-dir=" + t.TempDir()}
			if tc.fromEnv {
				t.Setenv(ctlEnvManagerURL, addr)
			} else {
				t.Setenv(ctlEnvManagerURL, "")
				args = append(args, "--manager-url="+addr)
			}
			r := runCtl(t, testCtx(), "", args...)
			if r.code != tc.exit {
				t.Errorf("exit %d, want %d; stderr:\n%s", r.code, tc.exit, r.stderr)
			}
			last := lastLine(r.stderr)
			if !strings.HasPrefix(last, "norsk-ctl: cannot join the cluster: ") || !strings.Contains(last, tc.msg) ||
				!strings.Contains(last, tc.hint) || strings.Contains(last, tc.notHint) {
				t.Errorf("last line %q; want the refusal with %q and %q, without %q", last, tc.msg, tc.hint, tc.notHint)
			}
			if n := strings.Count(r.stderr, tc.msg); n != 1 {
				t.Errorf("the refusal is reported %d times, want once:\n%s", n, r.stderr)
			}
			if !strings.Contains(r.stderr, "version="+buildinfo.String()) {
				t.Errorf("the worker does not log version=%s:\n%s", buildinfo.String(), r.stderr)
			}
		})
	}
}

// lastLine returns the last non-empty line of s.
func lastLine(s string) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return lines[len(lines)-1]
}

// TestWorkerOptions_Config_ManagerURL covers where the worker's managers
// come from, for every combination of a token (or none), the managers
// from --manager-url, $NORSK_MANAGER_URL or nowhere, and a node identity
// in the state dir (or none): --manager-url first; else
// NORSK_MANAGER_URL for a worker with a token or a stored identity; a
// worker with neither is a mock-pool worker and ignores the variable; a
// stored identity is never run as a mock-pool worker.
func TestWorkerOptions_Config_ManagerURL(t *testing.T) {
	const stored = `{"node_id":"node-7","credential":"c","node_name":"edge-7"}`
	cases := []struct {
		name     string
		token    string
		flag     string
		flagSet  bool
		env      string
		identity string // content of identity.json ("" = no file)
		want     []string
		wantErr  string
	}{
		{name: "token, flag", token: "t", flag: "m3:6790", flagSet: true, want: []string{"m3:6790"}},
		{name: "token, flag over env", token: "t", flag: "m3:6790", flagSet: true, env: "m1:6790", want: []string{"m3:6790"}},
		{name: "token, flag, identity", token: "t", flag: "m3:6790", flagSet: true, identity: stored, want: []string{"m3:6790"}},
		{name: "token, env", token: "t", env: "m1:6790, m2:6790", want: []string{"m1:6790", "m2:6790"}},
		{name: "token, env, identity", token: "t", env: "m1:6790", identity: stored, want: []string{"m1:6790"}},
		{name: "token, none", token: "t", wantErr: "--token needs --manager-url (or $NORSK_MANAGER_URL)"},
		{name: "token, none, identity", token: "t", identity: stored, wantErr: "--token needs --manager-url (or $NORSK_MANAGER_URL)"},
		{name: "token, empty flag ignores env", token: "t", flagSet: true, env: "m1:6790", wantErr: "--token needs --manager-url"},

		{name: "flag, identity: restart on it", flag: "m1:6790", flagSet: true, identity: stored, want: []string{"m1:6790"}},
		{name: "flag over env, identity", flag: "m3:6790", flagSet: true, env: "m1:6790", identity: stored, want: []string{"m3:6790"}},
		{name: "flag, no identity", flag: "m1:6790", flagSet: true, wantErr: "holds no node identity (identity.json"},
		{name: "env, identity: restart on it", env: "m1:6790,m2:6790", identity: stored, want: []string{"m1:6790", "m2:6790"}},
		{name: "env, corrupt identity: the agent refuses it", env: "m1:6790", identity: "{garbage", want: []string{"m1:6790"}},
		{name: "env, no identity: mock pool ignores env", env: "m1:6790"},
		{name: "none, identity", identity: stored,
			wantErr: `holds the identity of node node-7 (slot "edge-7") (identity.json): it is a cluster-slot worker's, which registers with the credential stored there; give --manager-url (or $NORSK_MANAGER_URL)`},
		{name: "none, corrupt identity", identity: "{garbage", wantErr: "holds the identity of a node (the file cannot be used: "},
		{name: "empty flag ignores env, identity", flagSet: true, env: "m1:6790", identity: stored, wantErr: "give --manager-url"},
		{name: "none, no identity: mock pool"},

		{name: "bad env", token: "t", env: "nonsense", wantErr: "$NORSK_MANAGER_URL (the default of --manager-url)"},
		{name: "bad env, identity", env: "nonsense", identity: stored, wantErr: "$NORSK_MANAGER_URL (the default of --manager-url)"},
		{name: "bad flag", token: "t", flag: "nonsense", flagSet: true, env: "m1:6790", wantErr: "--manager-url: "},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv(ctlEnvManagerURL, tc.env)
			dir := t.TempDir()
			if tc.identity != "" {
				if err := os.WriteFile(filepath.Join(dir, worker.IdentityFile), []byte(tc.identity), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			o := &workerOptions{token: tc.token, managerURLs: tc.flag, managerURLsSet: tc.flagSet,
				listen: "127.0.0.1:0", stateDir: dir, runtime: "process", healthInterval: 1, logLevel: "info"}
			cfg, err := o.config()
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("config() error = %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if strings.Join(cfg.ManagerURLs, ",") != strings.Join(tc.want, ",") {
				t.Errorf("ManagerURLs = %q, want %q", cfg.ManagerURLs, tc.want)
			}
			if cfg.Token != tc.token {
				t.Errorf("Token = %q, want %q", cfg.Token, tc.token)
			}
			if cfg.Version != buildinfo.String() {
				t.Errorf("Version = %q, want %q", cfg.Version, buildinfo.String())
			}
		})
	}
}

// TestCtl_Worker_IdentityWithoutManager: a copy of a slot worker's
// --state-dir started with neither --token nor a manager URL exits 2,
// naming the stored node and --manager-url, before it listens or takes
// back any job.
func TestCtl_Worker_IdentityWithoutManager(t *testing.T) {
	t.Setenv(ctlEnvManagerURL, "")
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, worker.IdentityFile), []byte(`{"node_id":"node-9","credential":"c"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	r := runCtl(t, testCtx(), "", "--mode=worker", "--listen=127.0.0.1:0", "--state-dir="+dir)
	if r.code != workerExitUsage {
		t.Errorf("exit %d, want %d; stderr:\n%s", r.code, workerExitUsage, r.stderr)
	}
	for _, want := range []string{"node node-9", "give --manager-url"} {
		if !strings.Contains(lastLine(r.stderr), want) {
			t.Errorf("last line %q lacks %q", lastLine(r.stderr), want)
		}
	}
	if strings.Contains(r.stderr, "worker listening") {
		t.Errorf("the worker started:\n%s", r.stderr)
	}
}

func TestWorkerFailure(t *testing.T) {
	rej := func(code codes.Code) error {
		return fmt.Errorf("wrapped: %w", &worker.RegistrationError{Manager: "m:1", Code: code, Message: "no", Hint: "hint"})
	}
	cases := []struct {
		name string
		err  error
		code int
		want string
	}{
		{"state dir in use", &worker.StateDirInUseError{Dir: "/s/process", PID: 42}, workerExitUsage,
			"--state-dir /s is in use by another worker (pid 42): stop that worker, or give this one its own --state-dir"},
		{"state dir in use, pid unknown", &worker.StateDirInUseError{Dir: "/s"}, workerExitUsage,
			"--state-dir /s is in use by another process"},
		{"unknown or revoked token", rej(codes.Unauthenticated), workerExitUnauthorised, "cannot join the cluster: "},
		{"bound slot", rej(codes.PermissionDenied), workerExitSlotBound, "cannot join the cluster: "},
		{"invalid", rej(codes.InvalidArgument), workerExitUsage, "cannot join the cluster: "},
		{"no token, no stored identity", fmt.Errorf("%w in /s/identity.json: start it with --token", worker.ErrNoStoredIdentity), workerExitUsage,
			"/s/identity.json: start it with --token"},
		{"stored identity, no manager", fmt.Errorf("%w: /s/identity.json holds the identity of node n", worker.ErrIdentityWithoutManager), workerExitUsage,
			"/s/identity.json holds the identity of node n"},
		{"node terminated", fmt.Errorf("wrapped: %w", &worker.RegistrationError{Manager: "m:1", Code: codes.PermissionDenied,
			Reason: workerauth.ReasonNodeTerminated, Message: "terminated", Hint: "hint"}), workerExitUnauthorised, "cannot join the cluster: "},
		{"corrupt identity", fmt.Errorf("worker: %w: /s/identity.json is not valid JSON", worker.ErrBadStoredIdentity), workerExitFailure,
			"/s/identity.json is not valid JSON"},
		{"other", errors.New("worker: listen on 127.0.0.1:1: address in use"), workerExitFailure, "address in use"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			code, err := workerFailure("/s", tc.err)
			if code != tc.code || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("workerFailure = %d, %q; want %d and %q", code, err, tc.code, tc.want)
			}
		})
	}
}

// TestCtl_RootHelp_WorkerExitCodes: the root help lists the worker's exit
// codes, matching the constants runWorker uses.
func TestCtl_RootHelp_WorkerExitCodes(t *testing.T) {
	r := runCtl(t, testCtx(), "", "--help")
	if r.code != 0 {
		t.Fatalf("--help: %+v", r)
	}
	for _, want := range []string{
		"Exit codes of --mode=worker:",
		fmt.Sprintf("  %d    usage error (bad flag), --state-dir in use by another worker", workerExitUsage),
		fmt.Sprintf("  %d    the cluster slot of --token is bound to another worker", workerExitSlotBound),
		fmt.Sprintf("  %d    the manager refused --token or the stored credential: unknown, or", workerExitUnauthorised),
		"the worker\n       first stops every job it runs",
		"default $NORSK_MANAGER_URL",
	} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("--help lacks %q:\n%s", want, r.stdout)
		}
	}
}
