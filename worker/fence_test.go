package worker_test

import (
	"context"
	"testing"
	"time"

	"github.com/norsk-oss/norsk-manager/proto/workerpb"
	"github.com/norsk-oss/norsk-manager/worker"
)

func TestFenceLease(t *testing.T) {
	for _, tc := range []struct {
		name  string
		f     *workerpb.WorkerFence
		grace time.Duration
		want  time.Duration
	}{
		{"defaults: 30 s less 10 s grace less 2.5 s", &workerpb.WorkerFence{}, 10 * time.Second, 17500 * time.Millisecond},
		{"explicit 30 s, grace 3 s", &workerpb.WorkerFence{ReplaceAfterMs: 30000}, 3 * time.Second, 24500 * time.Millisecond},
		{"15 s (dev managers), grace 1 s", &workerpb.WorkerFence{ReplaceAfterMs: 15000}, time.Second, 12250 * time.Millisecond},
		{"never negative", &workerpb.WorkerFence{ReplaceAfterMs: 2000}, 10 * time.Second, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := worker.FenceLease(tc.f, tc.grace); got != tc.want {
				t.Errorf("FenceLease = %s, want %s", got, tc.want)
			}
		})
	}
}

// fencedSleeper is sleeper(id) fenced by managers whose LostTimeout is
// replaceAfter: with DevConfig's 1 s stop grace the lease is
// replaceAfter - 1 s - (1 s + replaceAfter/20).
func fencedSleeper(id string, replaceAfter time.Duration) *workerpb.WorkerJob {
	j := sleeper(id)
	j.Fence = &workerpb.WorkerFence{ReplaceAfterMs: uint32(replaceAfter.Milliseconds())}
	return j
}

// openAcked is open, except that it acknowledges the session's first
// health (as a manager does before it sends any command).
func openAcked(t *testing.T, addr, nodeID, credential string, epoch uint64) *mgrSession {
	t.Helper()
	s := dialSession(t, addr, nodeID, "nonce-"+time.Now().Format("150405.000000000"))
	s.respond(t, s.hello(t), credential, epoch)
	h := s.waitFor(t, "first health", func(m *workerpb.WorkerMessage) bool { return m.GetHealth() != nil })
	s.send(t, healthAck(h.GetHealth().GetSeq(), epoch))
	return s
}

func healthAck(seq, epoch uint64) *workerpb.NodeControllerMessage {
	return &workerpb.NodeControllerMessage{Message: &workerpb.NodeControllerMessage_HealthAck{HealthAck: &workerpb.WorkerHealthAck{Seq: seq}},
		SessionEpoch: epoch}
}

// TestAgent_Fence: a fenced job keeps running for as long as a manager
// acknowledges the worker's health (many leases), and is stopped by the
// worker once the acks stop while the session stays open (a manager cut
// off, or frozen); a job without a fence keeps running.
func TestAgent_Fence(t *testing.T) {
	a, _, rt := registeredAgent(t, nil)
	s := openAcked(t, a.Addr().String(), "node-1", "secret-1", 3)
	fenced, free := fencedSleeper("job-fenced", 4*time.Second), sleeper("job-free")
	lease := worker.FenceLease(fenced.GetFence(), worker.DevConfig().StopGrace) // 1.8 s
	s.send(t, provision(fenced, 3))
	s.send(t, provision(free, 3))

	// Acknowledge every health for more than three leases (healths every
	// 200 ms): nothing may stop.
	acked, start := 0, time.Now()
	for acked < 30 || time.Since(start) < 3*lease {
		m := s.next(t)
		if h := m.GetHealth(); h != nil {
			if h.GetSeq() == 0 {
				t.Fatal("health without seq")
			}
			s.send(t, healthAck(h.GetSeq(), 3))
			acked++
		}
		if m.GetJobStopped() != nil || m.GetJobFailed() != nil {
			t.Fatalf("a job ended while the manager acknowledged every health: %v", m)
		}
	}
	if n := len(rt.List()); n != 2 {
		t.Fatalf("%d jobs run after %d acknowledged healths, want 2", n, acked)
	}

	// The acks stop; the session stays up. The fenced job stops within
	// its lease (plus the stop), the other keeps running.
	cut := time.Now()
	stopped := s.waitFor(t, "job_stopped of the fenced job", isStopped(worker.KeyOf(fenced)))
	took := time.Since(cut)
	if !stopped.GetJobStopped().GetFenced() {
		t.Errorf("the fence's job_stopped does not say fenced: %v (the manager would take it for a job that ended by itself)", stopped)
	}
	t.Logf("fenced job stopped %s after the last ack (lease %s)", took.Round(time.Millisecond), lease)
	if took < lease-500*time.Millisecond {
		t.Errorf("fenced job stopped %s after the acks stopped, before its lease %s", took, lease)
	}
	running := rt.List()
	if len(running) != 1 || running[0].Key() != worker.KeyOf(free) {
		t.Fatalf("running after the fence: %v, want only %s", running, worker.KeyOf(free))
	}
}

// TestAgent_Fence_AfterRestart: a worker restarted while cut off (it
// re-adopts its jobs and never hears a manager) still stops its fenced
// job, from the lease it kept in its state directory.
func TestAgent_Fence_AfterRestart(t *testing.T) {
	runDir, stateDir := t.TempDir(), t.TempDir()
	rt1 := newRuntime(t, runDir)
	mock := func(c *worker.Config) { c.StateDir = stateDir }
	a1 := newAgent(t, rt1, mock)
	ctx1, cancel1 := context.WithCancel(context.Background())
	done1 := runAgent(ctx1, a1)
	<-a1.Ready()
	s := openAcked(t, a1.Addr().String(), "node-r", "", 1)
	job := fencedSleeper("job-restart", 4*time.Second)
	s.send(t, provision(job, 1))
	s.waitFor(t, "job_started", isStarted(worker.KeyOf(job)))
	for acked := 0; acked < 3; {
		if h := s.next(t).GetHealth(); h != nil {
			s.send(t, healthAck(h.GetSeq(), 1))
			acked++
		}
	}
	s.cancel()
	cancel1()
	if err := <-done1; err != nil {
		t.Fatal(err)
	}
	rt1.Shutdown() // jobs keep running

	rt2 := newRuntime(t, runDir)
	a2 := newAgent(t, rt2, mock)
	ctx2, cancel2 := context.WithCancel(context.Background())
	defer cancel2()
	done2 := runAgent(ctx2, a2)
	<-a2.Ready()
	waitUntil(t, "the re-adopted fenced job stopped by the fence", func() bool { return len(rt2.List()) == 0 })
	cancel2()
	if err := <-done2; err != nil {
		t.Fatal(err)
	}
}
