package supervisor

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// fakeDriver runs services as fakeHandles that tests end and make
// healthy by hand. Safe for concurrent use.
type fakeDriver struct {
	healthcheck map[int]bool  // services whose handles report health
	adoptErr    map[int]error // Adopt's error per service
	noRun       map[int]bool  // Adopt finds no run (restart it)

	mu       sync.Mutex
	launched []int // service indexes, in launch order
	runs     map[int]*fakeHandle
	records  []Record
	torn     bool
	launchCh chan int // receives every launch
}

func newFakeDriver(n int) *fakeDriver {
	return &fakeDriver{healthcheck: map[int]bool{}, adoptErr: map[int]error{}, noRun: map[int]bool{}, runs: map[int]*fakeHandle{}, launchCh: make(chan int, 16*n+16)}
}

func (d *fakeDriver) Prepare(ctx context.Context) error { return nil }

func (d *fakeDriver) Launch(ctx context.Context, svc int) (Handle, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	h := &fakeHandle{exitCh: make(chan Exit, 1), healthCh: make(chan Health, 4), stopped: make(chan struct{})}
	d.mu.Lock()
	d.launched = append(d.launched, svc)
	d.runs[svc] = h
	d.mu.Unlock()
	d.launchCh <- svc
	if d.healthcheck[svc] {
		return &fakeHealthHandle{h}, nil
	}
	return h, nil
}

func (d *fakeDriver) Adopt(ctx context.Context, svc int) (Handle, error) {
	if err := d.adoptErr[svc]; err != nil {
		return nil, err
	}
	if d.noRun[svc] {
		return nil, nil
	}
	return d.Launch(ctx, svc)
}

func (d *fakeDriver) Teardown(ctx context.Context) {
	d.mu.Lock()
	d.torn = true
	d.mu.Unlock()
}

func (d *fakeDriver) Persist(rec Record) error {
	d.mu.Lock()
	d.records = append(d.records, rec)
	d.mu.Unlock()
	return nil
}

func (d *fakeDriver) run(svc int) *fakeHandle {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.runs[svc]
}

func (d *fakeDriver) order() []int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]int(nil), d.launched...)
}

// fakeHandle is one run: exit ends it, health reports a status.
type fakeHandle struct {
	exitCh   chan Exit
	healthCh chan Health
	once     sync.Once
	stopped  chan struct{} // closed by Stop
}

func (h *fakeHandle) exit(code int) {
	h.exitCh <- Exit{Success: code == 0, Text: fmt.Sprintf("exited with code %d", code)}
}

func (h *fakeHandle) Wait(ctx context.Context) (Exit, error) {
	select {
	case ex := <-h.exitCh:
		return ex, nil
	case <-h.stopped:
		<-ctx.Done()
		return Exit{}, ctx.Err()
	case <-ctx.Done():
		return Exit{}, ctx.Err()
	}
}

func (h *fakeHandle) Stop(ctx context.Context, grace time.Duration) (Exit, bool, error) {
	ran := false
	h.once.Do(func() { close(h.stopped); ran = true })
	return Exit{Text: "exited with code 0 (stopped)"}, ran, nil
}

type fakeHealthHandle struct{ *fakeHandle }

func (h *fakeHealthHandle) WatchHealth(ctx context.Context, report func(Health)) {
	report(HealthStarting)
	for {
		select {
		case st := <-h.healthCh:
			report(st)
		case <-h.stopped:
			return
		case <-ctx.Done():
			return
		}
	}
}

func (d *fakeDriver) lastRecord() Record {
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(d.records) == 0 {
		return Record{}
	}
	return d.records[len(d.records)-1]
}
