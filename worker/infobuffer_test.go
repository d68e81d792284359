package worker

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/norsk-oss/norsk-manager/proto/commonpb"
	"google.golang.org/protobuf/proto"
)

// line returns an output line of job's service "app", as the runtimes
// report it.
func line(job, text string) Event {
	ev := NewInfo(JobKey{JobID: JobID(job), Role: "primary"}, time.Now())
	ev.Info.Message = &commonpb.JobInfoMessage_ContainerEvent{ContainerEvent: &commonpb.JobInfoContainerEvent{ServiceName: "app", Text: text}}
	return ev
}

// texts returns the container_event texts of taken entries as "job text".
func texts(items []bufferedInfo) []string {
	var out []string
	for _, e := range items {
		out = append(out, string(e.ev.Key.JobID)+" "+e.ev.Info.GetContainerEvent().GetText())
	}
	return out
}

func TestInfoBuffer_Bounds(t *testing.T) {
	size := proto.Size(line("a", "l0").Info) // every line below has this size
	cases := []struct {
		name              string
		lines, bytes, tot int
		publish           []string // "job text"
		want              []string // "job text"; "job N dropped" stands for the note
	}{
		{name: "within bounds", lines: 10, bytes: 1 << 20, tot: 1 << 20,
			publish: []string{"a l0", "b l0", "a l1"},
			want:    []string{"a l0", "b l0", "a l1"}},
		{name: "line bound per job keeps the newest, note first", lines: 2, bytes: 1 << 20, tot: 1 << 20,
			publish: []string{"a l0", "a l1", "b l0", "a l2", "a l3"},
			want:    []string{"b l0", "a 2 dropped", "a l2", "a l3"}},
		{name: "byte bound per job", lines: 100, bytes: 2*size + size/2, tot: 1 << 20,
			publish: []string{"a l0", "a l1", "a l2"},
			want:    []string{"a 1 dropped", "a l1", "a l2"}},
		{name: "total bound takes from the job holding most", lines: 100, bytes: 1 << 20, tot: 3 * size,
			publish: []string{"a l0", "a l1", "b l0", "a l2"},
			want:    []string{"a 1 dropped", "a l1", "b l0", "a l2"}},
		{name: "zero keeps only the note", lines: 0, bytes: 1 << 20, tot: 1 << 20,
			publish: []string{"a l0", "a l1", "a l2"},
			want:    []string{"a 3 dropped"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			b := newInfoBuffer(tc.lines, tc.bytes, tc.tot)
			for _, p := range tc.publish {
				job, text, _ := strings.Cut(p, " ")
				b.add(line(job, text), 0)
			}
			got := texts(b.take())
			for i, g := range got {
				var n int
				if job, text, _ := strings.Cut(g, " "); strings.Contains(text, "job info lines dropped") {
					if _, err := fmt.Sscanf(text, "%d job info lines dropped", &n); err != nil {
						t.Fatalf("note %q: %v", text, err)
					}
					got[i] = fmt.Sprintf("%s %d dropped", job, n)
				}
			}
			if !equal(got, tc.want) {
				t.Errorf("took %q, want %q", got, tc.want)
			}
			if rest := b.take(); len(rest) != 0 {
				t.Errorf("a second take returned %d entries", len(rest))
			}
		})
	}
}

// TestHub_Disconnected_InfoInOrderWithLifecycle: job info published while
// no session is current reaches the next session in publication order,
// interleaved with the lifecycle events as they happened, and before
// anything published once it is current.
func TestHub_Disconnected_InfoInOrderWithLifecycle(t *testing.T) {
	h := testHub(t, 8)
	s1 := sess(1)
	if err := h.Promote(s1, h.Seq()); err != nil {
		t.Fatal(err)
	}
	h.Publish(line("a", "live"))
	h.Release(s1) // the manager goes away
	if got := drain(s1); !equal(got, []string{"info a live"}) {
		t.Fatalf("s1 got %v", got)
	}

	h.Publish(line("a", "l1"))
	h.Publish(lifecycle(EventStarted, "b"))
	h.Publish(line("b", "l1"))
	h.Publish(line("a", "l2"))
	h.Publish(lifecycle(EventFailed, "a"))
	h.Publish(line("b", "l2"))

	s2 := sess(2)
	if err := h.Promote(s2, h.Seq()); err != nil {
		t.Fatal(err)
	}
	h.Publish(line("b", "after"))
	want := []string{"info a l1", "started b", "info b l1", "info a l2", "failed a", "info b l2", "info b after"}
	if got := drain(s2); !equal(got, want) {
		t.Errorf("s2 got\n%q\nwant\n%q", got, want)
	}
}

// TestHub_Release_KeepsUnsentBacklog: a session that ends before sending
// its backlog hands the rest back; the next session gets it first, then
// what was buffered meanwhile, with nothing sent twice.
func TestHub_Release_KeepsUnsentBacklog(t *testing.T) {
	h := testHub(t, 8)
	h.Publish(line("a", "l1"))
	h.Publish(lifecycle(EventStopped, "a"))
	h.Publish(line("a", "l2"))
	s1 := sess(1)
	if err := h.Promote(s1, h.Seq()); err != nil {
		t.Fatal(err)
	}
	if len(s1.backlog) != 3 {
		t.Fatalf("backlog of %d, want 3", len(s1.backlog))
	}
	s1.backlog = s1.backlog[1:] // "info a l1" was sent, then the stream broke
	h.Release(s1)
	h.Publish(line("a", "l3"))

	s2 := sess(2)
	if err := h.Promote(s2, h.Seq()); err != nil {
		t.Fatal(err)
	}
	want := []string{"stopped a", "info a l2", "info a l3"}
	if got := drain(s2); !equal(got, want) {
		t.Errorf("s2 got %q, want %q", got, want)
	}
}

// TestHub_Superseded_OnlyCurrentGetsInfo: info published while a session
// is current is sent live, not buffered for the next one.
func TestHub_Superseded_OnlyCurrentGetsInfo(t *testing.T) {
	h := testHub(t, 8)
	s1 := sess(1)
	if err := h.Promote(s1, h.Seq()); err != nil {
		t.Fatal(err)
	}
	h.Publish(line("a", "to s1"))
	s2 := sess(2)
	if err := h.Promote(s2, h.Seq()); err != nil {
		t.Fatal(err)
	}
	if got := drain(s2); len(got) != 0 {
		t.Errorf("s2 got %q", got)
	}
	if got := drain(s1); !equal(got, []string{"info a to s1"}) {
		t.Errorf("s1 got %q", got)
	}
}
