package ha

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/norsk-oss/norsk-manager/client"
	"github.com/norsk-oss/norsk-manager/test/testproc"
)

// TestHA_DeleteJobReachesWorkersOnEveryManager: in a three-manager cluster
// with three real workers (their sessions held by whichever managers own
// their node grains), a committed DeleteJob reaches every worker as
// delete_job, whichever manager hosts the job's grain. The workers' process
// runtime keeps nothing for a job, so the worker logs the message (at
// debug) and carries on; the test reads that line.
func TestHA_DeleteJobReachesWorkersOnEveryManager(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cluster of real managers and workers")
	}
	ctx := context.Background()
	c := testproc.NewCluster(t, 3)
	c.StartAll()
	hc := newWatchedCluster(t, c)
	cl := clientOf(t, 10*time.Second, c.Managers...)

	var workers []*testproc.Worker
	for i := range 3 {
		name := fmt.Sprintf("w%d", i+1)
		var nodeID client.NodeID
		var token string
		testproc.Await(t, 60*time.Second, "slot "+name+" registered", func() error {
			var err error
			nodeID, token, err = cl.RegisterClusterNode(ctx, name, nil)
			return err
		})
		workers = append(workers, testproc.StartWorker(t, name, string(nodeID), token, c.URLs()))
	}
	for _, w := range workers {
		testproc.Await(t, 60*time.Second, "node "+w.NodeID+" started", func() error {
			if !testproc.NodeStarted(cl, w.NodeID) {
				return fmt.Errorf("not connected and STARTED")
			}
			return nil
		})
	}

	// Enough jobs that their grains are spread over the managers.
	var jobs []string
	for i := range 6 {
		id := fmt.Sprintf("del-%d", i+1)
		jobs = append(jobs, id)
		createAcked(t, cl, id)
	}
	sessions := hc.sessionsByManager()
	for _, id := range jobs {
		testproc.Await(t, 60*time.Second, "DeleteJob("+id+") acknowledged", func() error {
			err := cl.DeleteJob(ctx, client.JobID(id))
			if err != nil && !isNotFound(err) { // NotFound: a retry of a delete that committed
				return err
			}
			return nil
		})
	}

	// Where each job grain ran its deletion, and where the sessions were.
	cross := 0
	for _, id := range jobs {
		host := managerLogging(c, `msg="job deleted"`, "job_id="+id)
		for name, nodes := range sessions {
			if name != host {
				cross += len(nodes)
			}
		}
		t.Logf("job %s deleted on %s; sessions %v", id, host, sessions)
	}
	if cross == 0 {
		t.Fatalf("every job grain and every worker session was on the same manager (%v): the test proves nothing", sessions)
	}

	for _, w := range workers {
		for _, id := range jobs {
			testproc.Await(t, 30*time.Second, "worker "+w.NodeID+" told that "+id+" was deleted", func() error {
				if !logged(w.Output(), "job deleted on the manager; the runtime keeps nothing for it", "job_id="+id) {
					return fmt.Errorf("no delete_job of %s logged", id)
				}
				return nil
			})
		}
	}
}

// managerLogging returns the name of the running manager whose log has a
// line containing msg and every one of also ("" if none).
func managerLogging(c *testproc.Cluster, msg string, also ...string) string {
	for _, m := range c.Running() {
		if logged(m.Proc().Output(), msg, also...) {
			return m.Name
		}
	}
	return ""
}

// logged reports whether out has a line containing msg and, as whole
// key=value fields, every one of also.
func logged(out, msg string, also ...string) bool {
	for _, line := range strings.Split(out, "\n") {
		if !strings.Contains(line, msg) {
			continue
		}
		line += " "
		ok := true
		for _, s := range also {
			if !strings.Contains(line, " "+s+" ") {
				ok = false
			}
		}
		if ok {
			return true
		}
	}
	return false
}
