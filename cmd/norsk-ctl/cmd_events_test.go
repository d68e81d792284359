package main

import (
	"context"
	"regexp"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/norsk-oss/norsk-manager/client/clienttest"
	"github.com/norsk-oss/norsk-manager/proto/commonpb"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
)

// TestCtl_Events follows the stream until interrupted, across a broken
// stream, and checks the lines and the resume hint.
func TestCtl_Events(t *testing.T) {
	fake, addr := newTestFake(t)
	mustRun(t, addr, "node", "mock-create", "n1")
	mustRun(t, addr, "job", "create", "-f", exampleJob)

	ctx, cancel := context.WithCancel(testCtx())
	out, errOut := &notifyBuffer{}, &notifyBuffer{}
	doneCh := make(chan ctlResult, 1)
	go func() { doneCh <- runCtlTo(t, ctx, "", out, errOut, "--manager-url", addr, "events", "--window", "2h") }()

	out.waitFor(t, "initial_data_complete")
	mustRun(t, addr, "job", "start", "hello-http", "--node", "n1")
	out.waitFor(t, "last: running role=primary node=n1")
	fake.BreakStreams(status.Error(codes.Unavailable, "failover"))
	mustRun(t, addr, "job", "delete", "hello-http")
	out.waitFor(t, "job_deleted")
	cancel()
	r := <-doneCh

	if r.code != 0 {
		t.Fatalf("events exited %d: %s", r.code, r.stderr)
	}
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	wantRe := []string{
		`^2026-05-04T12:00:00Z  #3     node_running            node=n1 address=127\.0\.0\.1$`,
		`^2026-05-04T12:00:00Z  #3     job_active              job=hello-http state=active last: created$`,
		`^2026-05-04T12:00:00Z  #3     initial_data_complete   snapshot complete$`,
		`^2026-05-04T12:00:00Z  #4     job_updated             job=hello-http state=active last: running role=primary node=n1$`,
		`^2026-05-04T12:00:00Z  #5     job_deleted             job=hello-http$`,
	}
	if len(lines) != len(wantRe) {
		t.Fatalf("events printed %d lines, want %d:\n%s", len(lines), len(wantRe), r.stdout)
	}
	for i, re := range wantRe {
		if !regexp.MustCompile(re).MatchString(lines[i]) {
			t.Errorf("line %d = %q, want match of %s", i, lines[i], re)
		}
	}
	if !strings.Contains(r.stderr, "event stream broken; reconnecting") ||
		!strings.Contains(r.stderr, "stopped after log index 5 (continue with: norsk-ctl events --resume-from 5)") {
		t.Errorf("stderr = %q", r.stderr)
	}
	reqs := fake.StreamRequests()
	if len(reqs) != 2 || reqs[0].GetPendingWindowS() != 7200 || reqs[1].GetResumeFromIndex() != 4 {
		t.Errorf("stream requests = %v", reqs)
	}
}

// TestCtl_EventsJSONResume prints JSON lines from a resume index.
func TestCtl_EventsJSONResume(t *testing.T) {
	fake, addr := newTestFake(t)
	mustRun(t, addr, "node", "mock-create", "n1") // log indexes 1 and 2
	ctx, cancel := context.WithCancel(testCtx())
	out, errOut := &notifyBuffer{}, &notifyBuffer{}
	doneCh := make(chan ctlResult, 1)
	go func() {
		doneCh <- runCtlTo(t, ctx, "", out, errOut, "--manager-url", addr, "events", "--resume-from", "1", "--json")
	}()
	got := out.waitFor(t, "\n")
	cancel()
	r := <-doneCh
	if r.code != 0 {
		t.Fatalf("events exited %d: %s", r.code, r.stderr)
	}
	first := strings.SplitN(got, "\n", 2)[0]
	if !strings.Contains(first, `"nodeStarted"`) || !strings.Contains(first, `"logIndex":"2"`) {
		t.Errorf("first line %q, want node_started at index 2", first)
	}
	if reqs := fake.StreamRequests(); len(reqs) != 1 || reqs[0].GetResumeFromIndex() != 1 {
		t.Errorf("stream requests = %v", reqs)
	}
}

// TestCtl_EventsPrintsEventTime: a replayed event is printed with the time
// it happened (its event_time), not the time it was received.
func TestCtl_EventsPrintsEventTime(t *testing.T) {
	fake, addr := newTestFake(t)
	then := time.Date(2025, 12, 31, 23, 59, 58, 0, time.UTC)
	fake.Publish(&managerpb.EventStreamEvent{EventTime: timestamppb.New(then), Event: &managerpb.EventStreamEvent_JobDeleted{
		JobDeleted: &managerpb.JobDeleted{JobId: &commonpb.JobId{JobId: "old"}}}})
	ctx, cancel := context.WithCancel(testCtx())
	out, errOut := &notifyBuffer{}, &notifyBuffer{}
	doneCh := make(chan ctlResult, 1)
	go func() {
		doneCh <- runCtlTo(t, ctx, "", out, errOut, "--manager-url", addr, "events", "--resume-from", "0")
	}()
	got := out.waitFor(t, "\n")
	cancel()
	if r := <-doneCh; r.code != 0 {
		t.Fatalf("events exited %d: %s", r.code, r.stderr)
	}
	if want := "2025-12-31T23:59:58Z  #1     job_deleted             job=old\n"; got != want {
		t.Errorf("printed %q, want %q (the event's time, not the clock's %s)", got, want, ctlTestNow.Format(time.RFC3339))
	}
}

// TestCtl_EventsManagerDown: events against a manager that never answered
// fails like the other commands instead of retrying forever.
func TestCtl_EventsManagerDown(t *testing.T) {
	down := clienttest.UnusedAddr(t)
	r := runCtl(t, testCtx(), "", "--manager-url", down, "--timeout", "5s", "events")
	if r.code != ctlExitUnavailable || !strings.Contains(r.stderr, "manager unavailable at "+down) {
		t.Fatalf("exit %d, stderr %q; want exit %d, manager unavailable", r.code, r.stderr, ctlExitUnavailable)
	}
	if strings.Contains(r.stderr, "reconnecting") {
		t.Errorf("events retried a manager it never reached: %q", r.stderr)
	}
}

// TestCtl_EventsManagerWithoutVersion: a manager that answers, even
// without the Version call the reachability check uses, is followed.
func TestCtl_EventsManagerWithoutVersion(t *testing.T) {
	fake, addr := newTestFake(t)
	fake.Fail("Version", status.Error(codes.Unimplemented, "unknown method Version"))
	mustRun(t, addr, "node", "mock-create", "n1")
	ctx, cancel := context.WithCancel(testCtx())
	out, errOut := &notifyBuffer{}, &notifyBuffer{}
	doneCh := make(chan ctlResult, 1)
	go func() { doneCh <- runCtlTo(t, ctx, "", out, errOut, "--manager-url", addr, "events") }()
	out.waitFor(t, "initial_data_complete")
	cancel()
	if r := <-doneCh; r.code != 0 {
		t.Fatalf("events exited %d: %s", r.code, r.stderr)
	}
}

// TestCtl_EventsHelpExitCodes: the help of events says what an interrupted
// events exits with (0), not the 130 of the other commands.
func TestCtl_EventsHelpExitCodes(t *testing.T) {
	r := runCtl(t, testCtx(), "", "events", "--help")
	if r.code != 0 {
		t.Fatalf("events --help: %+v", r)
	}
	if strings.Contains(r.stdout, "130  interrupted") || !strings.Contains(r.stdout, "0    success, including the end by Ctrl-C") {
		t.Errorf("events --help does not document exit code 0 on Ctrl-C:\n%s", r.stdout)
	}
	r = runCtl(t, testCtx(), "", "job", "--help")
	if !strings.Contains(r.stdout, "130  interrupted (Ctrl-C)") {
		t.Errorf("job --help lost exit code 130:\n%s", r.stdout)
	}
}
