package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/norsk-oss/norsk-manager/client/clienttest"
	"github.com/norsk-oss/norsk-manager/proto/commonpb"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
)

// exampleJob is the path of examples/hello-http/job.json from this package.
var exampleJob = filepath.Join("..", "..", "examples", "hello-http", "job.json")

func TestExampleJob_Parses(t *testing.T) {
	data, err := os.ReadFile(exampleJob)
	if err != nil {
		t.Fatal(err)
	}
	job := &managerpb.Job{}
	if err := protojson.Unmarshal(data, job); err != nil {
		t.Fatalf("examples/hello-http/job.json: %v", err)
	}
	if job.GetJobId().GetJobId() != "hello-http" || job.GetTags()["example"] != "hello-http" || len(job.GetServices()) != 1 {
		t.Fatalf("unexpected job: %v", job)
	}
	s := job.GetServices()[0]
	pm := s.GetParameters().GetPortMappings()
	if s.GetName() != "web" || s.GetCommand() != "norsk-ctl demo http" ||
		s.GetRestart() != commonpb.Service_ON_FAILURE || s.GetRestartCount() != 3 || s.GetRestartPeriod() != 60 ||
		len(pm) != 1 || pm[0].GetContainerPort() != 8080 || pm[0].GetSpecific().GetPort() != 18080 ||
		pm[0].GetHostAddress() != "127.0.0.1" || pm[0].GetProtocol() != commonpb.ProtocolFamily_TCP {
		t.Fatalf("unexpected service: %v", s)
	}
}

// TestCtl_JobWorkflow drives a job through its life with text output.
func TestCtl_JobWorkflow(t *testing.T) {
	_, addr := newTestFake(t)
	hashRe := regexp.MustCompile(`^created job hello-http \(hash (\d+)\)\n$`)
	out := mustRun(t, addr, "job", "create", "-f", exampleJob)
	m := hashRe.FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("job create printed %q", out)
	}
	if got := mustRun(t, addr, "node", "mock-create", "n1", "--tag", "pool=a"); got != "created mock node n1\n" {
		t.Errorf("node mock-create printed %q", got)
	}
	if got := mustRun(t, addr, "job", "start", "hello-http", "--node", "n1"); !strings.HasPrefix(got, "start requested: job hello-http as primary on node n1") {
		t.Errorf("job start printed %q", got)
	}

	got := mustRun(t, addr, "job", "get", "hello-http")
	want := `Job:          hello-http
State:        active
Hash:         ` + m[1] + `
Updates:      in place (running instances keep their definition until restarted)
Description:  Example: a tiny HTTP service run as a local process (norsk-ctl demo http)
Start:        -
Tags:         example=hello-http
Services:
  web  command="norsk-ctl demo http"  restart=on_failure (3 in 60s)  ports=127.0.0.1:18080->8080/tcp
Instances:
  primary on node n1
History:
  2026-05-04T12:00:00Z  created
  2026-05-04T12:00:00Z  provisioned role=primary node=n1
  2026-05-04T12:00:00Z  running role=primary node=n1
`
	if got != want {
		t.Errorf("job get printed:\n%s\nwant:\n%s", got, want)
	}

	got = mustRun(t, addr, "job", "search", "--tag", "example=hello-http", "--id-re", "^hello")
	wantSearch := "JOB ID      STATE   START  INSTANCES   TAGS\nhello-http  active  -      primary@n1  example=hello-http\n"
	if got != wantSearch {
		t.Errorf("job search printed:\n%q\nwant:\n%q", got, wantSearch)
	}
	if got := mustRun(t, addr, "job", "search", "--tag-neq", "example=hello-http"); got != "no matching jobs\n" {
		t.Errorf("job search with no match printed %q", got)
	}

	mustRun(t, addr, "job", "stop", "hello-http", "--role", "primary", "--node", "n1")
	if got := mustRun(t, addr, "job", "complete", "hello-http"); got != "completed job hello-http\n" {
		t.Errorf("job complete printed %q", got)
	}
	if got := mustRun(t, addr, "job", "delete", "hello-http"); got != "deleted job hello-http\n" {
		t.Errorf("job delete printed %q", got)
	}
}

// TestCtl_JobUpdate covers the hash handling of "job update".
func TestCtl_JobUpdate(t *testing.T) {
	_, addr := newTestFake(t)
	dir := t.TempDir()
	file := filepath.Join(dir, "job.json")
	write := func(body string) {
		if err := os.WriteFile(file, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(`{"jobId": {"jobId": "u1"}, "description": "v1"}`)
	r := runCtl(t, testCtx(), "", "--manager-url", addr, "-o", "json", "job", "create", "-f", file)
	if r.code != 0 {
		t.Fatalf("job create: %+v", r)
	}
	var created struct{ Hash string }
	if err := json.Unmarshal([]byte(r.stdout), &created); err != nil || created.Hash == "" {
		t.Fatalf("job create -o json printed %q (%v)", r.stdout, err)
	}

	write(`{"jobId": {"jobId": "u1"}, "description": "v2"}`)
	r = runCtl(t, testCtx(), "", "--manager-url", addr, "job", "update", "-f", file)
	if r.code != ctlExitUsage || !strings.Contains(r.stderr, "no currentHash: pass --hash") {
		t.Errorf("update without a hash: %+v", r)
	}
	r = runCtl(t, testCtx(), "", "--manager-url", addr, "job", "update", "-f", file, "--hash", "1")
	if r.code != ctlExitPrecondition || !strings.Contains(r.stderr, "precondition failed: job u1 at hash 1") {
		t.Errorf("update with a stale hash: %+v", r)
	}
	write(`{"jobId": {"jobId": "u1"}, "description": "v2", "currentHash": "` + created.Hash + `"}`)
	if got := mustRun(t, addr, "job", "update", "-f", file); !strings.HasPrefix(got, "updated job u1 (hash ") {
		t.Errorf("job update printed %q", got)
	}
}

// TestCtl_JobCreateStdin reads the job from standard input.
func TestCtl_JobCreateStdin(t *testing.T) {
	_, addr := newTestFake(t)
	r := runCtl(t, testCtx(), `{"jobId": {"jobId": "from-stdin"}}`, "--manager-url", addr, "job", "create", "-f", "-")
	if r.code != 0 || !strings.HasPrefix(r.stdout, "created job from-stdin (hash ") {
		t.Fatalf("job create -f -: %+v", r)
	}
}

// TestCtl_JSONOutput checks that --output json prints the manager's answer
// as protojson.
func TestCtl_JSONOutput(t *testing.T) {
	_, addr := newTestFake(t)
	mustRun(t, addr, "job", "create", "-f", exampleJob)
	mustRun(t, addr, "node", "mock-create", "n1")

	resp := &managerpb.JobByIdResponse{}
	if err := protojson.Unmarshal([]byte(mustRun(t, addr, "-o", "json", "job", "get", "hello-http")), resp); err != nil {
		t.Fatalf("job get -o json: %v", err)
	}
	if resp.GetJob().GetJob().GetJobId().GetJobId() != "hello-http" || len(resp.GetJob().GetHistoryEntry()) != 1 {
		t.Errorf("job get -o json = %v", resp)
	}

	var list []json.RawMessage
	if err := json.Unmarshal([]byte(mustRun(t, addr, "-o", "json", "job", "search")), &list); err != nil || len(list) != 1 {
		t.Fatalf("job search -o json: %d jobs, %v", len(list), err)
	}
	cj := &managerpb.CurrentJob{}
	if err := protojson.Unmarshal(list[0], cj); err != nil || cj.GetJob().GetJobId().GetJobId() != "hello-http" {
		t.Errorf("job search -o json item = %v, %v", cj, err)
	}

	nodes := &managerpb.ListNodesResponse{}
	if err := protojson.Unmarshal([]byte(mustRun(t, addr, "-o", "json", "node", "list")), nodes); err != nil || len(nodes.GetNodes()) != 1 {
		t.Errorf("node list -o json = %v, %v", nodes, err)
	}

	var version struct {
		Client  struct{ Version string }
		Manager struct{ ManagerVersion string }
	}
	if err := json.Unmarshal([]byte(mustRun(t, addr, "-o", "json", "version")), &version); err != nil ||
		version.Client.Version == "" || version.Manager.ManagerVersion != clienttest.ManagerVersion {
		t.Errorf("version -o json = %+v, %v", version, err)
	}
	if got := mustRun(t, addr, "-o", "json", "job", "delete", "hello-http"); strings.TrimSpace(got) != "{}" {
		t.Errorf("job delete -o json printed %q", got)
	}
}

// TestCtl_Usage checks that bad command lines exit 2 with a message naming
// the flag or argument, before anything is sent.
func TestCtl_Usage(t *testing.T) {
	fake, addr := newTestFake(t)
	fake.Fail("", status.Error(codes.Internal, "a call reached the manager"))
	noHash := filepath.Join(t.TempDir(), "nohash.json")
	if err := os.WriteFile(noHash, []byte(`{"jobId": {"jobId": "x"}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	badJob := filepath.Join(t.TempDir(), "bad.json")
	if err := os.WriteFile(badJob, []byte(`{"jobId": {"jobId": "x"}, "colour": "red"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		args []string
		want string
	}{
		{"missing argument", []string{"job", "get"}, "missing argument JOB_ID"},
		{"extra argument", []string{"job", "get", "a", "b"}, `unexpected argument "b"`},
		{"empty argument", []string{"job", "delete", " "}, "argument JOB_ID is empty"},
		{"no file", []string{"job", "create"}, "--file is required"},
		{"unknown field", []string{"job", "create", "-f", badJob}, `unknown field "colour"`},
		{"no hash", []string{"job", "update", "-f", noHash}, "no currentHash"},
		{"bad tag", []string{"job", "search", "--tag", "novalue"}, `--tag: "novalue" is not key=value`},
		{"bad time", []string{"job", "search", "--start-after", "yesterday"}, `--start-after: "yesterday" is not an RFC 3339 time`},
		{"no node", []string{"job", "start", "j"}, "--node is required"},
		{"empty role", []string{"job", "stop", "j", "--node", "n", "--role", ""}, "--role must not be empty"},
		{"migrate without --to", []string{"job", "migrate", "j", "primary"}, "--to is required: a node id, or any"},
		{"abort without target role", []string{"job", "abort-migration", "j", "primary"}, "missing argument TARGET_ROLE"},
		{"bad output", []string{"--output", "yaml", "node", "list"}, `--output: "yaml" is not "text" or "json"`},
		{"unknown flag", []string{"node", "list", "--bogus"}, "unknown flag: --bogus"},
		{"bad flag value", []string{"events", "--window", "soon"}, `invalid argument "soon"`},
		{"negative window", []string{"events", "--window", "-1h"}, "--window must not be negative"},
		{"bad timeout", []string{"--timeout", "-1s", "node", "list"}, "--timeout"},
		{"unknown command", []string{"frobnicate"}, `unknown command "frobnicate" for "norsk-ctl"`},
		{"unknown job command", []string{"job", "bogus"}, `unknown command "bogus" for "norsk-ctl job"`},
		{"unknown node command", []string{"node", "bogus"}, `unknown command "bogus" for "norsk-ctl node"`},
		{"unknown slot command", []string{"slot", "bogus"}, `unknown command "bogus" for "norsk-ctl slot"`},
		{"unknown demo command", []string{"demo", "bogus"}, `unknown command "bogus" for "norsk-ctl demo"`},
		{"unknown completion command", []string{"completion", "bogus"}, `unknown command "bogus" for "norsk-ctl completion"`},
		{"misspelt command", []string{"job", "creat"}, `unknown command "creat" for "norsk-ctl job" (did you mean create?)`},
		{"unreadable file", []string{"job", "create", "-f", "/nonexistent.json"}, "--file (-f) /nonexistent.json: cannot read the job file: no such file or directory"},
		{"unknown mode", []string{"--mode=workr"}, `--mode: unknown mode "workr"`},
		{"worker without token or identity", []string{"--mode=worker", "--state-dir", t.TempDir()}, "--manager-url without --token: --state-dir "},
		{"bad slot tag", []string{"slot", "register", "r", "--tag", "=x"}, `--tag: "=x" is not key=value`},
		{"bad listen", []string{"demo", "http", "--listen", "nonsense"}, `--listen: "nonsense" is not host:port`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := runCtl(t, testCtx(), "", append([]string{"--manager-url", addr}, tc.args...)...)
			if r.code != ctlExitUsage || !strings.Contains(r.stderr, tc.want) {
				t.Fatalf("exit %d, stderr %q; want exit %d and %q", r.code, r.stderr, ctlExitUsage, tc.want)
			}
		})
	}
	r := runCtl(t, testCtx(), "", "--manager-url", "a:1,,b", "node", "list")
	if r.code != ctlExitUsage || !strings.Contains(r.stderr, "--manager-url") {
		t.Errorf("bad --manager-url: %+v", r)
	}
}

// TestCtl_GroupWithoutCommand: a command group alone prints its help and
// exits 0.
func TestCtl_GroupWithoutCommand(t *testing.T) {
	for _, group := range []string{"job", "node", "slot", "demo"} {
		t.Run(group, func(t *testing.T) {
			r := runCtl(t, testCtx(), "", group)
			if r.code != 0 || !strings.Contains(r.stdout, "norsk-ctl "+group+" [command]") || r.stderr != "" {
				t.Fatalf("norsk-ctl %s: %+v", group, r)
			}
		})
	}
}

// TestCtl_StatusCodes checks the message and exit code of each gRPC code.
func TestCtl_StatusCodes(t *testing.T) {
	fake, addr := newTestFake(t)
	mustRun(t, addr, "job", "create", "-f", exampleJob)
	cases := []struct {
		name   string
		method string // RPC to fail; "" for the fake's own answer
		code   codes.Code
		args   []string
		exit   int
		want   string
	}{
		{"job not found", "", 0, []string{"job", "get", "nope"}, ctlExitNotFound, `not found: job nope (manager said: job "nope" not found)`},
		{"job exists", "", 0, []string{"job", "create", "-f", exampleJob}, ctlExitExists, "already exists: job hello-http"},
		{"slot not found", "", 0, []string{"slot", "deregister", "node-9"}, ctlExitNotFound, "not found: cluster slot node-9"},
		{"node not found", "", 0, []string{"node", "terminate", "n9"}, ctlExitNotFound, "not found: node n9"},
		{"instance not found", "", 0, []string{"job", "stop", "hello-http", "--node", "n9"}, ctlExitNotFound, "not found: job hello-http as primary on node n9"},
		{"unavailable", "ListNodes", codes.Unavailable, []string{"node", "list"}, ctlExitUnavailable, "manager unavailable at " + addr + " (manager said: no quorum)"},
		{"deadline", "ListNodes", codes.DeadlineExceeded, []string{"node", "list"}, ctlExitUnavailable, "within --timeout"},
		{"unauthenticated", "Version", codes.Unauthenticated, []string{"version"}, ctlExitUnauthorised, "not authorised"},
		{"invalid", "JobById", codes.InvalidArgument, []string{"job", "get", "x"}, ctlExitUsage, "invalid request: job x (manager said: invalid)"},
		{"precondition", "CompleteJob", codes.FailedPrecondition, []string{"job", "complete", "x"}, ctlExitPrecondition, "precondition failed: job x"},
		{"exhausted", "CreateMockNode", codes.ResourceExhausted, []string{"node", "mock-create", "m"}, ctlExitFailure, "resource exhausted: mock node m (manager said: pool empty)"},
		{"internal", "ListClusterNodes", codes.Internal, []string{"slot", "list"}, ctlExitFailure, "internal (manager said: boom)"},
	}
	msgs := map[codes.Code]string{
		codes.Unavailable: "no quorum", codes.DeadlineExceeded: "slow", codes.Unauthenticated: "bad token",
		codes.InvalidArgument: "invalid", codes.FailedPrecondition: "wrong state", codes.ResourceExhausted: "pool empty",
		codes.Internal: "boom",
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if tc.method != "" {
				fake.Fail(tc.method, status.Error(tc.code, msgs[tc.code]))
				defer fake.Fail(tc.method, nil)
			}
			r := runCtl(t, testCtx(), "", append([]string{"--manager-url", addr}, tc.args...)...)
			if r.code != tc.exit || !strings.Contains(r.stderr, tc.want) {
				t.Fatalf("exit %d, stderr %q; want exit %d and %q", r.code, r.stderr, tc.exit, tc.want)
			}
		})
	}
	t.Run("manager down", func(t *testing.T) {
		down := clienttest.UnusedAddr(t)
		r := runCtl(t, testCtx(), "", "--manager-url", down, "--timeout", "5s", "node", "list")
		if r.code != ctlExitUnavailable || !strings.Contains(r.stderr, "manager unavailable at "+down) {
			t.Fatalf("exit %d, stderr %q", r.code, r.stderr)
		}
	})
}

// TestCtl_ManagerURLFromEnv checks NORSK_MANAGER_URL and that the flag
// overrides it.
func TestCtl_ManagerURLFromEnv(t *testing.T) {
	_, addr := newTestFake(t)
	t.Setenv(ctlEnvManagerURL, addr)
	r := runCtl(t, testCtx(), "", "node", "list")
	if r.code != 0 || r.stdout != "no nodes\n" {
		t.Fatalf("with %s: %+v", ctlEnvManagerURL, r)
	}
	down := clienttest.UnusedAddr(t)
	r = runCtl(t, testCtx(), "", "--manager-url", down, "node", "list")
	if r.code != ctlExitUnavailable {
		t.Fatalf("--manager-url did not override %s: %+v", ctlEnvManagerURL, r)
	}
}
