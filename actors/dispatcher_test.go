package actors

import (
	"sync"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
)

// Every scheduled run happens, also when more runs block at once than the
// pool has workers (grains blocked in appends): the rest get goroutines of
// their own instead of waiting for a worker.
func TestPooledDispatcher_RunsEverythingWhenAllWorkersBlock(t *testing.T) {
	d := NewPooledDispatcher()
	const n = dispatcherWorkers + 50
	release := make(chan struct{})
	var started, done sync.WaitGroup
	started.Add(n)
	done.Add(n)
	go func() { // a Schedule that waited for a worker would block here, not the test
		for range n {
			d.Schedule(func() {
				started.Done()
				<-release
				done.Done()
			})
		}
	}()
	waitGroup(t, &started, "all runs started while every worker was blocked")
	close(release)
	waitGroup(t, &done, "all runs finished")
	// The workers are idle now and take new runs.
	ran := make(chan struct{})
	d.Schedule(func() { close(ran) })
	select {
	case <-ran:
	case <-time.After(10 * time.Second):
		t.Fatal("a run scheduled on the idle pool did not happen")
	}
}

// An actor on the pooled dispatcher handles its messages one at a time, in
// the order sent.
func TestPooledDispatcher_ActorOrder(t *testing.T) {
	system := actor.NewActorSystem()
	t.Cleanup(system.Shutdown)
	const n = 2000
	got := make(chan int, n)
	pid := system.Root.Spawn(actor.PropsFromFunc(func(ctx actor.Context) {
		if v, ok := ctx.Message().(int); ok {
			got <- v
		}
	}, actor.WithDispatcher(NewPooledDispatcher())))
	for i := range n {
		system.Root.Send(pid, i)
	}
	for i := range n {
		select {
		case v := <-got:
			if v != i {
				t.Fatalf("message %d handled as number %d", v, i)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("only %d of %d messages handled", i, n)
		}
	}
}

func waitGroup(t *testing.T, wg *sync.WaitGroup, what string) {
	t.Helper()
	ch := make(chan struct{})
	go func() { wg.Wait(); close(ch) }()
	select {
	case <-ch:
	case <-time.After(30 * time.Second):
		t.Fatalf("timed out waiting until %s", what)
	}
}
