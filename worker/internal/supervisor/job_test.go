package supervisor

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/norsk-oss/norsk-manager/proto/commonpb"
	"github.com/norsk-oss/norsk-manager/proto/workerpb"
	"github.com/norsk-oss/norsk-manager/worker"
	"github.com/norsk-oss/norsk-manager/worker/internal/emit"
)

// waitFor bounds every wait of these tests; they wait for events, never
// for time to pass.
const waitFor = 10 * time.Second

type harness struct {
	t    *testing.T
	d    *fakeDriver
	j    *Job
	ev   <-chan worker.Event
	done chan struct{}
	ran  chan struct{}
}

// start runs a job of services (start order) over a fakeDriver whose
// services in healthy report health.
func start(t *testing.T, services []Service, healthy ...int) *harness {
	t.Helper()
	d := newFakeDriver(len(services))
	for _, i := range healthy {
		d.healthcheck[i] = true
	}
	done := make(chan struct{})
	em := emit.New(256, done, slog.New(slog.DiscardHandler))
	key := worker.JobKey{JobID: "j1", Role: "primary"}
	j := New(Config{
		Key:      key,
		Def:      &workerpb.WorkerJob{},
		Services: services,
		Driver:   d,
		Emit:     em,
		Ports:    func() worker.PortMappings { return worker.PortMappings{} },
		Done:     done,
		// a restart is due at once: tests wait for launches, not time
		RestartBackoff: time.Millisecond, MaxRestartBackoff: time.Millisecond,
		FailStopGrace: time.Second, StartNote: "starting",
	})
	h := &harness{t: t, d: d, j: j, ev: em.Ch(), done: done, ran: make(chan struct{})}
	go func() { defer close(h.ran); j.Run() }()
	t.Cleanup(func() {
		close(done)
		select {
		case <-h.ran:
		case <-time.After(waitFor):
			t.Error("the job's goroutine did not return after shutdown")
		}
	})
	return h
}

// launch waits until service svc is launched.
func (h *harness) launch(svc int) {
	h.t.Helper()
	select {
	case got := <-h.d.launchCh:
		if got != svc {
			h.t.Fatalf("launched service %d, want %d (order so far %v)", got, svc, h.d.order())
		}
	case <-time.After(waitFor):
		h.t.Fatalf("service %d not launched (order so far %v)", svc, h.d.order())
	}
}

// notLaunched checks that nothing was launched beyond what was waited for.
func (h *harness) notLaunched() {
	h.t.Helper()
	select {
	case got := <-h.d.launchCh:
		h.t.Fatalf("service %d launched too early", got)
	default:
	}
}

// lifecycle waits for the next lifecycle event.
func (h *harness) lifecycle() worker.Event {
	h.t.Helper()
	deadline := time.After(waitFor)
	for {
		select {
		case ev := <-h.ev:
			if ev.Kind != worker.EventInfo {
				return ev
			}
		case <-deadline:
			h.t.Fatal("no lifecycle event")
		}
	}
}

func svc(name string, deps ...Dependency) Service {
	return Service{Name: name, DependsOn: deps, Restart: commonpb.Service_NEVER}
}

func TestJob_Start_OrderAndStarted(t *testing.T) {
	h := start(t, []Service{svc("a"), svc("b", Dependency{"a", ConditionStarted}), svc("c")})
	h.launch(0)
	h.launch(1)
	h.launch(2)
	if ev := h.lifecycle(); ev.Kind != worker.EventStarted {
		t.Fatalf("event %v, want started", ev.Kind)
	}
	if !h.j.Started() {
		t.Error("Started() false after job_started")
	}
}

func TestJob_Start_HealthyWait(t *testing.T) {
	h := start(t, []Service{svc("a"), svc("b", Dependency{"a", ConditionHealthy})}, 0)
	h.launch(0)
	a := h.d.run(0)
	a.healthCh <- HealthStarting
	h.notLaunched()
	a.healthCh <- HealthHealthy
	h.launch(1)
	if ev := h.lifecycle(); ev.Kind != worker.EventStarted {
		t.Fatalf("event %v, want started", ev.Kind)
	}
}

func TestJob_Start_DependencyFailures(t *testing.T) {
	cases := []struct {
		name    string
		cond    Condition
		health  bool
		hurt    func(a *fakeHandle)
		wantErr string
	}{
		{"unhealthy before healthy", ConditionHealthy, true, func(a *fakeHandle) { a.healthCh <- HealthUnhealthy },
			`service "b": dependency "a" is unhealthy`},
		{"exit before healthy", ConditionHealthy, true, func(a *fakeHandle) { a.exit(4) },
			`service "b": dependency "a" exited with code 4 before it was healthy`},
		{"no healthcheck", ConditionHealthy, false, func(*fakeHandle) {},
			`service "b": dependency "a" has no healthcheck`},
		{"completed with code 3", ConditionCompletedSuccessfully, false, func(a *fakeHandle) { a.exit(3) },
			`service "b": dependency "a" did not complete successfully: it exited with code 3`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var healthy []int
			if tc.health {
				healthy = []int{0}
			}
			h := start(t, []Service{svc("a"), svc("b", Dependency{"a", tc.cond})}, healthy...)
			h.launch(0)
			tc.hurt(h.d.run(0))
			ev := h.lifecycle()
			if ev.Kind != worker.EventFailed || !strings.Contains(ev.Reason, tc.wantErr) {
				t.Fatalf("event %v %q, want failed with %q", ev.Kind, ev.Reason, tc.wantErr)
			}
			if _, err := h.j.AwaitStart(context.Background()); err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("AwaitStart: %v, want %q", err, tc.wantErr)
			}
			h.notLaunched()
			if !h.d.torn {
				t.Error("the job was not torn down")
			}
		})
	}
}

func TestJob_Start_CompletedSuccessfully(t *testing.T) {
	h := start(t, []Service{svc("init"), svc("app", Dependency{"init", ConditionCompletedSuccessfully})})
	h.launch(0)
	h.notLaunched()
	h.d.run(0).exit(0)
	h.launch(1)
	if ev := h.lifecycle(); ev.Kind != worker.EventStarted {
		t.Fatalf("event %v, want started", ev.Kind)
	}
	// init (NEVER, exit 0) completed; the job ends when app does too.
	h.d.run(1).exit(0)
	if ev := h.lifecycle(); ev.Kind != worker.EventStopped {
		t.Fatalf("event %v %q, want stopped (every service completed)", ev.Kind, ev.Reason)
	}
}

func TestJob_Stop_DuringHealthyWait(t *testing.T) {
	h := start(t, []Service{svc("a"), svc("b", Dependency{"a", ConditionHealthy})}, 0)
	h.launch(0)
	stopped := make(chan error, 1)
	go func() { stopped <- h.j.Stop(context.Background(), time.Second) }()
	if ev := h.lifecycle(); ev.Kind != worker.EventStopped {
		t.Fatalf("event %v %q, want stopped", ev.Kind, ev.Reason)
	}
	if err := <-stopped; err != nil {
		t.Errorf("Stop: %v", err)
	}
	if _, err := h.j.AwaitStart(context.Background()); !errors.Is(err, ErrStoppedWhileStarting) {
		t.Errorf("AwaitStart: %v, want ErrStoppedWhileStarting", err)
	}
	select {
	case <-h.d.run(0).stopped:
	default:
		t.Error("service a was not stopped")
	}
	h.notLaunched()
}

func TestJob_RestartPolicy_ThenFail(t *testing.T) {
	s := svc("crash")
	s.Restart, s.RestartCount, s.RestartPeriod = commonpb.Service_ON_FAILURE, 2, time.Minute
	h := start(t, []Service{s})
	h.launch(0)
	if ev := h.lifecycle(); ev.Kind != worker.EventStarted {
		t.Fatalf("event %v, want started", ev.Kind)
	}
	for range 2 {
		h.d.run(0).exit(3)
		h.launch(0)
	}
	h.d.run(0).exit(3)
	ev := h.lifecycle()
	want := `service "crash" exited with code 3 and was already restarted 2 times within 1m0s`
	if ev.Kind != worker.EventFailed || !strings.Contains(ev.Reason, want) {
		t.Fatalf("event %v %q, want failed with %q", ev.Kind, ev.Reason, want)
	}
	if got := h.d.order(); !slices.Equal(got, []int{0, 0, 0}) {
		t.Errorf("launches %v, want three runs of service 0", got)
	}
}

func TestJob_Update_KeepsInstance(t *testing.T) {
	h := start(t, []Service{svc("a")})
	h.launch(0)
	h.lifecycle()
	if err := h.j.Update(context.Background(), &workerpb.WorkerJob{InstanceId: "other"}); err != nil {
		t.Fatal(err)
	}
	if got := h.j.Snapshot().Job.GetInstanceId(); got != "" {
		t.Errorf("instance id %q after Update, want the original (empty)", got)
	}
}

func TestParseCondition(t *testing.T) {
	for in, want := range map[string]Condition{"": ConditionStarted, "service_healthy": ConditionHealthy,
		"completed_successfully": ConditionCompletedSuccessfully, "started": ConditionStarted} {
		if got, err := ParseCondition(in); err != nil || got != want {
			t.Errorf("ParseCondition(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	if _, err := ParseCondition("ready"); !errors.Is(err, worker.ErrInvalidJob) {
		t.Errorf("ParseCondition(ready): %v, want ErrInvalidJob", err)
	}
}

// StopDeferred is true for a Stop that came during the start phase (it
// waited for the start to end), false for one of a running job.
func TestJob_StopDeferred(t *testing.T) {
	cases := []struct {
		name     string
		services []Service
		healthy  []int
		started  bool // wait for job_started before the Stop
		want     bool
	}{
		{"during a healthy wait", []Service{svc("a"), svc("b", Dependency{"a", ConditionHealthy})}, []int{0}, false, true},
		{"of a running job", []Service{svc("a")}, nil, true, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := start(t, tc.services, tc.healthy...)
			h.launch(0)
			if tc.started {
				if ev := h.lifecycle(); ev.Kind != worker.EventStarted {
					t.Fatalf("event %v, want started", ev.Kind)
				}
			}
			if h.j.StopDeferred() {
				t.Fatal("StopDeferred before any Stop")
			}
			if err := h.j.Stop(context.Background(), time.Second); err != nil {
				t.Fatalf("Stop: %v", err)
			}
			if got := h.j.StopDeferred(); got != tc.want {
				t.Errorf("StopDeferred = %v, want %v", got, tc.want)
			}
		})
	}
}

// TestJob_Start_WaitsForHealthchecks: job_started comes only once every
// service with a healthcheck is healthy (compose up --wait), so a move
// hands over to a stack that passes its healthchecks; one that turns
// unhealthy or exits first fails the job naming it.
func TestJob_Start_WaitsForHealthchecks(t *testing.T) {
	t.Run("healthy", func(t *testing.T) {
		h := start(t, []Service{svc("a"), svc("b")}, 1)
		h.launch(0)
		h.launch(1)
		h.d.run(1).healthCh <- HealthStarting
		// The start phase says it waits, and nothing but info comes
		// before b is healthy.
		want := `waiting for service "b" to be healthy`
		deadline := time.After(waitFor)
		for waiting := false; !waiting; {
			select {
			case ev := <-h.ev:
				if ev.Kind != worker.EventInfo {
					t.Fatalf("%v %q before b was healthy", ev.Kind, ev.Reason)
				}
				waiting = ev.Info.GetComposeMessage().GetText() == want
			case <-deadline:
				t.Fatalf("no job info %q", want)
			}
		}
		if h.j.Started() {
			t.Fatal("Started() before b was healthy")
		}
		h.d.run(1).healthCh <- HealthHealthy
		if ev := h.lifecycle(); ev.Kind != worker.EventStarted {
			t.Fatalf("event %v %q, want started", ev.Kind, ev.Reason)
		}
	})
	cases := []struct {
		name    string
		hurt    func(b *fakeHandle)
		wantErr string
	}{
		{"unhealthy", func(b *fakeHandle) { b.healthCh <- HealthUnhealthy }, `service "b" is unhealthy`},
		{"exit", func(b *fakeHandle) { b.exit(2) }, `service "b" exited with code 2 before it was healthy`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := start(t, []Service{svc("a"), svc("b")}, 1)
			h.launch(0)
			h.launch(1)
			tc.hurt(h.d.run(1))
			ev := h.lifecycle()
			if ev.Kind != worker.EventFailed || !strings.Contains(ev.Reason, tc.wantErr) {
				t.Fatalf("event %v %q, want failed with %q", ev.Kind, ev.Reason, tc.wantErr)
			}
		})
	}
}
