package e2e

import (
	"context"
	"crypto/sha256"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/norsk-oss/norsk-manager/client"
	"github.com/norsk-oss/norsk-manager/proto/commonpb"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
	"github.com/norsk-oss/norsk-manager/test/testproc"
)

// storageClient connects to one manager; calls wait for the connection
// (a restarted manager) up to the call timeout.
func storageClient(t *testing.T, addr string) *client.NorskManager {
	t.Helper()
	cl, err := client.Connect(context.Background(), client.Settings{URL: addr, Timeout: 10 * time.Second,
		DialOptions: []grpc.DialOption{grpc.WithDefaultCallOptions(grpc.WaitForReady(true))}})
	require.NoError(t, err)
	t.Cleanup(func() { cl.Close() })
	return cl
}

func storageJob(id string) *managerpb.Job {
	return &managerpb.Job{JobId: &commonpb.JobId{JobId: id}, Description: "storage test " + id, Tags: map[string]string{"suite": "storage"}}
}

// treeDigest hashes every file under dir except lock files: equal digests
// mean nothing was changed.
func treeDigest(t *testing.T, dir string) string {
	t.Helper()
	h := sha256.New()
	require.NoError(t, filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || d.Name() == "norsk-manager.lock" {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		fmt.Fprintf(h, "%s %x\n", p, sha256.Sum256(b))
		return nil
	}))
	return fmt.Sprintf("%x", h.Sum(nil))
}

// overwrite writes n random bytes into path at a random offset and
// returns the offset.
func overwrite(t *testing.T, path string, n int, rng *rand.Rand) int64 {
	t.Helper()
	fi, err := os.Stat(path)
	require.NoError(t, err)
	off := rng.Int64N(max(fi.Size()-int64(n), 1))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(rng.UintN(256))
	}
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	require.NoError(t, err)
	_, err = f.WriteAt(b, off)
	require.NoError(t, err)
	require.NoError(t, f.Close())
	return off
}

// TestStorage_CorruptTable: 500 random bytes written into a table of a
// stopped single manager's store (the experiment) make the next
// start exit non-zero at once, naming the file and the way out, with the
// data dir unchanged (it never dials a worker, so it cannot stop a job as
// unknown); norsk-manager verify reports the file and exits 1.
func TestStorage_CorruptTable(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	port := testproc.FreePort(t)
	m := startManager(t, dir, port)
	cl := storageClient(t, m.addr)
	for i := range 300 {
		_, err := cl.CreateJob(context.Background(), storageJob(fmt.Sprintf("ct-%03d", i)))
		require.NoError(t, err)
	}
	m.Stop() // a graceful stop flushes the store into tables
	ssts, err := filepath.Glob(filepath.Join(dir, "store", "*.sst"))
	require.NoError(t, err)
	require.NotEmpty(t, ssts)
	sort.Strings(ssts)
	seed := uint64(time.Now().UnixNano())
	rng := rand.New(rand.NewPCG(seed, 1))
	sst := ssts[rng.IntN(len(ssts))]
	off := overwrite(t, sst, 500, rng)
	t.Logf("500 random bytes at offset %d of %s (seed %d)", off, sst, seed)
	before := treeDigest(t, dir)

	p := start(t, "manager-damaged", "norsk-manager", "--data-dir", dir, "--api-addr", testproc.Addr(port))
	code, exited := p.Exited(30 * time.Second)
	require.True(t, exited, "a manager on a damaged store must refuse to start:\n%s", p.Output())
	require.NotZero(t, code)
	out := p.Output()
	for _, want := range []string{sst + " is damaged", "refusing to start", "norsk-manager restore", "norsk-manager verify --data-dir " + dir} {
		require.Contains(t, out, want)
	}
	require.False(t, testproc.Serving(testproc.Addr(port)))
	require.Equal(t, before, treeDigest(t, dir), "a refused start changes nothing")

	v := start(t, "verify", "norsk-manager", "verify", "--data-dir", dir)
	code, exited = v.Exited(60 * time.Second)
	require.True(t, exited)
	require.Equal(t, 1, code, "verify exits 1 on damage:\n%s", v.Output())
	require.Contains(t, v.Output(), "DAMAGED")
	require.Contains(t, v.Output(), sst)
}

// TestStorage_DataDirInUse: a second manager on a running manager's data
// dir exits non-zero with "data dir … in use by another manager" (not
// badger's lock text), and the first keeps serving; verify refuses it too.
func TestStorage_DataDirInUse(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	m := startManager(t, dir, testproc.FreePort(t))
	p := start(t, "manager-2", "norsk-manager", "--data-dir", dir, "--api-addr", testproc.Addr(testproc.FreePort(t)))
	code, exited := p.Exited(30 * time.Second)
	require.True(t, exited)
	require.NotZero(t, code)
	require.Contains(t, p.Output(), fmt.Sprintf("data dir %s in use by another manager (process %d)", dir, m.Cmd.Process.Pid))
	require.NotContains(t, p.Output(), "Badger")
	require.True(t, testproc.Serving(m.addr))

	v := start(t, "verify", "norsk-manager", "verify", "--data-dir", dir)
	code, exited = v.Exited(30 * time.Second)
	require.True(t, exited)
	require.Equal(t, 3, code, "%s", v.Output())
	require.Contains(t, v.Output(), "in use by another manager")
}

// TestStorage_KilledRepeatedly: a single manager under CreateJob load is
// SIGKILLed ten times, each after a random number of further acknowledged
// creates; every restart serves the first time, and every acknowledged job
// is there at the end (and verify finds the store sound).
func TestStorage_KilledRepeatedly(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	port := testproc.FreePort(t)
	m := startManager(t, dir, port)
	cl := storageClient(t, m.addr)
	seed := uint64(time.Now().UnixNano())
	rng := rand.New(rand.NewPCG(seed, 2))
	t.Logf("seed %d", seed)

	var mu sync.Mutex
	acked := map[string]bool{}
	ackedN := func() int { mu.Lock(); defer mu.Unlock(); return len(acked) }
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ctx.Err() == nil; i++ {
				id := fmt.Sprintf("kr-%d-%05d", w, i)
				// Retried with the same id until acknowledged: a create
				// cut off by the kill may or may not have committed.
				for retried := false; ctx.Err() == nil; retried = true {
					_, err := cl.CreateJob(ctx, storageJob(id))
					if err == nil || (retried && status.Code(err) == codes.AlreadyExists) {
						mu.Lock()
						acked[id] = true
						mu.Unlock()
						break
					}
				}
			}
		}()
	}
	defer wg.Wait()
	defer cancel()

	for round := range 10 {
		target := ackedN() + 20 + rng.IntN(200)
		testproc.Eventually(t, 60*time.Second, fmt.Sprintf("%d acknowledged creates", target), func() bool {
			return ackedN() >= target
		})
		m.Kill()
		t.Logf("round %d: SIGKILLed after %d acknowledged creates", round, ackedN())
		m = startManager(t, dir, port) // fails the test if the start does not serve
	}
	cancel()
	wg.Wait()

	mu.Lock()
	defer mu.Unlock()
	jobs, err := cl.JobSearch(context.Background(), client.IDRe("^kr-"))
	require.NoError(t, err)
	have := map[string]bool{}
	for _, j := range jobs {
		have[j.GetJob().GetJobId().GetJobId()] = true
	}
	var missing []string
	for id := range acked {
		if !have[id] {
			missing = append(missing, id)
		}
	}
	sort.Strings(missing)
	require.Empty(t, missing, "acknowledged creates lost across 10 SIGKILLs")
	t.Logf("%d acknowledged creates all present after 10 SIGKILLs", len(acked))

	m.Stop()
	v := start(t, "verify", "norsk-manager", "verify", "--data-dir", dir)
	code, exited := v.Exited(60 * time.Second)
	require.True(t, exited)
	require.Equal(t, 0, code, "%s", v.Output())
	require.True(t, strings.Contains(v.Output(), "result: sound"), "%s", v.Output())
}
