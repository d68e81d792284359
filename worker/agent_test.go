package worker_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/norsk-oss/norsk-manager/proto/commonpb"
	"github.com/norsk-oss/norsk-manager/proto/workerauth"
	"github.com/norsk-oss/norsk-manager/proto/workerpb"
	"github.com/norsk-oss/norsk-manager/worker"
	"go.uber.org/goleak"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func TestMain(m *testing.M) {
	if dir := os.Getenv(lockHelperEnv); dir != "" {
		os.Exit(lockHelperMain(dir))
	}
	goleak.VerifyTestMain(m)
}

// lockHelperEnv makes the test binary a process that locks the state
// directory named by its value, prints "locked" and waits to be killed.
const lockHelperEnv = "NORSK_WORKER_TEST_LOCK_DIR"

// lockHelperMain is the helper mode of the test binary (see lockHelperEnv).
func lockHelperMain(dir string) int {
	if _, err := worker.LockStateDir(dir); err != nil {
		fmt.Fprintln(os.Stderr, "helper:", err)
		return 2
	}
	fmt.Println("locked")
	_, _ = bufio.NewReader(os.Stdin).ReadString('\n') // until killed
	return 0
}

// logRecorder is a concurrency-safe log sink.
type logRecorder struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *logRecorder) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *logRecorder) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

// registeredAgent starts a fake manager and an agent with a token that
// registers with it, and waits for the registration.
func registeredAgent(t *testing.T, mutate func(*worker.Config)) (*worker.Agent, *fakeManager, worker.Runtime) {
	t.Helper()
	m := newFakeManager(t, "node-1", "secret-1")
	rt := newRuntime(t, t.TempDir())
	a, _ := worker.TestAgent(t, rt, func(c *worker.Config) {
		c.Token = "token-1"
		c.ManagerURLs = []string{m.addr}
		if mutate != nil {
			mutate(c)
		}
	})
	m.waitRequests(t, 1)
	waitUntil(t, "registered", func() bool { _, ok := a.Identity(); return ok })
	return a, m, rt
}

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(waitTimeout)
	ticker := time.NewTicker(10 * time.Millisecond)
	defer ticker.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		<-ticker.C
	}
}

func TestAgent_Register(t *testing.T) {
	a, m, _ := registeredAgent(t, nil)
	req := m.waitRequests(t, 1)[0]
	port := a.Addr().(*net.TCPAddr).Port
	if req.GetToken() != "token-1" || req.GetAddress() != "127.0.0.1" || int(req.GetPort()) != port {
		t.Errorf("request token=%q address=%q port=%d, want token-1 127.0.0.1 %d", req.GetToken(), req.GetAddress(), req.GetPort(), port)
	}
	hw := req.GetHardware()
	if hw.GetHostname() == "" || hw.GetCpuCount() == 0 || hw.GetMemoryBytes() == 0 || hw.GetOs() == "" || hw.GetKernel() == "" {
		t.Errorf("hardware incomplete: %v", hw)
	}
	if req.GetNodeCredential() != "" {
		t.Errorf("first registration presented a credential %q", req.GetNodeCredential())
	}
	id, _ := a.Identity()
	if id.NodeID != "node-1" || id.Credential != "secret-1" || id.NodeName != "slot-node-1" {
		t.Errorf("identity %+v", id)
	}
}

func TestAgent_Register_PersistsAndPresentsCredential(t *testing.T) {
	m := newFakeManager(t, "node-7", "cred-7")
	dir := t.TempDir()
	rt := newRuntime(t, filepath.Join(dir, "process"))
	cfg := func(c *worker.Config) {
		c.Token, c.ManagerURLs, c.StateDir = "tok", []string{m.addr}, dir
	}
	ctx, cancel := context.WithCancel(context.Background())
	a := newAgent(t, rt, cfg)
	done := runAgent(ctx, a)
	m.waitRequests(t, 1)
	waitUntil(t, "registered", func() bool { _, ok := a.Identity(); return ok })
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(filepath.Join(dir, "identity.json"))
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("identity.json mode %v, want 0600", fi.Mode().Perm())
	}
	// A restarted worker presents the stored credential.
	ctx2, cancel2 := context.WithCancel(context.Background())
	defer cancel2()
	a2 := newAgent(t, rt, cfg)
	done2 := runAgent(ctx2, a2)
	if got := m.waitRequests(t, 2)[1].GetNodeCredential(); got != "cred-7" {
		t.Errorf("second registration presented %q, want cred-7", got)
	}
	cancel2()
	if err := <-done2; err != nil {
		t.Fatal(err)
	}
}

func newAgent(t *testing.T, rt worker.Runtime, mutate func(*worker.Config)) *worker.Agent {
	t.Helper()
	cfg := worker.DevConfig()
	cfg.StateDir = t.TempDir()
	cfg.Logger = worker.TestLogger(t)
	cfg.Runtime = rt
	mutate(&cfg)
	a, err := worker.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// runAgent runs a in a goroutine; the channel receives Run's result.
func runAgent(ctx context.Context, a *worker.Agent) <-chan error {
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }() // the test waits on done
	return done
}

func TestAgent_Register_RetriesAndFailsOver(t *testing.T) {
	m := newFakeManager(t, "node-2", "cred-2")
	m.mu.Lock()
	m.mu.failures = []error{status.Error(codes.Unavailable, "no quorum"), status.Error(codes.Unavailable, "no quorum")}
	m.mu.Unlock()
	dead, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	deadAddr := dead.Addr().String()
	dead.Close()
	rt := newRuntime(t, t.TempDir())
	a, _ := worker.TestAgent(t, rt, func(c *worker.Config) {
		c.Token = "tok"
		c.ManagerURLs = []string{deadAddr, "grpc://" + m.addr}
	})
	m.waitRequests(t, 3)
	waitUntil(t, "registered", func() bool { _, ok := a.Identity(); return ok })
}

func TestAgent_Register_Rejected(t *testing.T) {
	cases := []struct {
		name    string
		code    codes.Code
		reason  string // the ErrorInfo reason cluster/gateway sends ("" = none)
		msg     string // the manager's message (as cluster/gateway words it)
		hint    string
		notHint string // must not appear: the hint of another case
	}{
		{"unknown token", codes.Unauthenticated, workerauth.ReasonTokenUnknown, "unknown registration token",
			"does not know this registration token", "deregistered"},
		{"revoked token", codes.Unauthenticated, workerauth.ReasonTokenRevoked, "registration token revoked: cluster slot node-3 was deregistered",
			"register a new slot", "--state-dir"},
		{"unknown credential", codes.Unauthenticated, workerauth.ReasonCredentialUnknown, "unknown or revoked node credential",
			"does not know the node credential in --state-dir", "check --token"},
		{"unauthenticated, no reason", codes.Unauthenticated, "", "nope", "refused the registration token", "deregistered"},
		{"bound slot", codes.PermissionDenied, workerauth.ReasonSlotBound, "cluster slot \"r\" (node n) is already bound to a worker",
			"restart the original worker with its --state-dir", "revoked"},
		{"invalid", codes.InvalidArgument, "", "nope", "check --advertise", "--token"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			m := newFakeManager(t, "n", "c")
			m.mu.Lock()
			st := status.New(tc.code, tc.msg)
			if tc.reason != "" {
				var err error
				if st, err = st.WithDetails(&errdetails.ErrorInfo{Reason: tc.reason, Domain: workerauth.ErrorDomain}); err != nil {
					t.Fatal(err)
				}
			}
			m.mu.reject = st.Err()
			m.mu.Unlock()
			rt := newRuntime(t, t.TempDir())
			logs := &logRecorder{}
			_, errCh := worker.TestAgent(t, rt, func(c *worker.Config) {
				c.Token, c.ManagerURLs = "bad", []string{m.addr}
				c.Logger = slog.New(slog.NewTextHandler(logs, nil))
			})
			var err error
			select {
			case err = <-errCh:
			case <-time.After(waitTimeout):
				t.Fatal("Run did not return")
			}
			if !errors.Is(err, worker.ErrRegistrationRejected) || !strings.Contains(err.Error(), tc.hint) || !strings.Contains(err.Error(), tc.msg) {
				t.Errorf("err = %v; want ErrRegistrationRejected with the manager's message and %q", err, tc.hint)
			}
			if strings.Contains(err.Error(), tc.notHint) {
				t.Errorf("err = %v; its hint must not mention %q", err, tc.notHint)
			}
			// Run returns the refusal for its caller to report; the agent
			// does not log it too.
			if got := logs.String(); strings.Contains(got, tc.hint) || strings.Contains(got, "level=ERROR") {
				t.Errorf("the refusal was logged:\n%s", got)
			}
			var rej *worker.RegistrationError
			if !errors.As(err, &rej) || rej.Code != tc.code || rej.Manager != m.addr {
				t.Errorf("err = %#v; want a *RegistrationError with code %v from %s", err, tc.code, m.addr)
			}
			if got := len(m.waitRequests(t, 1)); got != 1 {
				t.Errorf("%d attempts; a permanent error must not be retried", got)
			}
		})
	}
}

func TestAgent_Register_AgainWithoutDialBack(t *testing.T) {
	_, m, _ := registeredAgent(t, func(c *worker.Config) { c.DialBackTimeout = 50 * time.Millisecond })
	reqs := m.waitRequests(t, 3)
	if reqs[2].GetNodeCredential() != "secret-1" {
		t.Errorf("re-registration presented %q", reqs[2].GetNodeCredential())
	}
}

func TestAgent_Handshake(t *testing.T) {
	cases := []struct {
		name     string
		nodeID   string
		nonce    string
		cred     string // used to sign hello_response
		wantCode codes.Code
		hello    bool // the worker sends hello before refusing
	}{
		{name: "good proof", nodeID: "node-1", nonce: "n1", cred: "secret-1", wantCode: codes.OK, hello: true},
		{name: "bad proof", nodeID: "node-1", nonce: "n1", cred: "wrong", wantCode: codes.Unauthenticated, hello: true},
		{name: "empty proof", nodeID: "node-1", nonce: "n1", cred: "", wantCode: codes.Unauthenticated, hello: true},
		{name: "other node", nodeID: "node-2", nonce: "n1", cred: "secret-1", wantCode: codes.Unauthenticated},
		{name: "no nonce", nodeID: "node-1", nonce: "", cred: "secret-1", wantCode: codes.Unauthenticated},
	}
	a, _, _ := registeredAgent(t, nil)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := dialSession(t, a.Addr().String(), tc.nodeID, tc.nonce)
			if !tc.hello {
				if got := code(s.waitEnd(t)); got != tc.wantCode {
					t.Fatalf("status %v, want %v", got, tc.wantCode)
				}
				return
			}
			h := s.hello(t)
			if h.GetNodeMetadata().GetNodeId().GetNodeId() != "node-1" || h.GetToken().GetInstanceId() != "node-1" {
				t.Errorf("hello identity: %v", h)
			}
			if want := worker.WorkerProof("secret-1", "node-1", tc.nonce); h.GetToken().GetCookie() != want {
				t.Errorf("cookie %q, want %q", h.GetToken().GetCookie(), want)
			}
			if h.GetToken().GetSignature().GetValue() == "" {
				t.Error("hello carries no worker nonce")
			}
			s.respond(t, h, tc.cred, 1)
			if tc.wantCode == codes.OK {
				m := s.waitFor(t, "health", func(m *workerpb.WorkerMessage) bool { return m.GetHealth() != nil })
				if load := m.GetHealth().GetMeasuredLoad(); load.GetMemory() <= 0 || load.GetDiskSpace() <= 0 {
					t.Errorf("measured load %v", load)
				}
				s.waitFor(t, "second health", func(m *workerpb.WorkerMessage) bool { return m.GetHealth() != nil })
				return
			}
			if got := code(s.waitEnd(t)); got != tc.wantCode {
				t.Fatalf("status %v, want %v", got, tc.wantCode)
			}
		})
	}
}

func TestAgent_EpochSupersession(t *testing.T) {
	a, _, rt := registeredAgent(t, nil)
	addr := a.Addr().String()
	s1, _ := open(t, addr, "node-1", "secret-1", 1)
	s2, _ := open(t, addr, "node-1", "secret-1", 2)
	if got := code(s1.waitEnd(t)); got != codes.Aborted {
		t.Errorf("superseded session ended with %v, want Aborted", got)
	}
	// A stale epoch is refused after its hello_response.
	s0 := dialSession(t, addr, "node-1", "n0")
	s0.respond(t, s0.hello(t), "secret-1", 1)
	if got := code(s0.waitEnd(t)); got != codes.FailedPrecondition {
		t.Errorf("stale session ended with %v, want FailedPrecondition", got)
	}
	// The current session still commands the worker.
	job := sleeper("job-epoch")
	key := worker.KeyOf(job)
	s2.send(t, provision(job, 2))
	s2.waitFor(t, "job_started", isStarted(key))
	// A message carrying another epoch is ignored.
	s2.send(t, stopJob(key, 1))
	s2.send(t, stopJob(worker.JobKey{JobID: "marker", Role: "primary"}, 2))
	s2.waitFor(t, "marker stopped", isStopped(worker.JobKey{JobID: "marker", Role: "primary"}))
	if len(rt.List()) != 1 {
		t.Error("the job was stopped by a message with a stale epoch")
	}
}

func TestAgent_ProvisionAndStop(t *testing.T) {
	a, _, _ := registeredAgent(t, nil)
	s, _ := open(t, a.Addr().String(), "node-1", "secret-1", 5)
	job := sleeper("job-ps")
	key := worker.KeyOf(job)
	s.send(t, provision(job, 5))
	started := s.waitFor(t, "job_started", isStarted(key)).GetJobStarted()
	mapping := started.GetServicePortMappings()["app"].GetMappings()
	if len(mapping) != 1 || mapping[0].GetTarget() != 8080 || mapping[0].GetPublished() == 0 {
		t.Fatalf("port mappings %v", started.GetServicePortMappings())
	}
	s.waitFor(t, "output line", func(m *workerpb.WorkerMessage) bool {
		return m.GetJobInfo().GetContainerEvent().GetText() == "stdout: hello from job-ps"
	})
	// Provisioning again is idempotent: same ports, no restart.
	s.send(t, provision(job, 5))
	again := s.waitFor(t, "job_started again", isStarted(key)).GetJobStarted()
	if again.GetServicePortMappings()["app"].GetMappings()[0].GetPublished() != mapping[0].GetPublished() {
		t.Error("second provision changed the ports")
	}
	s.send(t, stopJob(key, 5))
	s.waitFor(t, "job_stopped", isStopped(key))
	unknown := worker.JobKey{JobID: "never-ran", Role: "backup"}
	s.send(t, stopJob(unknown, 5))
	s.waitFor(t, "job_stopped of unknown", isStopped(unknown))
}

func TestAgent_ProvisionFailure(t *testing.T) {
	a, _, _ := registeredAgent(t, nil)
	s, _ := open(t, a.Addr().String(), "node-1", "secret-1", 1)
	job := sleeper("job-bad")
	job.WriteFiles = []*commonpb.WriteFile{{Path: "../../etc/evil"}}
	key := worker.KeyOf(job)
	s.send(t, provision(job, 1))
	failed := s.waitFor(t, "job_failed", isFailed(key)).GetJobFailed()
	if !strings.Contains(failed.GetReason(), "write_files[0].path") {
		t.Errorf("reason %q", failed.GetReason())
	}
}

func TestAgent_HelloListsRunningJobsAfterReconnect(t *testing.T) {
	a, _, _ := registeredAgent(t, nil)
	addr := a.Addr().String()
	s1, _ := open(t, addr, "node-1", "secret-1", 1)
	job := sleeper("job-rc")
	key := worker.KeyOf(job)
	s1.send(t, provision(job, 1))
	port := s1.waitFor(t, "job_started", isStarted(key)).GetJobStarted().GetServicePortMappings()["app"].GetMappings()[0].GetPublished()
	s1.cancel() // the manager goes away
	s1.waitEnd(t)

	s2, h := open(t, addr, "node-1", "secret-1", 2)
	if len(h.GetRunningJobs()) != 1 {
		t.Fatalf("hello lists %d jobs, want 1", len(h.GetRunningJobs()))
	}
	rj := h.GetRunningJobs()[0]
	if worker.KeyOf(rj.GetJob()) != key || rj.GetServicePortMappings()["app"].GetMappings()[0].GetPublished() != port {
		t.Errorf("running job %v", rj)
	}
	_ = s2
}

func TestAgent_TerminalEventsFlushedAfterReconnect(t *testing.T) {
	a, _, rt := registeredAgent(t, nil)
	addr := a.Addr().String()
	trigger := filepath.Join(t.TempDir(), "die")
	job := &workerpb.WorkerJob{JobId: &commonpb.JobId{JobId: "job-flush"}, Role: "primary", Services: []*commonpb.Service{{
		Name:    "app",
		Command: "while [ ! -f " + trigger + " ]; do sleep 0.02; done; exit 3",
	}}}
	key := worker.KeyOf(job)
	s1, _ := open(t, addr, "node-1", "secret-1", 1)
	s1.send(t, provision(job, 1))
	s1.waitFor(t, "job_started", isStarted(key))
	s1.cancel()
	s1.waitEnd(t)

	// The job fails while no manager is connected.
	if err := os.WriteFile(trigger, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "job gone", func() bool { return len(rt.List()) == 0 })

	s2, h := open(t, addr, "node-1", "secret-1", 2)
	if len(h.GetRunningJobs()) != 0 {
		t.Errorf("hello lists %v", h.GetRunningJobs())
	}
	failed := s2.waitFor(t, "buffered job_failed", isFailed(key)).GetJobFailed()
	if !strings.Contains(failed.GetReason(), "exited with code 3") {
		t.Errorf("reason %q", failed.GetReason())
	}
}

func TestAgent_MockPoolWorker(t *testing.T) {
	rt := newRuntime(t, t.TempDir())
	a, _ := worker.TestAgent(t, rt, nil)
	s := dialSession(t, a.Addr().String(), "mock-node-3", "whatever")
	h := s.hello(t)
	if h.GetToken() != nil {
		t.Errorf("a mock-pool worker sent a token: %v", h.GetToken())
	}
	if h.GetNodeMetadata().GetNodeId().GetNodeId() != "mock-node-3" {
		t.Errorf("node id %q", h.GetNodeMetadata().GetNodeId().GetNodeId())
	}
	s.respond(t, h, "", 0) // no signature: accepted
	s.waitFor(t, "health", func(m *workerpb.WorkerMessage) bool { return m.GetHealth() != nil })
	job := sleeper("job-mock")
	s.send(t, provision(job, 0))
	s.waitFor(t, "job_started", isStarted(worker.KeyOf(job)))
}

// TestAgent_WorkerRestartKeepsJobs stops the agent and its runtime (a
// worker upgrade) and starts new ones over the same state directory: the
// job keeps running and the next hello reports it.
func TestAgent_WorkerRestartKeepsJobs(t *testing.T) {
	m := newFakeManager(t, "node-9", "cred-9")
	dir := t.TempDir()
	cfg := func(c *worker.Config) { c.Token, c.ManagerURLs, c.StateDir = "tok", []string{m.addr}, dir }

	rt1 := newRuntime(t, filepath.Join(dir, "process"))
	ctx1, cancel1 := context.WithCancel(context.Background())
	a1 := newAgent(t, rt1, cfg)
	done1 := runAgent(ctx1, a1)
	waitUntil(t, "registered", func() bool { _, ok := a1.Identity(); return ok })
	<-a1.Ready()
	s1, _ := open(t, a1.Addr().String(), "node-9", "cred-9", 1)
	job := sleeper("job-upgrade")
	key := worker.KeyOf(job)
	s1.send(t, provision(job, 1))
	port := s1.waitFor(t, "job_started", isStarted(key)).GetJobStarted().GetServicePortMappings()["app"].GetMappings()[0].GetPublished()
	cancel1()
	if err := <-done1; err != nil {
		t.Fatal(err)
	}
	rt1.Shutdown()

	rt2 := newRuntime(t, filepath.Join(dir, "process"))
	ctx2, cancel2 := context.WithCancel(context.Background())
	defer cancel2()
	a2 := newAgent(t, rt2, cfg)
	done2 := runAgent(ctx2, a2)
	<-a2.Ready()
	// The stored identity serves sessions before re-registration completes.
	_, h := open(t, a2.Addr().String(), "node-9", "cred-9", 2)
	if len(h.GetRunningJobs()) != 1 || worker.KeyOf(h.GetRunningJobs()[0].GetJob()) != key ||
		h.GetRunningJobs()[0].GetServicePortMappings()["app"].GetMappings()[0].GetPublished() != port {
		t.Fatalf("hello after restart lists %v", h.GetRunningJobs())
	}
	cancel2()
	if err := <-done2; err != nil {
		t.Fatal(err)
	}
}

// TestAgent_DeleteJob_CallsJobDataDeleter: delete_job from the current
// session reaches a runtime that implements JobDataDeleter with the job's
// id, once; one carrying another epoch, or no job id, is ignored, and a
// failing DeleteJobData is only logged.
func TestAgent_DeleteJob_CallsJobDataDeleter(t *testing.T) {
	rt := newDeleterRuntime(t)
	a, _ := worker.TestAgent(t, rt, nil)
	s, _ := open(t, a.Addr().String(), "mock-node-1", "", 2)

	s.send(t, deleteJob("job-gone", 2))
	rt.waitCall(t, "delete job-gone")

	s.send(t, deleteJob("stale", 1)) // another epoch: ignored
	s.send(t, deleteJob("", 2))      // no job id: ignored
	s.send(t, deleteJob("fails", 2)) // the runtime fails: logged
	s.send(t, deleteJob("marker", 2))
	rt.waitCall(t, "delete marker")
	// Different jobs' deletes run concurrently: wait for the failing one too.
	calls := rt.waitCall(t, "delete fails")
	if slices.Contains(calls, "delete stale") || slices.Contains(calls, "delete ") {
		t.Errorf("a delete_job with another epoch or without a job id reached the runtime: %v", calls)
	}
	if !slices.Contains(calls, "delete fails") {
		t.Errorf("delete fails was not called: %v", calls)
	}
	if n := count(calls, "delete job-gone"); n != 1 {
		t.Errorf("DeleteJobData(job-gone) called %d times, want 1: %v", n, calls)
	}
	// The session still commands the worker after the failure.
	unknown := worker.JobKey{JobID: "never-ran", Role: "primary"}
	s.send(t, stopJob(unknown, 2))
	s.waitFor(t, "job_stopped of unknown", isStopped(unknown))
}

// TestAgent_DeleteJob_OrderedWithEveryRole: delete_job runs after the
// commands sent before it for any role of the job (here two stops held up
// by the runtime) and before the commands sent after it; other jobs do not
// wait for it.
func TestAgent_DeleteJob_OrderedWithEveryRole(t *testing.T) {
	rt := newDeleterRuntime(t)
	a, _ := worker.TestAgent(t, rt, nil)
	s, _ := open(t, a.Addr().String(), "mock-node-1", "", 1)
	primary := sleeper("job-vol")
	backup := sleeper("job-vol")
	backup.Role = "backup"
	pk, bk := worker.KeyOf(primary), worker.KeyOf(backup)
	s.send(t, provision(primary, 1))
	s.send(t, provision(backup, 1))
	s.waitFor(t, "primary started", isStarted(pk))
	// job_started is sent when the start phase ends, which can be before
	// the runtime's Start has returned to the fake that records it.
	rt.waitCall(t, "start "+pk.String())
	rt.waitCall(t, "start "+bk.String())

	release := rt.holdStops(t)
	s.send(t, stopJob(pk, 1))
	s.send(t, stopJob(bk, 1))
	s.send(t, deleteJob("job-vol", 1))
	s.send(t, provision(primary, 1))
	s.send(t, deleteJob("other-job", 1))
	calls := rt.waitCall(t, "delete other-job")
	if slices.Contains(calls, "delete job-vol") || count(calls, "start "+pk.String()) != 1 {
		t.Fatalf("delete_job (or the provision after it) overtook the stops of the job: %v", calls)
	}

	release()
	calls = rt.waitCallN(t, "start "+pk.String(), 2)
	del := slices.Index(calls, "delete job-vol")
	if i := slices.Index(calls, "stop "+pk.String()); i < 0 || i > del {
		t.Errorf("stop of %s did not finish before delete: %v", pk, calls)
	}
	if i := slices.Index(calls, "stop "+bk.String()); i < 0 || i > del {
		t.Errorf("stop of %s did not finish before delete: %v", bk, calls)
	}
	if i := lastIndex(calls, "start "+pk.String()); i < del {
		t.Errorf("the provision sent after delete_job ran before it: %v", calls)
	}
	rt.mu.Lock()
	running := rt.mu.runningAtDel["job-vol"]
	rt.mu.Unlock()
	if len(running) != 0 {
		t.Errorf("roles %v of the job were still running when DeleteJobData ran", running)
	}
	s.send(t, stopJob(pk, 1))
	s.waitFor(t, "primary stopped", isStopped(pk))
}

// TestAgent_DeleteJob_RuntimeWithoutDeleter: a runtime that does not
// implement JobDataDeleter keeps nothing for a deleted job; delete_job is
// logged and the session carries on.
func TestAgent_DeleteJob_RuntimeWithoutDeleter(t *testing.T) {
	plain := struct{ worker.Runtime }{newRuntime(t, t.TempDir())} // only the Runtime methods
	logs := &logRecorder{}
	a, _ := worker.TestAgent(t, plain, func(c *worker.Config) {
		c.Logger = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	})
	s, _ := open(t, a.Addr().String(), "mock-node-1", "", 1)
	job := sleeper("job-plain")
	key := worker.KeyOf(job)
	s.send(t, provision(job, 1))
	s.waitFor(t, "job_started", isStarted(key))
	s.send(t, stopJob(key, 1))
	s.waitFor(t, "job_stopped", isStopped(key))
	s.send(t, deleteJob("job-plain", 1))
	waitUntil(t, "delete_job logged", func() bool {
		return strings.Contains(logs.String(), "the runtime keeps nothing for it") && strings.Contains(logs.String(), "job_id=job-plain")
	})
	s.send(t, provision(job, 1))
	s.waitFor(t, "job_started after delete_job", isStarted(key))
	s.send(t, stopJob(key, 1))
	s.waitFor(t, "job_stopped", isStopped(key))
}

func lastIndex(calls []string, call string) int {
	for i := len(calls) - 1; i >= 0; i-- {
		if calls[i] == call {
			return i
		}
	}
	return -1
}

// slowStartRuntime is a process runtime whose Start blocks until its
// context ends, like a Start waiting for a long image pull.
type slowStartRuntime struct {
	worker.Runtime
	stops chan worker.JobKey
}

func (r *slowStartRuntime) Start(ctx context.Context, _ *workerpb.WorkerJob) (worker.PortMappings, error) {
	<-ctx.Done()
	return nil, ctx.Err()
}

func (r *slowStartRuntime) Stop(_ context.Context, key worker.JobKey, _ time.Duration) error {
	r.stops <- key
	return nil
}

// TestAgent_StopDoesNotWaitForStart: a stop_job reaches the runtime while
// the Start of the same key is still in flight (the agent stops waiting
// for that Start), so a runtime can cut a long start short.
func TestAgent_StopDoesNotWaitForStart(t *testing.T) {
	rt := &slowStartRuntime{Runtime: newRuntime(t, t.TempDir()), stops: make(chan worker.JobKey, 1)}
	a, _ := worker.TestAgent(t, rt, nil)
	s, _ := open(t, a.Addr().String(), "mock-node-1", "", 1)
	job := sleeper("job-slow")
	key := worker.KeyOf(job)
	s.send(t, provision(job, 1))
	s.send(t, stopJob(key, 1))
	select {
	case got := <-rt.stops:
		if got != key {
			t.Fatalf("stopped %s, want %s", got, key)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the stop waited behind the Start in flight")
	}
}
