package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/norsk-oss/norsk-manager/client"
	"github.com/norsk-oss/norsk-manager/proto/commonpb"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
	"github.com/norsk-oss/norsk-manager/test/testproc"
)

// This file is the shared fixture of the placement scenarios (issue 11
// §5): one manager process and N cluster-slot workers, each with a zone,
// a capacity and node tags, running jobs whose services are real
// processes. A scenario asks "where does this (job, role) run" of both
// sides: the manager's record (instance and last history entry) and the
// process itself (its pid file, and its working directory inside the
// state dir of the worker that started it).

// slotSpec is one cluster-slot worker of a fleet.
type slotSpec struct {
	// name is the slot's name (RegisterClusterNode) and the worker's log
	// name; unique in the fleet.
	name string
	// zone is the worker's --zone ("" for none).
	zone string
	// capacity is the worker's --capacity, in reference units.
	capacity float64
	// tags are the node's tags (what pool tier selectors match).
	tags map[string]string
	// extra are more worker flags, appended last.
	extra []string
}

// slot is a started worker of a fleet.
type slot struct {
	slotSpec
	// id is the slot's node id.
	id string
	w  *testproc.Worker
}

// fleet is a manager with its metrics endpoint, a client, and the
// cluster-slot workers started on it.
type fleet struct {
	t  *testing.T
	m  *manager
	mc *client.NorskManager
	// metricsAddr is the manager's --metrics-addr.
	metricsAddr string
	// pidDir holds the pid files of sleepJob services.
	pidDir string
	// byName and byID index the slots.
	byName map[string]*slot
	byID   map[string]*slot
}

// newFleet starts a manager (with metrics) and one worker per spec, and
// waits until every node is connected and STARTED.
func newFleet(t *testing.T, specs ...slotSpec) *fleet {
	t.Helper()
	mport := testproc.FreePort(t)
	m := startManager(t, filepath.Join(t.TempDir(), "data"), testproc.FreePort(t), "--metrics-addr", testproc.Addr(mport))
	// startManager waits for the health of ""; the client watches the
	// Manager service's own status, so wait for that one too.
	testproc.Await(t, 30*time.Second, "the Manager service SERVING", func() error { return managerServing(m.addr) })
	f := &fleet{t: t, m: m, mc: connect(t, m.addr), metricsAddr: testproc.Addr(mport), pidDir: testproc.JobFilesDir(t),
		byName: map[string]*slot{}, byID: map[string]*slot{}}
	for _, s := range specs {
		f.add(s)
	}
	return f
}

// managerServing returns nil once the manager at addr reports its
// Manager service SERVING on grpc.health.v1.
func managerServing(addr string) error {
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	r, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{Service: managerpb.Manager_ServiceDesc.ServiceName})
	if err != nil {
		return err
	}
	if r.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		return fmt.Errorf("%s", r.GetStatus())
	}
	return nil
}

// add registers a slot for spec, starts its worker and waits until the
// node is connected and STARTED (then the engine may place on it).
func (f *fleet) add(spec slotSpec) *slot {
	f.t.Helper()
	id, token, err := f.mc.RegisterClusterNode(context.Background(), spec.name, spec.tags)
	require.NoError(f.t, err)
	args := []string{"--dial-back-timeout", "3s", "--capacity", strconv.FormatFloat(spec.capacity, 'f', -1, 64)}
	if spec.zone != "" {
		args = append(args, "--zone", spec.zone)
	}
	s := &slot{slotSpec: spec, id: string(id),
		w: testproc.StartWorker(f.t, spec.name, string(id), token, f.m.addr, append(args, spec.extra...)...)}
	f.byName[spec.name], f.byID[s.id] = s, s
	testproc.Eventually(f.t, 30*time.Second, "worker "+spec.name+" online", func() bool { return nodeConnected(f.t, f.mc, s.id) })
	return s
}

// name returns the slot name of node id, or id itself if it is not one
// of the fleet's (for messages).
func (f *fleet) name(id string) string {
	if s, ok := f.byID[id]; ok {
		return s.name
	}
	return id
}

// zone returns the zone of node id; "" if it is not the fleet's.
func (f *fleet) zone(id string) string {
	if s, ok := f.byID[id]; ok {
		return s.zone
	}
	return ""
}

// sleepJob is a one-service template whose service writes its pid to
// <pidDir>/<job>.<role>.pid (NORSK_JOB_ID, NORSK_JOB_ROLE) and sleeps: a
// bundle's replicas share one template but not a pid file. The service is
// never restarted by its worker, so a changed pid means the engine placed
// the role again.
func (f *fleet) sleepJob(id string) *managerpb.Job {
	return &managerpb.Job{
		JobId: &commonpb.JobId{JobId: id},
		Tags:  map[string]string{"suite": "e2e-placement"},
		Services: []*commonpb.Service{{
			Name:    "idle",
			Command: fmt.Sprintf(`echo $$ > "%s/$NORSK_JOB_ID.$NORSK_JOB_ROLE.pid"; exec sleep 600`, f.pidDir),
			Restart: commonpb.Service_NEVER,
		}},
	}
}

// autoJob is a plain sleepJob placed by the engine, needing units, in
// pool ("" for any node).
func (f *fleet) autoJob(id string, units float64, pool string) *managerpb.Job {
	j := f.sleepJob(id)
	j.AutoPlacement = &managerpb.AutoPlacement{Requirements: &managerpb.JobRequirements{RequiredCapacity: units}}
	if pool != "" {
		j.Tags["pool"] = pool
	}
	return j
}

// pidFile is where the service of (job, role) writes its pid.
func (f *fleet) pidFile(job, role string) string {
	return filepath.Join(f.pidDir, job+"."+role+".pid")
}

// runsOn returns the node (job, role) runs on, with its service's pid,
// or an error saying what is not so yet. Running means: the record has
// an instance of the role on node N; the role's last history entry is
// job_running on N; the pid file names a live process whose working
// directory is inside N's worker state dir (the process really runs
// there, not only in the record).
func (f *fleet) runsOn(job, role string) (string, int, error) {
	r, err := f.mc.JobByID(context.Background(), client.JobID(job))
	if err != nil {
		return "", 0, fmt.Errorf("JobByID %s: %w", job, err)
	}
	node := ""
	for _, in := range r.GetInstances() {
		if in.GetJobKey().GetRole() == role {
			node = in.GetNodeId().GetNodeId()
		}
	}
	if node == "" {
		return "", 0, fmt.Errorf("%s/%s has no instance", job, role)
	}
	if last := lastRoleEntry(r, role); last.GetJobRunning().GetNodeMetadata().GetNodeId().GetNodeId() != node {
		return "", 0, fmt.Errorf("%s/%s on %s: last history entry %T, not running there", job, role, f.name(node), last.GetHistoryEntry())
	}
	pid, ok := testproc.ReadPID(f.pidFile(job, role))
	if !ok || !testproc.PIDAlive(pid) {
		return "", 0, fmt.Errorf("%s/%s on %s: no live process in %s", job, role, f.name(node), f.pidFile(job, role))
	}
	if on := f.nodeOfPID(pid); on != node {
		return "", 0, fmt.Errorf("%s/%s: the record says %s, its process %d runs on %q", job, role, f.name(node), pid, f.name(on))
	}
	return node, pid, nil
}

// lastRoleEntry returns the last history entry of r about role
// (provisioned, running, stopping or stopped), or nil.
func lastRoleEntry(r *managerpb.JobByIdResponse, role string) *managerpb.JobHistoryEntry {
	h := r.GetJob().GetHistoryEntry()
	for i := len(h) - 1; i >= 0; i-- {
		e := h[i]
		if e.GetJobProvisioned().GetRole() == role || e.GetJobRunning().GetRole() == role ||
			e.GetJobStopping().GetRole() == role || e.GetJobStopped().GetRole() == role {
			return e
		}
	}
	return nil
}

// provisioned counts the job_provisioned entries of role in job's
// history: how many times the role was started.
func (f *fleet) provisioned(job, role string) int {
	f.t.Helper()
	r, err := f.mc.JobByID(context.Background(), client.JobID(job))
	require.NoError(f.t, err)
	n := 0
	for _, e := range r.GetJob().GetHistoryEntry() {
		if e.GetJobProvisioned().GetRole() == role {
			n++
		}
	}
	return n
}

// nodeOfPID returns the id of the fleet node whose worker holds pid's
// working directory, or "": services run in a directory of the worker's
// --job-dir (by default its --state-dir with "-jobs" appended), or of its
// state dir for a job an older worker started.
func (f *fleet) nodeOfPID(pid int) string {
	cwd, err := os.Readlink(fmt.Sprintf("/proc/%d/cwd", pid))
	if err != nil {
		return ""
	}
	for id, s := range f.byID {
		for _, dir := range []string{s.w.StateDir, s.w.StateDir + "-jobs"} {
			if strings.HasPrefix(cwd, dir+string(filepath.Separator)) {
				return id
			}
		}
	}
	return ""
}

// awaitRunning waits until (job, role) runs (runsOn) on a node that is
// none of not, and returns its node and pid.
func (f *fleet) awaitRunning(timeout time.Duration, job, role string, not ...string) (string, int) {
	f.t.Helper()
	var node string
	var pid int
	testproc.Await(f.t, timeout, job+"/"+role+" running", func() error {
		var err error
		node, pid, err = f.runsOn(job, role)
		if err == nil && slices.Contains(not, node) {
			err = fmt.Errorf("%s/%s still runs on %s", job, role, f.name(node))
		}
		return err
	})
	return node, pid
}

// awaitStopped waits until (job, role) has no instance in the record and
// the process pid is gone.
func (f *fleet) awaitStopped(timeout time.Duration, job, role string, pid int) {
	f.t.Helper()
	testproc.Await(f.t, timeout, job+"/"+role+" stopped", func() error {
		r, err := f.mc.JobByID(context.Background(), client.JobID(job))
		if err != nil {
			return err
		}
		for _, in := range r.GetInstances() {
			if in.GetJobKey().GetRole() == role {
				return fmt.Errorf("%s/%s still has an instance on %s", job, role, f.name(in.GetNodeId().GetNodeId()))
			}
		}
		if testproc.PIDAlive(pid) {
			return fmt.Errorf("%s/%s: process %d still alive", job, role, pid)
		}
		return nil
	})
}

// barrier creates a plain auto-placed job needing no units and waits
// until it runs. The engine reads every record in one view per pass, so
// the pass that placed the barrier saw everything written before it was
// created: a role it did not place by then (and that is still not
// placed) was judged not placeable, with no sleep involved.
func (f *fleet) barrier(id string) {
	f.t.Helper()
	_, err := f.mc.CreateJob(context.Background(), f.autoJob(id, 0, ""))
	require.NoError(f.t, err)
	f.awaitRunning(30*time.Second, id, "primary")
}

// bundleJob is the id of a bundle's derived job: <bundle>.<replica>.<name>.
func bundleJob(bid client.BundleID, replica int, name string) string {
	return fmt.Sprintf("%s.%d.%s", bid, replica, name)
}

// roleOf is the role a bundle replica runs as: 0 primary, 1 backup.
func roleOf(replica int) string {
	if replica == 0 {
		return "primary"
	}
	return "backup"
}
