package supervisor

import (
	"context"
	"errors"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/norsk-oss/norsk-manager/proto/workerpb"
	"github.com/norsk-oss/norsk-manager/worker"
	"github.com/norsk-oss/norsk-manager/worker/internal/emit"
)

// hookDriver adds the optional capabilities to fakeDriver.
type hookDriver struct {
	*fakeDriver
	polled   chan struct{} // receives a value at a Poll (if there is room)
	detached atomic.Bool
}

func newHookDriver() *hookDriver {
	return &hookDriver{fakeDriver: newFakeDriver(1), polled: make(chan struct{}, 1)}
}

func (d *hookDriver) PollInterval() time.Duration { return time.Millisecond }
func (d *hookDriver) Poll(time.Time) bool {
	select {
	case d.polled <- struct{}{}:
	default:
	}
	return false
}
func (d *hookDriver) Detach() { d.detached.Store(true) }
func (d *hookDriver) Exited(svc int, ex Exit) Exit {
	ex.Detail = `; last stderr: "boom"`
	return ex
}

func runHooked(t *testing.T, d Driver, done chan struct{}) (*Job, <-chan worker.Event, chan struct{}) {
	em := emit.New(256, done, slog.New(slog.DiscardHandler))
	j := New(Config{
		Key: worker.JobKey{JobID: "j1", Role: "primary"}, Def: &workerpb.WorkerJob{}, Services: []Service{svc("a")},
		Driver: d, Emit: em, Ports: func() worker.PortMappings { return nil }, Done: done, FailStopGrace: time.Second,
	})
	ran := make(chan struct{})
	go func() { defer close(ran); j.Run() }()
	return j, em.Ch(), ran
}

func TestJob_Hooks_ExitObserverAndPoller(t *testing.T) {
	d := newHookDriver()
	done := make(chan struct{})
	defer close(done)
	_, ev, _ := runHooked(t, d, done)
	h := &harness{t: t, d: d.fakeDriver, ev: ev}
	h.launch(0)
	h.lifecycle() // started
	select {
	case <-d.polled:
	case <-time.After(waitFor):
		t.Fatal("Poll never called")
	}
	d.run(0).exit(2)
	e := h.lifecycle()
	want := `service "a" exited with code 2 (restart policy NEVER); last stderr: "boom"`
	if e.Kind != worker.EventFailed || e.Reason != want {
		t.Fatalf("event %v %q, want failed %q", e.Kind, e.Reason, want)
	}
}

// shutdownHandle's Stop reports that the runtime shut down midway.
type shutdownDriver struct {
	*hookDriver
	stopCalled chan struct{} // receives a value at every Handle.Stop
}

func (d *shutdownDriver) Launch(ctx context.Context, svc int) (Handle, error) {
	h, err := d.hookDriver.Launch(ctx, svc)
	return shutdownHandle{h, d.stopCalled}, err
}

type shutdownHandle struct {
	Handle
	stopCalled chan<- struct{}
}

func (h shutdownHandle) Stop(context.Context, time.Duration) (Exit, bool, error) {
	h.stopCalled <- struct{}{}
	return Exit{}, false, ErrShutdown
}

func TestJob_Stop_ShutdownMidwayLeavesTheJob(t *testing.T) {
	d := &shutdownDriver{newHookDriver(), make(chan struct{}, 1)}
	done := make(chan struct{})
	j, ev, ran := runHooked(t, d, done)
	h := &harness{t: t, d: d.fakeDriver, ev: ev}
	h.launch(0)
	h.lifecycle() // started
	stopErr := make(chan error, 1)
	go func() { stopErr <- j.Stop(context.Background(), time.Second) }()
	// The supervisor records phase stopping before it stops a service.
	select {
	case <-d.stopCalled:
	case <-time.After(waitFor):
		t.Fatal("the service was not stopped")
	}
	if got := d.lastRecord().Phase; got != PhaseStopping {
		t.Fatalf("record phase %q when the service is stopped, want %q", got, PhaseStopping)
	}
	close(done) // the runtime shuts down
	<-ran
	if err := <-stopErr; !errors.Is(err, worker.ErrRuntimeClosed) {
		t.Errorf("Stop = %v, want ErrRuntimeClosed", err)
	}
	select {
	case <-j.Done():
		t.Error("the job ended although its stop was cut short by the shutdown")
	default:
	}
	if !d.detached.Load() {
		t.Error("not detached")
	}
	if d.torn {
		t.Error("torn down at shutdown: the next worker finishes the stop")
	}
}
