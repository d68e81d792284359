package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/norsk-oss/norsk-manager/client"
	"github.com/norsk-oss/norsk-manager/proto/commonpb"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
	"github.com/norsk-oss/norsk-manager/test/testproc"
)

// stampJob is an auto-placed job (units of capacity, any node) whose
// service writes, in <dir>/<job>.<role>.start, the time it started (Unix
// nanoseconds, from the process itself) and, on SIGTERM (the worker's
// stop), the time it exits in <dir>/<job>.<role>.exit: what a move's
// overlap is checked from, independent of the manager's own records.
func stampJob(id, dir string, units float64) *managerpb.Job {
	p := fmt.Sprintf(`%s/$NORSK_JOB_ID.$NORSK_JOB_ROLE`, dir)
	return &managerpb.Job{
		JobId: &commonpb.JobId{JobId: id},
		Tags:  map[string]string{"suite": "e2e-move"},
		Services: []*commonpb.Service{{
			Name: "stamp",
			// The pid is written before the start stamp, so a stamp
			// read implies a whole pid file (awaitStamped checks both).
			Command: fmt.Sprintf(`echo $$ > "%s.pid"; date +%%s%%N > "%s.start"; `+
				`trap 'date +%%s%%N > "%s.exit"; exit 0' TERM; sleep 600 & wait`, p, p, p),
			Restart: commonpb.Service_NEVER,
		}},
		AutoPlacement: &managerpb.AutoPlacement{Requirements: &managerpb.JobRequirements{RequiredCapacity: units}},
	}
}

// stamp reads the Unix-nanosecond time in file; false if it is not
// written (yet).
func stamp(file string) (time.Time, bool) {
	b, err := os.ReadFile(file)
	if err != nil {
		return time.Time{}, false
	}
	n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		return time.Time{}, false
	}
	return time.Unix(0, n), true
}

// TestE2E_MoveDrainOverlaps (issue 13 §2, §4): a node runs five
// auto-placed jobs; a second node joins; `norsk-ctl node drain` moves
// every job make-before-break. For each job, from the processes' own
// stamps: the new process (role primary~1, on the other node) started
// before the old one (primary, on the drained node) exited — the job was
// never without a running process — and the manager's records agree: one
// migration_completed per job, the source stopped JOB_STOPPED_MIGRATED.
func TestE2E_MoveDrainOverlaps(t *testing.T) {
	ctx := context.Background()
	f := newFleet(t, slotSpec{name: "d", zone: "z1", capacity: 8})
	ev := &testproc.EventLog{}
	ev.Follow(t, f.mc, 10*time.Second)
	dir := testproc.JobFilesDir(t)
	jobs := []string{"m1", "m2", "m3", "m4", "m5"}
	for _, id := range jobs {
		_, err := f.mc.CreateJob(ctx, stampJob(id, dir, 1))
		require.NoError(t, err)
	}
	d := f.byName["d"].id
	for _, id := range jobs {
		f.awaitStamped(id, "primary", dir, d)
	}
	o := f.add(slotSpec{name: "o", zone: "z1", capacity: 8}).id

	out, code := ctl(t, f.m.addr, "node", "drain", d, "--reason", "move test")
	require.Equal(t, 0, code, out)
	for _, id := range jobs {
		f.awaitStamped(id, "primary~1", dir, o)
	}
	for _, id := range jobs {
		testproc.Await(t, 60*time.Second, id+" old process exited", func() error {
			if _, ok := stamp(filepath.Join(dir, id+".primary.exit")); !ok {
				return fmt.Errorf("no exit stamp of %s/primary", id)
			}
			r, err := f.mc.JobByID(ctx, client.JobID(id))
			if err != nil {
				return err
			}
			if len(r.GetMigrations()) > 0 || len(r.GetInstances()) != 1 {
				return fmt.Errorf("move not ended: %v, instances %v", r.GetMigrations(), r.GetInstances())
			}
			return nil
		})
		newStart, _ := startedAt(filepath.Join(dir, id+".primary~1"))
		oldExit, _ := stamp(filepath.Join(dir, id+".primary.exit"))
		require.True(t, newStart.Before(oldExit), "%s: the new process started (%v) before the old one exited (%v)", id, newStart, oldExit)
		t.Logf("%s: overlap of the processes %v", id, oldExit.Sub(newStart))
		r, err := f.mc.JobByID(ctx, client.JobID(id))
		require.NoError(t, err)
		require.Equal(t, "primary~1", r.GetInstances()[0].GetJobKey().GetRole())
		migrated := false
		for _, e := range r.GetJob().GetHistoryEntry() {
			if s := e.GetJobStopping(); s.GetRole() == "primary" && s.GetReason() == managerpb.JobHistoryJobStopping_JOB_STOPPED_MIGRATED {
				migrated = true
			}
		}
		require.True(t, migrated, "%s: the source stopped as migrated", id)
	}
	testproc.Eventually(t, 10*time.Second, "one migration_completed per job", func() bool {
		completed := 0
		for _, e := range ev.Snapshot() {
			if c := e.GetMigrationCompleted(); c != nil && c.GetOverlapMs() > 0 && c.GetHandoverMs() >= 0 {
				completed++
			}
		}
		return completed == len(jobs)
	})
}

// awaitStamped waits until (job, role) runs on node and its process wrote
// its start stamp and pid file.
func (f *fleet) awaitStamped(job, role, dir, node string) {
	f.t.Helper()
	testproc.Await(f.t, 60*time.Second, job+"/"+role+" running on "+f.name(node), func() error {
		r, err := f.mc.JobByID(context.Background(), client.JobID(job))
		if err != nil {
			return err
		}
		for _, in := range r.GetInstances() {
			if in.GetJobKey().GetRole() == role && in.GetNodeId().GetNodeId() == node {
				if last := lastRoleEntry(r, role); last.GetJobRunning() == nil {
					return fmt.Errorf("%s/%s not running yet", job, role)
				}
				if _, ok := stamp(filepath.Join(dir, job+"."+role+".start")); !ok {
					return fmt.Errorf("%s/%s wrote no start stamp", job, role)
				}
				if _, ok := testproc.ReadPID(filepath.Join(dir, job+"."+role+".pid")); !ok {
					return fmt.Errorf("%s/%s wrote no pid file", job, role)
				}
				return nil
			}
		}
		return fmt.Errorf("%s/%s has no instance on %s: %v", job, role, f.name(node), r.GetInstances())
	})
}

// TestE2E_MoveAbortMidMove (issue 13 §2, §4): a move to a node whose
// worker is frozen (SIGSTOP) cannot get its target running; AbortMigration
// backs it out: the source keeps its process the whole time, a second
// abort answers OK, and once the worker thaws nothing of the target runs
// (a late start of it is stopped, not adopted).
func TestE2E_MoveAbortMidMove(t *testing.T) {
	ctx := context.Background()
	f := newFleet(t, slotSpec{name: "a", zone: "z1", capacity: 4})
	ev := &testproc.EventLog{}
	ev.Follow(t, f.mc, 10*time.Second)
	dir := testproc.JobFilesDir(t)
	_, err := f.mc.CreateJob(ctx, stampJob("j", dir, 1))
	require.NoError(t, err)
	a := f.byName["a"].id
	f.awaitStamped("j", "primary", dir, a)
	pid, ok := testproc.ReadPID(filepath.Join(dir, "j.primary.pid"))
	require.True(t, ok)
	frozen := f.add(slotSpec{name: "frozen", zone: "z1", capacity: 4})
	require.NoError(t, frozen.w.Cmd.Process.Signal(syscall.SIGSTOP))
	t.Cleanup(func() { _ = frozen.w.Cmd.Process.Signal(syscall.SIGCONT) })

	mv, err := f.mc.MigrateJob(ctx, "j", "primary", client.NodeID(frozen.id), "abort test")
	require.NoError(t, err)
	require.Equal(t, "primary~1", mv.GetTargetRole())
	_, err = f.mc.MigrateJob(ctx, "j", "primary", client.AnyNode, "")
	require.Error(t, err, "one move of a role at a time")
	require.NoError(t, f.mc.AbortMigration(ctx, "j", "primary", "primary~1", "operator changed their mind"))
	require.NoError(t, f.mc.AbortMigration(ctx, "j", "primary", "primary~1", ""), "a second abort is OK")
	testproc.Await(t, 60*time.Second, "the move backed out", func() error {
		r, err := f.mc.JobByID(ctx, "j")
		if err != nil {
			return err
		}
		if len(r.GetMigrations()) > 0 {
			return fmt.Errorf("still moving: %v", r.GetMigrations())
		}
		return nil
	})
	require.NoError(t, frozen.w.Cmd.Process.Signal(syscall.SIGCONT))
	testproc.Await(t, 60*time.Second, "nothing of the target runs on the thawed worker", func() error {
		if p, ok := testproc.ReadPID(filepath.Join(dir, "j.primary~1.pid")); ok && testproc.PIDAlive(p) {
			return fmt.Errorf("the target's process %d runs", p)
		}
		r, err := f.mc.JobByID(ctx, "j")
		if err != nil {
			return err
		}
		for _, in := range r.GetInstances() {
			if in.GetJobKey().GetRole() != "primary" {
				return fmt.Errorf("instance %s on %s", in.GetJobKey().GetRole(), f.name(in.GetNodeId().GetNodeId()))
			}
		}
		return nil
	})
	f.barrier("after-thaw")
	require.True(t, testproc.PIDAlive(pid), "the source kept its process")
	_, err = os.Stat(filepath.Join(dir, "j.primary.exit"))
	require.True(t, os.IsNotExist(err), "the source never got a SIGTERM")
	testproc.Eventually(t, 10*time.Second, "one migration_aborted (done) with the operator's reason", func() bool {
		n := 0
		for _, e := range ev.Snapshot() {
			if a := e.GetMigrationAborted(); a != nil && a.GetDone() && strings.Contains(a.GetReason(), "changed their mind") {
				n++
			}
		}
		return n == 1
	})
}
