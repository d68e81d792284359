package worker

import (
	"context"
	"testing"
	"time"

	"github.com/norsk-oss/norsk-manager/proto/workerpb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func lifecycle(kind EventKind, job string) Event {
	return Event{Kind: kind, Key: JobKey{JobID: JobID(job), Role: "primary"}}
}

// drain returns what s would send, its backlog then its queue, as "kind
// job" ("info job text" for job info with text, "info" without).
func drain(s *session) []string {
	var out []string
	for _, p := range s.backlog {
		out = append(out, describe(p.msg))
	}
	s.backlog = nil
	for {
		select {
		case m := <-s.queue:
			out = append(out, describe(m))
		default:
			return out
		}
	}
}

func describe(m *workerpb.WorkerMessage) string {
	switch {
	case m.GetJobStarted() != nil:
		return "started " + m.GetJobStarted().GetJobKey().GetJobId().GetJobId()
	case m.GetJobStopped() != nil:
		return "stopped " + m.GetJobStopped().GetJobId().GetJobId()
	case m.GetJobFailed() != nil:
		return "failed " + m.GetJobFailed().GetJobKey().GetJobId().GetJobId()
	case m.GetJobInfo() != nil:
		if text := m.GetJobInfo().GetContainerEvent().GetText(); text != "" {
			return "info " + m.GetJobInfo().GetJobKey().GetJobId().GetJobId() + " " + text
		}
		return "info"
	}
	return "?"
}

// testHub returns a hub remembering limit lifecycle events, with the
// default job info bounds.
func testHub(t *testing.T, limit int) *hub {
	c := DefaultConfig()
	return newHub(TestLogger(t), limit, newInfoBuffer(c.OfflineInfoLines, c.OfflineInfoBytes, c.OfflineInfoTotalBytes))
}

func sess(epoch uint64) *session {
	s := newSession("n", 16)
	s.epoch = epoch
	return s
}

func equal(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestHub_Promote_ReplaysEventsAfterHelloSnapshot(t *testing.T) {
	h := testHub(t, 8)
	s1 := sess(1)
	if err := h.Promote(s1, h.Seq()); err != nil {
		t.Fatal(err)
	}
	h.Publish(lifecycle(EventStarted, "a"))
	helloSeq := h.Seq() // s2 takes its hello snapshot here
	h.Publish(lifecycle(EventFailed, "a"))
	h.Publish(NewInfo(JobKey{JobID: "a"}, time.Now()))
	if got := drain(s1); !equal(got, []string{"started a", "failed a", "info"}) {
		t.Fatalf("s1 got %v", got)
	}
	s2 := sess(2)
	if err := h.Promote(s2, helloSeq); err != nil {
		t.Fatal(err)
	}
	if got := drain(s2); !equal(got, []string{"failed a"}) {
		t.Errorf("s2 got %v, want the event after its hello snapshot", got)
	}
	select {
	case <-s1.endCh:
		if status.Code(s1.endErr) != codes.Aborted {
			t.Errorf("s1 ended with %v", s1.endErr)
		}
	default:
		t.Error("s1 was not ended")
	}
	if h.IsCurrent(s1) || !h.IsCurrent(s2) {
		t.Error("s2 is not the only current session")
	}
}

func TestHub_Disconnected_KeepsLifecycleAndInfo(t *testing.T) {
	h := testHub(t, 3)
	h.Publish(lifecycle(EventStarted, "a")) // never delivered
	h.Publish(NewInfo(JobKey{JobID: "a"}, time.Now()))
	for _, j := range []string{"b", "c", "d"} {
		h.Publish(lifecycle(EventStopped, j))
	}
	s := sess(0)
	if err := h.Promote(s, h.Seq()); err != nil {
		t.Fatal(err)
	}
	// The limit (3) drops the oldest lifecycle event; the info published
	// after it is kept, before the events that followed it.
	if got := drain(s); !equal(got, []string{"info", "stopped b", "stopped c", "stopped d"}) {
		t.Errorf("got %v", got)
	}
	h.Release(s)
	s2 := sess(0)
	if err := h.Promote(s2, h.Seq()); err != nil {
		t.Fatal(err)
	}
	if got := drain(s2); len(got) != 0 {
		t.Errorf("delivered events were replayed: %v", got)
	}
}

func TestHub_Promote_RefusesStaleEpoch(t *testing.T) {
	h := testHub(t, 8)
	if err := h.Promote(sess(5), 0); err != nil {
		t.Fatal(err)
	}
	if err := h.Promote(sess(4), 0); status.Code(err) != codes.FailedPrecondition {
		t.Errorf("stale epoch: %v", err)
	}
	if err := h.Promote(sess(5), 0); err != nil {
		t.Errorf("equal epoch: %v", err)
	}
}

func TestHub_QueueOverflow_EndsSession(t *testing.T) {
	h := testHub(t, 8)
	s := newSession("n", 1)
	if err := h.Promote(s, 0); err != nil {
		t.Fatal(err)
	}
	h.Publish(lifecycle(EventStarted, "a"))
	h.Publish(NewInfo(JobKey{JobID: "a"}, time.Now())) // dropped
	h.Publish(lifecycle(EventStopped, "a"))            // does not fit: ends the session
	select {
	case <-s.endCh:
	default:
		t.Fatal("session not ended")
	}
	s2 := sess(0)
	if err := h.Promote(s2, h.Seq()); err != nil {
		t.Fatal(err)
	}
	if got := drain(s2); !equal(got, []string{"stopped a"}) {
		t.Errorf("got %v", got)
	}
}

func TestHub_WaitIdle(t *testing.T) {
	h := testHub(t, 8)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	begin := time.Now()
	idle, saw := h.WaitIdle(ctx, 30*time.Millisecond)
	if !idle || saw || time.Since(begin) < 30*time.Millisecond {
		t.Errorf("idle=%v saw=%v after %s", idle, saw, time.Since(begin))
	}
	s := sess(1)
	if err := h.Promote(s, 0); err != nil {
		t.Fatal(err)
	}
	short, cancelShort := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancelShort()
	if idle, _ := h.WaitIdle(short, 10*time.Millisecond); idle {
		t.Error("idle while a session is current")
	}
}
