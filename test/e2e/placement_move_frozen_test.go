package e2e

import (
	"context"
	"fmt"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/norsk-oss/norsk-manager/client"
	"github.com/norsk-oss/norsk-manager/test/testproc"
)

// TestE2E_MoveSourceFrozenDuringHandOver (issue 13 §2): the source's
// worker is frozen (SIGSTOP) when the move hands over, so the source's
// stop is never confirmed; its node is declared lost and the move ends
// with the target running. When the worker thaws, the source's process —
// which ran the whole time — is stopped, not adopted as a second running
// instance: the job has one instance (primary~1) and one process.
func TestE2E_MoveSourceFrozenDuringHandOver(t *testing.T) {
	ctx := context.Background()
	f := newFleet(t, slotSpec{name: "a", zone: "z1", capacity: 4})
	ev := &testproc.EventLog{}
	ev.Follow(t, f.mc, 10*time.Second)
	dir := testproc.JobFilesDir(t)
	_, err := f.mc.CreateJob(ctx, stampJob("j", dir, 1))
	require.NoError(t, err)
	a := f.byName["a"]
	f.awaitStamped("j", "primary", dir, a.id)
	src, ok := testproc.ReadPID(filepath.Join(dir, "j.primary.pid"))
	require.True(t, ok)
	b := f.add(slotSpec{name: "b", zone: "z1", capacity: 4})

	require.NoError(t, a.w.Cmd.Process.Signal(syscall.SIGSTOP))
	t.Cleanup(func() { _ = a.w.Cmd.Process.Signal(syscall.SIGCONT) })
	mv, err := f.mc.MigrateJob(ctx, "j", "primary", client.NodeID(b.id), "frozen source")
	require.NoError(t, err)
	require.Equal(t, "primary~1", mv.GetTargetRole())
	f.awaitStamped("j", "primary~1", dir, b.id)
	testproc.Await(t, 120*time.Second, "the move ended with the frozen source's node lost", func() error {
		r, err := f.mc.JobByID(ctx, "j")
		if err != nil {
			return err
		}
		if len(r.GetMigrations()) > 0 || len(r.GetInstances()) != 1 {
			return fmt.Errorf("moves %v, instances %v", r.GetMigrations(), r.GetInstances())
		}
		return nil
	})
	require.True(t, testproc.PIDAlive(src), "the source's process ran on while its worker was frozen")

	require.NoError(t, a.w.Cmd.Process.Signal(syscall.SIGCONT))
	testproc.Await(t, 60*time.Second, "the thawed worker's source process stopped", func() error {
		if testproc.PIDAlive(src) {
			return fmt.Errorf("source process %d runs", src)
		}
		return nil
	})
	f.barrier("after-thaw")
	r, err := f.mc.JobByID(ctx, "j")
	require.NoError(t, err)
	require.Len(t, r.GetInstances(), 1, "one instance: %v", r.GetInstances())
	require.Equal(t, "primary~1", r.GetInstances()[0].GetJobKey().GetRole())
	require.Equal(t, b.id, r.GetInstances()[0].GetNodeId().GetNodeId())
	tgt, ok := testproc.ReadPID(filepath.Join(dir, "j.primary~1.pid"))
	require.True(t, ok)
	require.True(t, testproc.PIDAlive(tgt), "the target's process runs")
	completed := 0
	for _, e := range ev.Snapshot() {
		if e.GetMigrationCompleted() != nil {
			completed++
		}
	}
	require.Equal(t, 1, completed)
}
