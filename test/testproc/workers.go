package testproc

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/norsk-oss/norsk-manager/client"
	"github.com/norsk-oss/norsk-manager/proto/commonpb"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
)

// Worker is a norsk-ctl worker process (--mode=worker) on a cluster slot.
type Worker struct {
	*Proc
	// NodeID and Token are the slot's (RegisterClusterNode).
	NodeID, Token string
	// StateDir is the worker's --state-dir; Addr its --listen address.
	StateDir, Addr string
}

// StartWorker starts a worker for the slot (nodeID, token) that registers
// with the managers at managerURLs (comma-separated API addresses, as
// Cluster.URLs returns), listening on a free loopback port with a fresh
// state dir, with debug logs and a 3 s stop grace; extra flags are
// appended. Job processes outlive their worker by design: at cleanup,
// after the worker is killed, every process whose command line mentions
// the state dir (the services' wrapper shells, with their process groups)
// is SIGKILLed too.
func StartWorker(t testing.TB, name, nodeID, token, managerURLs string, extra ...string) *Worker {
	t.Helper()
	stateDir := filepath.Join(t.TempDir(), name)
	OpenTempDirs(t, filepath.Dir(stateDir)) // the job user reaches --job-dir
	// Registered before Start's own cleanup, so it runs after the worker
	// is killed (cleanups run last-in first-out).
	t.Cleanup(func() { KillProcessesMentioning(stateDir) })
	addr := Addr(FreePort(t))
	args := append([]string{"--mode=worker", "--token", token, "--manager-url", managerURLs, "--listen", addr,
		"--state-dir", stateDir, "--log-level", "debug", "--stop-grace", "3s"}, extra...)
	return &Worker{Proc: Start(t, name, "norsk-ctl", args...), NodeID: nodeID, Token: token, StateDir: stateDir, Addr: addr}
}

// WebJob is a one-service job running `norsk-ctl demo http` on the
// loopback port, which writes its shell's pid (the pid of the server
// after exec) to pidFile first. The service is never restarted, so a
// changed pid means the job was restarted.
func WebJob(id, pidFile string, port int) *managerpb.Job {
	return &managerpb.Job{
		JobId: &commonpb.JobId{JobId: id},
		Tags:  map[string]string{"suite": "testproc"},
		Services: []*commonpb.Service{{
			Name:    "web",
			Command: fmt.Sprintf("echo $$ > %s; exec norsk-ctl demo http --listen %s", pidFile, Addr(port)),
			Restart: commonpb.Service_NEVER,
		}},
	}
}

// ReadPID reads a pid file written by a WebJob service; false if it is
// missing or not a positive number yet.
func ReadPID(path string) (int, bool) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, false
	}
	pid, err := strconv.Atoi(string(bytes.TrimSpace(b)))
	return pid, err == nil && pid > 0
}

// HTTPOK reports whether the WebJob server on the loopback port answers
// its hello page within a second.
func HTTPOK(port int) bool {
	c := http.Client{Timeout: time.Second}
	resp, err := c.Get("http://" + Addr(port) + "/")
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode == http.StatusOK && strings.Contains(string(b), "hello")
}

// NodeStarted reports whether cl lists node id as connected (a worker
// session is up on some manager) and STARTED, asking with a 3 s timeout.
func NodeStarted(cl *client.NorskManager, id string) bool {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	nodes, err := cl.ListNodes(ctx)
	if err != nil {
		return false
	}
	for _, n := range nodes {
		if n.GetMetadata().GetNodeId().GetNodeId() == id {
			return n.GetConnected() && n.GetState() == managerpb.NodeLifecycle_NODE_LIFECYCLE_STARTED
		}
	}
	return false
}

// EventLog records what an event-stream client delivers, for checks at
// the end of a test. Safe for concurrent use.
type EventLog struct {
	mu  sync.Mutex
	all []*managerpb.EventStreamEvent // guarded by mu
}

// Follow runs cl.EventStream (resuming across manager failures) into the
// log until the test ends, and waits up to timeout for its snapshot.
func (e *EventLog) Follow(t testing.TB, cl *client.NorskManager, timeout time.Duration) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = cl.EventStream(ctx, client.EventStreamSettings{PendingWindow: time.Hour, OnEvent: e.Add})
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	Eventually(t, timeout, "the event stream's snapshot", func() bool {
		return e.Has(func(ev *managerpb.EventStreamEvent) bool { return ev.GetInitialDataComplete() != nil })
	})
}

// Add records ev; it is an EventStreamSettings.OnEvent.
func (e *EventLog) Add(ev *managerpb.EventStreamEvent) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.all = append(e.all, ev)
	return nil
}

// Snapshot returns the events recorded so far, in delivery order.
func (e *EventLog) Snapshot() []*managerpb.EventStreamEvent {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]*managerpb.EventStreamEvent(nil), e.all...)
}

// Len returns how many events were recorded.
func (e *EventLog) Len() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.all)
}

// Has reports whether a recorded event matches f.
func (e *EventLog) Has(f func(*managerpb.EventStreamEvent) bool) bool {
	for _, ev := range e.Snapshot() {
		if f(ev) {
			return true
		}
	}
	return false
}

// IsLogEvent reports whether ev is an entry of the durable event log, as
// opposed to snapshot events and the per-subscriber classification events
// (job_pending, job_out_of_window), which repeat a log index.
func IsLogEvent(ev *managerpb.EventStreamEvent) bool {
	switch ev.GetEvent().(type) {
	case *managerpb.EventStreamEvent_NodeRunning, *managerpb.EventStreamEvent_JobActive, *managerpb.EventStreamEvent_InitialDataComplete,
		*managerpb.EventStreamEvent_JobPending, *managerpb.EventStreamEvent_JobOutOfWindow, *managerpb.EventStreamEvent_StreamReset:
		return false
	}
	return true
}

// CheckExactlyOnce returns an error unless the log events delivered after
// the first snapshot have consecutive indexes: none missing, none
// repeated, in order.
func (e *EventLog) CheckExactlyOnce() error {
	var prev uint64
	seen := false
	for _, ev := range e.Snapshot() {
		if _, ok := ev.GetEvent().(*managerpb.EventStreamEvent_InitialDataComplete); ok && !seen {
			prev, seen = ev.GetLogIndex(), true
			continue
		}
		if !seen || !IsLogEvent(ev) {
			continue
		}
		if ev.GetLogIndex() != prev+1 {
			return fmt.Errorf("event %T has log index %d after %d: log events must arrive exactly once and in order", ev.GetEvent(), ev.GetLogIndex(), prev)
		}
		prev = ev.GetLogIndex()
	}
	if !seen {
		return fmt.Errorf("no snapshot was delivered")
	}
	return nil
}
