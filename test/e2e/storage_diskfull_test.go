package e2e

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/norsk-oss/norsk-manager/client"
	"github.com/norsk-oss/norsk-manager/proto/commonpb"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
	"github.com/norsk-oss/norsk-manager/test/testproc"
)

// mountTmpfs mounts a tmpfs of size (mount's -o size=, e.g. "32m") on a
// new directory and unmounts it when the test ends (after the processes
// the test starts later were stopped: cleanups run last-in first-out). It
// skips the test when mounting is not permitted (not root, a container
// without CAP_SYS_ADMIN).
func mountTmpfs(t *testing.T, size string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "tmpfs")
	require.NoError(t, os.Mkdir(dir, 0o755))
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size="+size, "tmpfs", dir).CombinedOutput(); err != nil {
		t.Skipf("this test needs a small tmpfs, and mounting one is not permitted here (run as root with CAP_SYS_ADMIN): mount: %v: %s", err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", dir).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v: %s", dir, err, out)
		}
	})
	return dir
}

// fillFile writes a file of n bytes.
func fillFile(t *testing.T, path string, n int) {
	t.Helper()
	require.NoError(t, os.WriteFile(path, make([]byte, n), 0o644))
}

// bigJob is a job with a description of n letters that do not compress
// much (as real text would less than zeros).
func bigJob(id string, n int, rng *rand.Rand) *managerpb.Job {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte('a' + rng.IntN(26))
	}
	return &managerpb.Job{JobId: &commonpb.JobId{JobId: id}, Description: string(b), Tags: map[string]string{"suite": "diskfull"}}
}

// metric returns the line of /metrics at addr starting with name and a
// space, or "".
func metric(t *testing.T, addr, name string) string {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, name+" ") {
			return l
		}
	}
	return ""
}

// TestStorage_DiskFull: a single manager whose data dir is on a small
// tmpfs (the SIGBUS: badger's mmap'd write-ahead log faults when
// the filesystem is full) is filled with jobs of 30 KB descriptions. Before
// the disk is full creates are refused RESOURCE_EXHAUSTED with a message
// naming the free space and the reserve; the manager stays up and answers
// reads with every acknowledged job; once a filler file on the same tmpfs
// is deleted creates succeed again by themselves; after a SIGKILL and a
// restart (on the low disk, and again after space was freed) every
// acknowledged job is there.
func TestStorage_DiskFull(t *testing.T) {
	// The smallest reserve is the 64 MiB memtable and a 4 MiB batch
	// (the table a full memtable is flushed into must fit, also at the
	// start after a crash): about 12 MiB are left for jobs beside the
	// 20 MiB filler. The filler is freed later and must give back more
	// than the restart on the low disk takes (its flush of the replayed
	// log, up to what the jobs wrote): with 8 MiB it did not always (a
	// restart took 16 MiB once, and the create after the fillers were
	// deleted was still refused).
	mnt := mountTmpfs(t, "104m")
	filler := filepath.Join(mnt, "filler")
	fillFile(t, filler, 20<<20)
	dir := filepath.Join(mnt, "data")
	port, mport := testproc.FreePort(t), testproc.FreePort(t)
	flags := []string{"--min-free-disk", "72MiB", "--metrics-addr", testproc.Addr(mport)}
	m := startManager(t, dir, port, flags...)
	cl := storageClient(t, m.addr)
	seed := uint64(time.Now().UnixNano())
	rng := rand.New(rand.NewPCG(seed, 3))
	t.Logf("seed %d", seed)

	ctx := context.Background()
	var acked []string
	var refusal error
	for i := 0; i < 2000 && refusal == nil; i++ {
		id := fmt.Sprintf("df-%04d", i)
		_, err := cl.CreateJob(ctx, bigJob(id, 30<<10, rng))
		switch {
		case err == nil:
			acked = append(acked, id)
		case status.Code(err) == codes.ResourceExhausted:
			refusal = err
		default:
			t.Fatalf("create %s after %d acknowledged: %v\n%s", id, len(acked), err, m.Output())
		}
	}
	require.Error(t, refusal, "2000 jobs of 30 KB on a 104 MiB tmpfs were never refused")
	msg := status.Convert(refusal).Message()
	t.Logf("refused after %d acknowledged creates: %s", len(acked), msg)
	for _, want := range []string{"the data dir's filesystem has ", " MiB free, below the reserve of 72.0 MiB", "free space or move the data dir (" + dir + ")"} {
		require.Contains(t, msg, want)
	}
	require.NotEmpty(t, acked)
	require.True(t, m.Running(), "the manager died on a full disk:\n%s", m.Output())
	require.Contains(t, m.Output(), "refusing writes until space is freed")
	require.Equal(t, "norsk_manager_writes_refused_for_space 1", metric(t, testproc.Addr(mport), "norsk_manager_writes_refused_for_space"))
	require.NotEmpty(t, metric(t, testproc.Addr(mport), "norsk_manager_data_dir_free_bytes"))

	requireJobs := func(stage string) {
		t.Helper()
		jobs, err := cl.JobSearch(ctx, client.IDRe("^df-"))
		require.NoError(t, err, stage)
		have := map[string]bool{}
		for _, j := range jobs {
			have[j.GetJob().GetJobId().GetJobId()] = true
		}
		var missing []string
		for _, id := range acked {
			if !have[id] {
				missing = append(missing, id)
			}
		}
		require.Empty(t, missing, "%s: acknowledged jobs missing", stage)
	}
	requireJobs("reads while writes are refused")
	refusedID := fmt.Sprintf("df-%04d", len(acked))
	_, err := cl.JobByID(ctx, client.JobID(refusedID))
	require.Equal(t, codes.NotFound, status.Code(err), "the refused create of %s was written: %v", refusedID, err)

	// A restart while the disk is still low: the store flushes the
	// replayed write-ahead log into a table (inside the reserve), serves
	// reads and still refuses writes. The refusal came within a write of
	// the reserve, and a restart's compactions can free that much: a
	// second filler keeps the disk clearly below it.
	filler2 := filepath.Join(mnt, "filler2")
	fillFile(t, filler2, 4<<20)
	m.Kill()
	m = startManager(t, dir, port, flags...)
	requireJobs("after a SIGKILL and a restart on a low disk")
	_, err = cl.CreateJob(ctx, bigJob("df-still-low", 30<<10, rng))
	require.Equal(t, codes.ResourceExhausted, status.Code(err), "a create after a restart on a low disk: %v", err)

	require.NoError(t, os.Remove(filler))
	require.NoError(t, os.Remove(filler2))
	id := "df-after-free"
	_, err = cl.CreateJob(ctx, bigJob(id, 30<<10, rng))
	require.NoError(t, err, "a create after space was freed")
	acked = append(acked, id)
	require.Contains(t, m.Output(), "writes resume")

	m.Kill()
	m = startManager(t, dir, port, flags...)
	requireJobs("after a SIGKILL and a restart")
	t.Logf("%d acknowledged jobs all present after the restart", len(acked))
}
