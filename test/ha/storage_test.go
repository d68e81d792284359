package ha

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/norsk-oss/norsk-manager/proto/managerpb"
	"github.com/norsk-oss/norsk-manager/test/testproc"
)

// damageTable writes 500 random bytes at a random offset into a random
// table of the badger dir and returns the table's path.
func damageTable(t *testing.T, dir string, rng *rand.Rand) string {
	t.Helper()
	ssts, err := filepath.Glob(filepath.Join(dir, "*.sst"))
	require.NoError(t, err)
	require.NotEmpty(t, ssts, "no table in %s", dir)
	sort.Strings(ssts)
	sst := ssts[rng.IntN(len(ssts))]
	fi, err := os.Stat(sst)
	require.NoError(t, err)
	off := rng.Int64N(max(fi.Size()-500, 1))
	b := make([]byte, 500)
	for i := range b {
		b[i] = byte(rng.UintN(256))
	}
	f, err := os.OpenFile(sst, os.O_WRONLY, 0)
	require.NoError(t, err)
	_, err = f.WriteAt(b, off)
	require.NoError(t, err)
	require.NoError(t, f.Close())
	t.Logf("500 random bytes at offset %d of %s", off, sst)
	return sst
}

// runVerify runs norsk-manager verify on dir and returns its exit code
// and output.
func runVerify(t *testing.T, name, dir string) (int, string) {
	t.Helper()
	p := testproc.Start(t, name, "norsk-manager", "verify", "--data-dir", dir)
	code, ok := p.Exited(2 * time.Minute)
	require.True(t, ok, "verify did not finish")
	return code, p.Output()
}

// TestStorage_RebuildDamagedMember: a cluster member whose store was
// damaged while it was stopped (500 random bytes in a table of its FSM
// store) refuses to start, naming the file and the rebuild; verify exits 1
// naming it. Rebuilt as the README says — its data dir moved aside, started
// again with the same flags on an empty data dir — it rejoins as a voter
// and serves every job the cluster acknowledged, before and after.
func TestStorage_RebuildDamagedMember(t *testing.T) {
	skipShort(t)
	seed := uint64(time.Now().UnixNano())
	rng := rand.New(rand.NewPCG(seed, 3))
	t.Logf("seed %d", seed)
	c := testproc.NewCluster(t, 3)
	c.StartAll()
	awaitFormed(t, c.Managers)

	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	load := newCreateLoad(haConnect(t, c.URLs(), callTimeout), "rb", 4, 400, true)
	load.start(ctx)()
	require.NoError(t, ctx.Err())
	load.requireNoUnexpected(t)
	acked, unknown := load.result()
	require.Len(t, acked, 400)

	m := c.Managers[rng.IntN(len(c.Managers))]
	m.Stop() // a graceful stop flushes its stores into tables
	sst := damageTable(t, filepath.Join(m.DataDir, "store"), rng)

	m.Start()
	code, exited := m.Proc().Exited(60 * time.Second)
	require.True(t, exited, "%s on a damaged store must refuse to start", m.Name)
	require.NotZero(t, code)
	out := m.Proc().Output()
	require.Contains(t, out, sst+" is damaged")
	require.Contains(t, out, "rebuild this cluster member from the cluster")

	code, vout := runVerify(t, m.Name+"-verify", m.DataDir)
	require.Equal(t, 1, code, "verify on the damaged member:\n%s", vout)
	require.Contains(t, vout, sst)

	// More writes while the member is away: it must get them too.
	cl := haConnect(t, c.URLs(), callTimeout)
	for i := range 50 {
		job := haJob(fmt.Sprintf("rb-away-%03d", i), "away")
		createJobAcked(t, cl, job)
		acked[job.GetJobId().GetJobId()] = job
	}

	// The rebuild: move the damaged data dir aside, start on an empty one.
	require.NoError(t, os.Rename(m.DataDir, m.DataDir+".damaged"))
	start := time.Now()
	m.Start()
	m.WaitServing(formTimeout)
	awaitFormed(t, c.Managers)
	t.Logf("%s rebuilt from the cluster: serving and a voter again in %s", m.Name, time.Since(start).Round(time.Millisecond))

	requireJobsOnEvery(t, []*testproc.Manager{m}, "rb-", acked, unknown)
	// And it is a full member: a write through it is on every manager.
	job := haJob("rb-after", "after")
	createJobAcked(t, haConnect(t, m.APIAddr, callTimeout), job)
	requireJobsOnEvery(t, c.Managers, "rb-after", map[string]*managerpb.Job{"rb-after": job}, nil)

	m.Stop()
	code, vout = runVerify(t, m.Name+"-verify-rebuilt", m.DataDir)
	require.Equal(t, 0, code, "verify on the rebuilt member:\n%s", vout)
	require.Contains(t, vout, "raft store")
}

// TestStorage_MembersKilledRepeatedly: the run — the leader (and,
// every third round, a follower) SIGKILLed eight times under CreateJob
// load, each time after a random number of further acknowledged creates,
// and restarted at once. Every restart must serve the first time (the
// fifth such restart of the issue exited at once on its Raft store); at
// the end every acknowledged job is on every manager and every data dir
// verifies sound.
func TestStorage_MembersKilledRepeatedly(t *testing.T) {
	skipShort(t)
	seed := uint64(time.Now().UnixNano())
	rng := rand.New(rand.NewPCG(seed, 4))
	t.Logf("seed %d", seed)
	c := testproc.NewCluster(t, 3)
	c.StartAll()
	leader := awaitFormed(t, c.Managers)

	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	load := newCreateLoad(haConnect(t, c.URLs(), callTimeout), "mk", 4, 0, true)
	wait := load.start(ctx)
	defer wait()
	defer cancel()

	for round := range 8 {
		victim := leader
		if round%3 == 2 {
			victim = others(c.Managers, leader)[rng.IntN(2)]
		}
		target := load.ackedCount() + 10 + rng.IntN(150)
		load.awaitAcked(t, target, 2*time.Minute)
		victim.Kill()
		t.Logf("round %d: SIGKILLed %s after %d acknowledged creates", round, victim.Name, load.ackedCount())
		victim.Start()
		victim.WaitServing(formTimeout) // fails the test if the restart exits
		leader = awaitFormed(t, c.Managers)
	}
	cancel()
	wait()
	load.requireNoUnexpected(t)
	acked, unknown := load.result()
	require.NotEmpty(t, acked)
	requireJobsOnEvery(t, c.Managers, "mk-", acked, unknown)

	for _, m := range c.Managers {
		m.Stop()
	}
	for _, m := range c.Managers {
		code, out := runVerify(t, m.Name+"-verify", m.DataDir)
		require.Equal(t, 0, code, "verify %s:\n%s", m.Name, out)
	}
}
