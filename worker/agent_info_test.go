package worker_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/norsk-oss/norsk-manager/proto/commonpb"
	"github.com/norsk-oss/norsk-manager/proto/workerpb"
	"github.com/norsk-oss/norsk-manager/worker"
)

// TestAgent_InfoWhileDisconnected_SentToNextSession: output a job prints
// while no manager session is up reaches the next session, in order and
// before the job's failure, with one note for what the bound dropped.
func TestAgent_InfoWhileDisconnected_SentToNextSession(t *testing.T) {
	a, _, _ := registeredAgent(t, func(c *worker.Config) { c.OfflineInfoLines = 6 })
	addr := a.Addr().String()
	trigger := filepath.Join(t.TempDir(), "go")
	job := &workerpb.WorkerJob{JobId: &commonpb.JobId{JobId: "job-chat"}, Role: "primary", Services: []*commonpb.Service{{
		Name:    "app",
		Command: "while [ ! -f " + trigger + " ]; do sleep 0.02; done; for i in 1 2 3 4 5 6 7 8; do echo line $i; done; exit 3",
		Restart: commonpb.Service_NEVER,
	}}}
	key := worker.KeyOf(job)
	s1, _ := open(t, addr, "node-1", "secret-1", 1)
	s1.send(t, provision(job, 1))
	s1.waitFor(t, "job_started", isStarted(key))
	s1.cancel() // the manager goes away
	s1.waitEnd(t)

	seq := worker.PublishedLifecycleEvents(a)
	if err := os.WriteFile(trigger, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	// The agent has published job_failed, so the lines before it too.
	waitUntil(t, "job_failed published", func() bool { return worker.PublishedLifecycleEvents(a) > seq })

	s2, _ := open(t, addr, "node-1", "secret-1", 2)
	var got []string // job info before job_failed: container_event texts, "(other)" for the rest
	s2.waitFor(t, "buffered job_failed", func(m *workerpb.WorkerMessage) bool {
		if info := m.GetJobInfo(); info != nil {
			text := info.GetContainerEvent().GetText()
			if text == "" {
				text = "(other)"
			}
			got = append(got, text)
		}
		return isFailed(key)(m)
	})
	// The note first, then the newest 6 messages: the last lines in order,
	// the exit, and the runtime's stop stages.
	var dropped int
	if len(got) == 0 {
		t.Fatal("no job info before job_failed")
	}
	if _, err := fmt.Sscanf(got[0], "%d job info lines dropped", &dropped); err != nil {
		t.Fatalf("got %q, want the note first", got)
	}
	kept := got[1:]
	if len(kept) != 6 {
		t.Fatalf("got %q, want the note and 6 messages", got)
	}
	var lines []string
	for _, k := range kept {
		if strings.HasPrefix(k, "stdout: line ") {
			lines = append(lines, k)
		}
	}
	if len(lines) < 3 || dropped != 8-len(lines) {
		t.Fatalf("got %q: %d lines kept, %d dropped; want at least 3 kept and the rest (of 8) dropped", got, len(lines), dropped)
	}
	for i, l := range lines {
		if want := fmt.Sprintf("stdout: line %d", 8-len(lines)+1+i); l != want || kept[i] != want {
			t.Errorf("kept %q: message %d is %q, want %q", kept, i, kept[i], want)
		}
	}
	if exit := kept[len(lines)]; !strings.Contains(exit, "exited with code 3") {
		t.Errorf("kept %q: after the lines comes %q, want the exit", kept, exit)
	}
}
