package ops

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/norsk-oss/norsk-manager/client"
	"github.com/norsk-oss/norsk-manager/test/testproc"
)

// webJob is a testproc.WebJob running on a worker of its own.
type webJob struct {
	id, node string
	port     int
	pidFile  string
	pid      int
}

// startWebJob registers a cluster slot, starts a worker on it (told the
// managers at urls), creates and starts a WebJob on it, and waits until it
// serves HTTP and the manager reports it running.
func startWebJob(t *testing.T, cl *client.NorskManager, urls, name string) *webJob {
	t.Helper()
	ctx := context.Background()
	var nodeID client.NodeID
	var token string
	testproc.Await(t, 60*time.Second, "slot "+name+" registered", func() error {
		var err error
		nodeID, token, err = cl.RegisterClusterNode(ctx, name, nil)
		return err
	})
	testproc.StartWorker(t, name, string(nodeID), token, urls)
	j := &webJob{id: "web-" + name, node: string(nodeID), port: testproc.FreePort(t), pidFile: filepath.Join(testproc.JobFilesDir(t), name+".pid")}
	testproc.Await(t, 60*time.Second, "node "+j.node+" started", func() error {
		if !testproc.NodeStarted(cl, j.node) {
			return fmt.Errorf("not connected and STARTED")
		}
		return nil
	})
	if _, err := cl.CreateJob(ctx, testproc.WebJob(j.id, j.pidFile, j.port)); err != nil {
		t.Fatalf("CreateJob(%s): %v", j.id, err)
	}
	if err := cl.StartJob(ctx, client.JobID(j.id), "primary", nodeID); err != nil {
		t.Fatalf("StartJob(%s): %v", j.id, err)
	}
	testproc.Await(t, 60*time.Second, j.id+" serving HTTP", func() error {
		if !testproc.HTTPOK(j.port) {
			return fmt.Errorf("no answer on port %d", j.port)
		}
		return nil
	})
	pid, ok := testproc.ReadPID(j.pidFile)
	if !ok {
		t.Fatalf("%s: no pid file", j.id)
	}
	j.pid = pid
	testproc.Await(t, 30*time.Second, j.id+" running on "+j.node, func() error { return j.running(cl) })
	return j
}

// running returns nil if the manager reports j running as (primary, its
// node) with a history ending in Running.
func (j *webJob) running(cl *client.NorskManager) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r, err := cl.JobByID(ctx, client.JobID(j.id))
	if err != nil {
		return err
	}
	h := r.GetJob().GetHistoryEntry()
	last := ""
	if len(h) > 0 {
		last = strings.TrimPrefix(fmt.Sprintf("%T", h[len(h)-1].GetHistoryEntry()), "*managerpb.JobHistoryEntry_Job")
	}
	in := r.GetInstances()
	switch {
	case last != "Running":
		return fmt.Errorf("history ends with %q, not Running", last)
	case len(in) != 1 || in[0].GetNodeId().GetNodeId() != j.node || in[0].GetJobKey().GetRole() != "primary":
		return fmt.Errorf("instances %v, want (primary, %s)", in, j.node)
	}
	return nil
}

// requireAdopted waits until the manager behind cl has the worker's
// session back and reports j running, and checks that j's process is the
// one started at the beginning: the job was adopted, not restarted.
func (j *webJob) requireAdopted(t *testing.T, cl *client.NorskManager) {
	t.Helper()
	testproc.Await(t, 60*time.Second, "node "+j.node+" connected again", func() error {
		if !testproc.NodeStarted(cl, j.node) {
			return fmt.Errorf("not connected and STARTED")
		}
		return nil
	})
	testproc.Await(t, 30*time.Second, j.id+" running", func() error { return j.running(cl) })
	pid, ok := testproc.ReadPID(j.pidFile)
	switch {
	case !ok:
		t.Errorf("%s: pid file gone", j.id)
	case pid != j.pid:
		t.Errorf("%s was restarted: pid %d, was %d", j.id, pid, j.pid)
	case !testproc.PIDAlive(j.pid):
		t.Errorf("%s: process %d is gone", j.id, j.pid)
	case !testproc.HTTPOK(j.port):
		t.Errorf("%s: no HTTP answer on port %d", j.id, j.port)
	}
}
