package worker_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/norsk-oss/norsk-manager/proto/commonpb"
	"github.com/norsk-oss/norsk-manager/proto/workerauth"
	"github.com/norsk-oss/norsk-manager/proto/workerpb"
	"github.com/norsk-oss/norsk-manager/worker"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// refusal is a registration refusal as cluster/gateway sends it: a status
// with an ErrorInfo reason in the manager's domain.
func refusal(t *testing.T, code codes.Code, reason, msg string) error {
	t.Helper()
	st, err := status.New(code, msg).WithDetails(&errdetails.ErrorInfo{Reason: reason, Domain: workerauth.ErrorDomain})
	if err != nil {
		t.Fatal(err)
	}
	return st.Err()
}

// runNodeWithJobs runs a worker with token tok over dir until it has
// registered as the fake manager's node and runs jobs, then stops it and
// its runtime, leaving the jobs running: a worker killed with its jobs up.
func runNodeWithJobs(t *testing.T, m *fakeManager, dir, tok string, jobs ...*workerpb.WorkerJob) {
	t.Helper()
	rt := newRuntime(t, filepath.Join(dir, "process"))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	a := newAgent(t, rt, func(c *worker.Config) { c.Token, c.ManagerURLs, c.StateDir = tok, []string{m.addr}, dir })
	done := runAgent(ctx, a)
	waitUntil(t, "registered", func() bool { _, ok := a.Identity(); return ok })
	s, _ := open(t, a.Addr().String(), m.nodeID, m.credential, 1)
	for _, job := range jobs {
		s.send(t, provision(job, 1))
		s.waitFor(t, "job_started "+worker.KeyOf(job).String(), isStarted(worker.KeyOf(job)))
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	rt.Shutdown()
}

func listedKeys(rt worker.Runtime) []string {
	var keys []string
	for _, rj := range rt.List() {
		keys = append(keys, rj.Key().String())
	}
	slices.Sort(keys)
	return keys
}

// TestAgent_Refused_RetiredNodeStopsItsJobs: a worker restarted after its
// node was retired while it was down — its slot deregistered (the revoked
// reason, for its token or its credential alone) or the node terminated —
// is refused, stops every job it runs (nobody will manage them again),
// says which and why, and returns the refusal. Every other refusal, and a
// revoked token that is not the stored identity's (those jobs belong to
// another node), leaves the jobs running: a manager restored from an old
// backup may not know a slot that is still in use.
func TestAgent_Refused_RetiredNodeStopsItsJobs(t *testing.T) {
	cases := []struct {
		name     string
		token    string // at the restart; the node registered with "tok"
		code     codes.Code
		reason   string
		stops    bool
		mentions string // in the refusal's message as the manager words it
	}{
		{"slot deregistered, token", "tok", codes.Unauthenticated, workerauth.ReasonTokenRevoked, true, "registration token revoked"},
		{"slot deregistered, credential alone", "", codes.Unauthenticated, workerauth.ReasonTokenRevoked, true, "node credential revoked"},
		{"node terminated", "", codes.PermissionDenied, workerauth.ReasonNodeTerminated, true, "terminated by an operator"},
		{"node terminated, token", "tok", codes.PermissionDenied, workerauth.ReasonNodeTerminated, true, "terminated by an operator"},
		{"token unknown", "tok", codes.Unauthenticated, workerauth.ReasonTokenUnknown, false, "unknown registration token"},
		{"credential unknown", "", codes.Unauthenticated, workerauth.ReasonCredentialUnknown, false, "unknown or revoked node credential"},
		{"slot bound", "", codes.PermissionDenied, workerauth.ReasonSlotBound, false, "bound to another worker"},
		{"identity in use", "", codes.PermissionDenied, workerauth.ReasonIdentityInUse, false, "live session"},
		{"revoked token of another slot", "other-tok", codes.Unauthenticated, workerauth.ReasonTokenRevoked, false, "registration token revoked"},
		{"revoked, no reason (older manager)", "", codes.Unauthenticated, "", false, "revoked"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			m := newFakeManager(t, "node-r", "cred-r")
			dir := t.TempDir()
			runNodeWithJobs(t, m, dir, "tok", sleeper("job-b"), sleeper("job-a"))

			m.mu.Lock()
			if tc.reason == "" {
				m.mu.reject = status.Error(tc.code, tc.mentions)
			} else {
				m.mu.reject = refusal(t, tc.code, tc.reason, tc.mentions+": node node-r")
			}
			m.mu.Unlock()
			rt := newRuntime(t, filepath.Join(dir, "process"))
			logs := &logRecorder{}
			a := newAgent(t, rt, func(c *worker.Config) {
				c.Token, c.ManagerURLs, c.StateDir = tc.token, []string{m.addr}, dir
				c.Logger = slog.New(slog.NewTextHandler(logs, nil))
			})
			err := <-runAgent(context.Background(), a)
			rej, ok := errors.AsType[*worker.RegistrationError](err)
			if !ok {
				t.Fatalf("Run = %v, want a *RegistrationError", err)
			}
			if !strings.Contains(err.Error(), tc.mentions) {
				t.Errorf("err %q lacks the manager's message %q", err, tc.mentions)
			}
			both := []string{"job-a/primary", "job-b/primary"}
			if !tc.stops {
				if rej.NodeRetired || len(rej.Stopped) > 0 || strings.Contains(err.Error(), "stopped") {
					t.Errorf("refusal %+v stopped jobs; err %q", rej, err)
				}
				if got := listedKeys(rt); !slices.Equal(got, both) {
					t.Errorf("runtime runs %v after the refusal, want %v (untouched)", got, both)
				}
				return
			}
			if !rej.NodeRetired || rej.NodeID != "node-r" {
				t.Errorf("NodeRetired %v, NodeID %q; want true, node-r", rej.NodeRetired, rej.NodeID)
			}
			var stopped []string
			for _, k := range rej.Stopped {
				stopped = append(stopped, k.String())
			}
			if !slices.Equal(stopped, both) || len(rej.NotStopped) != 0 {
				t.Errorf("Stopped %v, NotStopped %v; want %v and none", stopped, rej.NotStopped, both)
			}
			if got := listedKeys(rt); len(got) != 0 {
				t.Errorf("runtime still runs %v", got)
			}
			for _, want := range []string{"stopped the 2 job(s) it ran for node node-r (job-a/primary, job-b/primary)", "no manager will manage them again"} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("err %q lacks %q", err, want)
				}
			}
			for _, want := range []string{"refused this node for good", "reason=" + tc.reason, "job-a/primary, job-b/primary",
				`msg="stopped job of the refused node" component=worker node_id=node-r reason=` + tc.reason + " job_id=job-a"} {
				if !strings.Contains(logs.String(), want) {
					t.Errorf("logs lack %q:\n%s", want, logs)
				}
			}
		})
	}
}

// stubbornJob is a one-service job whose service, sent SIGTERM, writes
// dir/termed and exits only once dir/release exists: its stop is in
// progress for as long as the test wants.
func stubbornJob(id, dir string) *workerpb.WorkerJob {
	return &workerpb.WorkerJob{
		JobId: &commonpb.JobId{JobId: id},
		Role:  "primary",
		Services: []*commonpb.Service{{
			Name: "app",
			Command: fmt.Sprintf("trap 'touch %[1]s/termed; while [ ! -f %[1]s/release ]; do sleep 0.05; done; exit 0' TERM; "+
				"while :; do sleep 0.05; done", dir),
		}},
	}
}

// TestAgent_Refused_RetiredNode_StopSurvivesRestart: a worker whose stop of
// a retired node's jobs is cut short (its context ends while a service is
// still exiting: a SIGTERM, or the process dying) says which jobs are not
// stopped yet; the next worker on the state directory, refused again,
// finishes the stop (the runtime's record says the job is stopping).
func TestAgent_Refused_RetiredNode_StopSurvivesRestart(t *testing.T) {
	m := newFakeManager(t, "node-d", "cred-d")
	dir, jobDir := t.TempDir(), t.TempDir()
	job := stubbornJob("job-s", jobDir)
	runNodeWithJobs(t, m, dir, "tok", job)
	m.mu.Lock()
	m.mu.reject = refusal(t, codes.PermissionDenied, workerauth.ReasonNodeTerminated, "cluster slot \"s\" (node node-d) was terminated by an operator")
	m.mu.Unlock()

	rt := newRuntime(t, filepath.Join(dir, "process"))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	a := newAgent(t, rt, func(c *worker.Config) {
		c.ManagerURLs, c.StateDir, c.StopGrace = []string{m.addr}, dir, time.Hour
	})
	done := runAgent(ctx, a)
	waitUntil(t, "the service got SIGTERM", func() bool { _, err := os.Stat(filepath.Join(jobDir, "termed")); return err == nil })
	cancel() // SIGTERM of the worker while its service is still exiting
	err := <-done
	rej, ok := errors.AsType[*worker.RegistrationError](err)
	if !ok || !rej.NodeRetired || len(rej.NotStopped) != 1 || rej.NotStopped[0] != worker.KeyOf(job) || len(rej.Stopped) != 0 {
		t.Fatalf("Run = %v; want the retiring refusal with job-s/primary not stopped", err)
	}
	if !strings.Contains(err.Error(), "1 job(s) of node node-d are not stopped yet (job-s/primary") ||
		!strings.Contains(err.Error(), "stops them") {
		t.Errorf("err %q does not say the stop is unfinished and what finishes it", err)
	}
	rt.Shutdown() // the worker process ends; the service is still up

	rt2 := newRuntime(t, filepath.Join(dir, "process"))
	a2 := newAgent(t, rt2, func(c *worker.Config) { c.ManagerURLs, c.StateDir = []string{m.addr}, dir })
	done2 := runAgent(context.Background(), a2)
	if err := os.WriteFile(filepath.Join(jobDir, "release"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	err = <-done2
	if rej, ok := errors.AsType[*worker.RegistrationError](err); !ok || !rej.NodeRetired || len(rej.NotStopped) != 0 {
		t.Fatalf("second Run = %v; want the retiring refusal with every job stopped", err)
	}
	if got := listedKeys(rt2); len(got) != 0 {
		t.Errorf("the restarted worker still runs %v", got)
	}
}
