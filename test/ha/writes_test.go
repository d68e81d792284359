package ha

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/norsk-oss/norsk-manager/test/testproc"
)

// TestWrites_CreateJob_LeaderKilled: 1,000 creates from 8 goroutines
// through a client of all three managers, each retried with the same job
// id until acknowledged (retryableCreate says which codes and why), while
// the leader is SIGKILLed partway and restarted later. Every acknowledged
// job must then exist exactly once on every manager, each read on its own.
func TestWrites_CreateJob_LeaderKilled(t *testing.T) {
	skipShort(t)
	c := testproc.NewCluster(t, 3)
	c.StartAll()
	leader := awaitFormed(t, c.Managers)

	const total = 1000
	load := newCreateLoad(haConnect(t, c.URLs(), callTimeout), "lk", 8, total, true)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	start := time.Now()
	wait := load.start(ctx)
	defer wait()
	defer cancel() // before wait, when the test fails early

	load.awaitAcked(t, 300, 90*time.Second)
	leader.Kill()
	killedAt := load.ackedCount()
	t.Logf("SIGKILLed the leader %s after %d acknowledged creates (%s)", leader.Name, killedAt, time.Since(start).Round(time.Millisecond))
	load.awaitAcked(t, killedAt+300, 90*time.Second)
	leader.Start()
	t.Logf("restarted %s after %d acknowledged creates (%s)", leader.Name, load.ackedCount(), time.Since(start).Round(time.Millisecond))
	wait()
	require.NoError(t, ctx.Err(), "the load did not finish in time")
	t.Logf("%d creates done in %s", total, time.Since(start).Round(time.Millisecond))
	load.requireNoUnexpected(t)

	acked, unknown := load.result()
	require.Len(t, acked, total, "every create is acknowledged in the end (retried until it is)")
	require.Empty(t, unknown)
	awaitFormed(t, c.Managers)
	requireJobsOnEvery(t, c.Managers, "lk-", acked, unknown)

	// A late retry of an acknowledged create: the gateway gives every call
	// a fresh request id, so it is a second create of an existing job,
	// answered AlreadyExists and changing nothing (which is why createLoad
	// counts an AlreadyExists on a retry as the acknowledgement).
	cl := haConnect(t, c.URLs(), callTimeout)
	job := acked["lk-000500"]
	before, err := cl.JobByID(context.Background(), "lk-000500")
	require.NoError(t, err)
	_, err = cl.CreateJob(context.Background(), job)
	require.Equal(t, codes.AlreadyExists, status.Code(err), "CreateJob of an existing identical job: %v", err)
	after, err := cl.JobByID(context.Background(), "lk-000500")
	require.NoError(t, err)
	require.True(t, proto.Equal(before.GetJob(), after.GetJob()), "a duplicate create must not change the job")
	require.Len(t, after.GetJob().GetHistoryEntry(), 1, "one creation in the job's history")
}

// TestWrites_RollingRestart: the three managers are restarted one at a
// time (SIGTERM, start, serving and a voter again, next) under continuous
// create traffic that is not retried. Creates may fail while a manager
// leaves (the counts are logged), but none that was acknowledged may be
// lost or duplicated on any manager.
func TestWrites_RollingRestart(t *testing.T) {
	skipShort(t)
	c := testproc.NewCluster(t, 3)
	c.StartAll()
	awaitFormed(t, c.Managers)

	load := newCreateLoad(haConnect(t, c.URLs(), callTimeout), "rr", 4, 0, false)
	ctx, cancel := context.WithCancel(context.Background())
	wait := load.start(ctx)
	defer wait()
	defer cancel()

	load.awaitAcked(t, 50, formTimeout)
	for _, m := range c.Managers {
		before := load.ackedCount()
		start := time.Now()
		m.Stop()
		stopped := time.Now()
		m.Start()
		m.WaitServing(formTimeout)
		serving := time.Now()
		awaitFormed(t, c.Managers)
		formed := time.Now()
		// Traffic flows on the new configuration before the next restart.
		load.awaitAcked(t, load.ackedCount()+20, formTimeout)
		t.Logf("restarted %s in %s (stop %s, serving %s, voter %s, traffic %s); %d creates acknowledged meanwhile; failed attempts so far: %s",
			m.Name, time.Since(start).Round(time.Millisecond), stopped.Sub(start).Round(time.Millisecond), serving.Sub(stopped).Round(time.Millisecond),
			formed.Sub(serving).Round(time.Millisecond), time.Since(formed).Round(time.Millisecond), load.ackedCount()-before, load.failureSummary())
	}
	cancel()
	wait()
	load.requireNoUnexpected(t)
	acked, unknown := load.result()
	requireJobsOnEvery(t, c.Managers, "rr-", acked, unknown)
}
