package supervisor

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/norsk-oss/norsk-manager/proto/workerpb"
	"github.com/norsk-oss/norsk-manager/worker"
	"github.com/norsk-oss/norsk-manager/worker/internal/emit"
)

// restored runs a Restored job of services from rec over d; before, if
// set, runs before the job's goroutine starts.
func restored(t *testing.T, d *fakeDriver, services []Service, rec Record, before func(*Job)) *harness {
	t.Helper()
	done := make(chan struct{})
	em := emit.New(256, done, slog.New(slog.DiscardHandler))
	rec.Def = &workerpb.WorkerJob{}
	j := Restored(Config{
		Key: worker.JobKey{JobID: "j1", Role: "primary"}, Def: rec.Def, Services: services, Driver: d, Emit: em,
		Ports: func() worker.PortMappings { return worker.PortMappings{} }, Done: done,
		RestartBackoff: time.Millisecond, MaxRestartBackoff: time.Millisecond, FailStopGrace: time.Second,
	}, rec)
	h := &harness{t: t, d: d, j: j, ev: em.Ch(), done: done, ran: make(chan struct{})}
	if before != nil {
		before(j)
	}
	go func() { defer close(h.ran); j.Run() }()
	t.Cleanup(func() {
		close(done)
		<-h.ran
	})
	return h
}

func TestJob_Restored_Phases(t *testing.T) {
	services := []Service{svc("a"), svc("b")}
	running := []ServiceRecord{{}, {}}
	cases := []struct {
		name     string
		phase    Phase
		prep     func(d *fakeDriver)
		before   func(j *Job)
		want     worker.EventKind
		reason   string
		launches int // adopted or restarted runs
	}{
		{"starting fails", PhaseStarting, nil, nil, worker.EventFailed, "the worker restarted while the job was starting", 2},
		{"stopping finishes the stop", PhaseStopping, nil, nil, worker.EventStopped, "", 2},
		{"failing finishes the failure", PhaseFailing, nil, nil, worker.EventFailed, "boom", 2},
		{"running, container gone", PhaseRunning, func(d *fakeDriver) { d.adoptErr[1] = errors.New("its container was removed") }, nil,
			worker.EventFailed, `service "b": its container was removed`, 1},
		{"running, stop asked before adoption", PhaseRunning, nil, func(j *Job) {
			if !j.RequestStop(context.Background(), time.Second) {
				t.Error("RequestStop refused")
			}
		}, worker.EventStopped, "", 2},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			d := newFakeDriver(2)
			if tc.prep != nil {
				tc.prep(d)
			}
			h := restored(t, d, services, Record{Phase: tc.phase, FailReason: "boom", StopGrace: time.Second, Services: running}, tc.before)
			ev := h.lifecycle()
			if ev.Kind != tc.want || !strings.Contains(ev.Reason, tc.reason) {
				t.Fatalf("event %v %q, want %v %q", ev.Kind, ev.Reason, tc.want, tc.reason)
			}
			if got := len(d.order()); got != tc.launches {
				t.Errorf("%d runs adopted, want %d", got, tc.launches)
			}
			if !d.torn {
				t.Error("not torn down")
			}
		})
	}
}

func TestJob_Restored_RunningKeepsGoing(t *testing.T) {
	d := newFakeDriver(2)
	d.noRun[1] = true // b was waiting for a restart
	s := []Service{svc("a"), svc("b")}
	s[1].Restart = 1 // ON_FAILURE
	s[1].RestartCount, s[1].RestartPeriod = 3, time.Minute
	h := restored(t, d, s, Record{Phase: PhaseRunning, Services: []ServiceRecord{{}, {Restarts: []time.Time{time.Now()}}}}, nil)
	if !h.j.Started() {
		t.Fatal("a restored running job is not listed")
	}
	h.launch(0) // adopted
	h.launch(1) // restarted at once
	h.d.run(0).exit(0)
	h.d.run(1).exit(0) // ON_FAILURE, exit 0: completed; a NEVER exit 0 too: the job finished
	if ev := h.lifecycle(); ev.Kind != worker.EventStopped {
		t.Fatalf("event %v %q, want stopped", ev.Kind, ev.Reason)
	}
	last := d.records[len(d.records)-1]
	if len(last.Services[1].Restarts) != 2 {
		t.Errorf("restarts of b %v, want the recorded one and the restart at adoption", last.Services[1].Restarts)
	}
}
