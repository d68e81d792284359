package bundle_test

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/norsk-oss/norsk-manager/actors"
	"github.com/norsk-oss/norsk-manager/actors/bundle"
	"github.com/norsk-oss/norsk-manager/actors/job"
	"github.com/norsk-oss/norsk-manager/actors/reconcile"
	"github.com/norsk-oss/norsk-manager/persistence"
	"github.com/norsk-oss/norsk-manager/proto/commonpb"
	"github.com/norsk-oss/norsk-manager/proto/errorpb"
	"github.com/norsk-oss/norsk-manager/proto/internalpb"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
)

// gate is an actors.Router in front of the host that fails the job
// grains' DeleteJob while blockDeletes is set (as a job whose instances
// are still stopping does), to hold a delete saga in the middle.
type gate struct {
	actors.Router
	system       *actor.ActorSystem
	blockDeletes atomic.Bool
	deletes      atomic.Int32 // DeleteJob commands that reached a job grain
}

func (g *gate) RequestFuture(kind, identity string, cmd proto.Message, timeout time.Duration) *actor.Future {
	if c, ok := cmd.(*internalpb.JobCommand); ok && c.GetDelete() != nil {
		if g.blockDeletes.Load() {
			f := actor.NewFuture(g.system, timeout)
			g.system.Root.Send(f.PID(), actors.Fail(errorpb.Code_FAILED_PRECONDITION, "job %q has running instances (test)", identity))
			return f
		}
		g.deletes.Add(1)
	}
	return g.Router.RequestFuture(kind, identity, cmd, timeout)
}

// env is a host with real job and bundle grains over a real store; it can
// be stopped and started again over the same store (a manager restart).
type env struct {
	store   *persistence.Store
	journal persistence.Journal
	gate    *gate
	host    *actors.Host
	system  *actor.ActorSystem
	stop    func() // stops the host and its system (idempotent)
}

func newEnv(t *testing.T) *env {
	store, log := persistence.TestStore(t)
	e := &env{store: store, journal: log}
	e.start(t)
	return e
}

func (e *env) start(t *testing.T) {
	e.system = actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return slog.New(slog.DiscardHandler) }))
	g := &gate{system: e.system}
	if e.gate != nil {
		g.blockDeletes.Store(e.gate.blockDeletes.Load())
	}
	e.gate = g
	host, err := actors.NewHost(e.system, actors.HostConfig{RequestTimeout: 5 * time.Second},
		job.Kind(job.Config{Journal: e.journal, Router: g}),
		bundle.Kind(bundle.Config{Journal: e.journal, Router: g, RetryMin: 5 * time.Millisecond, RetryMax: 20 * time.Millisecond}))
	require.NoError(t, err)
	g.Router = host
	e.host = host
	var once sync.Once
	system := e.system
	e.stop = func() { once.Do(func() { host.Stop(); system.Shutdown() }) }
	t.Cleanup(e.stop)
}

// restart stops every grain and starts a fresh host over the same store.
func (e *env) restart(t *testing.T) {
	e.stop()
	e.start(t)
}

func (e *env) bundleCmd(t *testing.T, reqID, id string, cmd *internalpb.BundleCommand) *internalpb.Reply {
	t.Helper()
	cmd.RequestId, cmd.BundleId = reqID, id
	r, err := e.host.Request(context.Background(), actors.KindBundle, id, cmd)
	require.NoError(t, err)
	return r
}

func (e *env) create(t *testing.T, reqID string, b *managerpb.Bundle) *internalpb.Reply {
	t.Helper()
	return e.bundleCmd(t, reqID, b.GetBundleId().GetBundleId(), &internalpb.BundleCommand{Cmd: &internalpb.BundleCommand_Create{Create: &internalpb.CreateBundle{Bundle: b}}})
}

func (e *env) update(t *testing.T, reqID string, b *managerpb.Bundle) *internalpb.Reply {
	t.Helper()
	return e.bundleCmd(t, reqID, b.GetBundleId().GetBundleId(), &internalpb.BundleCommand{Cmd: &internalpb.BundleCommand_Update{Update: &internalpb.UpdateBundle{Bundle: b}}})
}

func (e *env) del(t *testing.T, reqID, id string) *internalpb.Reply {
	t.Helper()
	return e.bundleCmd(t, reqID, id, &internalpb.BundleCommand{Cmd: &internalpb.BundleCommand_Delete{Delete: &internalpb.DeleteBundle{}}})
}

func (e *env) setDormant(t *testing.T, reqID, id string, replica uint32, name string, dormant bool) *internalpb.Reply {
	t.Helper()
	return e.bundleCmd(t, reqID, id, &internalpb.BundleCommand{Cmd: &internalpb.BundleCommand_SetDormant{SetDormant: &internalpb.SetBundleJobDormant{
		ReplicaIndex: replica, JobName: name, Dormant: dormant}}})
}

// record reads the bundle record from the store (nil if it does not exist).
func (e *env) record(t *testing.T, id string) *internalpb.BundleRecord {
	t.Helper()
	var rec *internalpb.BundleRecord
	err := e.store.View(func(r *persistence.Reader) error {
		var err error
		rec, _, err = r.Bundle(id)
		return err
	})
	if err == persistence.ErrNotFound {
		return nil
	}
	require.NoError(t, err)
	return rec
}

// jobs returns the live jobs of the store by id.
func (e *env) jobs(t *testing.T) map[string]*internalpb.JobRecord {
	t.Helper()
	out := map[string]*internalpb.JobRecord{}
	require.NoError(t, e.store.View(func(r *persistence.Reader) error {
		return r.Jobs(func(j *internalpb.JobRecord) error {
			out[j.GetJob().GetJob().GetJobId().GetJobId()] = j
			return nil
		})
	}))
	return out
}

// eventKinds returns the bundle events of the log in order.
func (e *env) bundleEvents(t *testing.T) []string {
	t.Helper()
	evs, err := e.store.ReadEvents(1, 10000)
	require.NoError(t, err)
	var out []string
	for _, se := range evs {
		switch x := se.GetEvent().GetEvent().(type) {
		case *managerpb.EventStreamEvent_BundleUpdated:
			out = append(out, "updated:"+x.BundleUpdated.GetBundle().GetBundleId().GetBundleId()+":"+x.BundleUpdated.GetBundle().GetState().String())
		case *managerpb.EventStreamEvent_BundleDeleted:
			out = append(out, "deleted:"+x.BundleDeleted.GetBundleId().GetBundleId())
		}
	}
	return out
}

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func spec(name, mode string, desc string) *managerpb.BundleJobSpec {
	return &managerpb.BundleJobSpec{JobName: name, StartMode: mode,
		Requirements: &managerpb.JobRequirements{},
		Job:          &managerpb.Job{Description: desc, Tags: map[string]string{"team": "video"}}}
}

func testBundle(id string, resilient bool, specs ...*managerpb.BundleJobSpec) *managerpb.Bundle {
	b := &managerpb.Bundle{BundleId: &managerpb.BundleId{BundleId: id}, Pool: "p", Jobs: specs}
	if resilient {
		b.ResiliencePolicy = &managerpb.ResiliencePolicy{SameNode: managerpb.AntiAffinity_ANTI_AFFINITY_FORBID}
	}
	return b
}

func TestGrain_Create_ExpandsIntoDerivedJobs(t *testing.T) {
	e := newEnv(t)
	r := e.create(t, "c1", testBundle("b1", true, spec("enc", "", "encoder"), spec("pkg", "manual", "packager")))
	require.Equal(t, errorpb.Code_OK, r.GetCode(), r.GetMessage())
	require.Equal(t, "b1", r.GetCreateBundle().GetBundleId().GetBundleId())

	// Answered once the jobs exist: no polling needed.
	jobs := e.jobs(t)
	require.Len(t, jobs, 4)
	for _, c := range []struct {
		id, replica, name string
		dormant           bool
	}{{"b1.0.enc", "0", "enc", false}, {"b1.0.pkg", "0", "pkg", true}, {"b1.1.enc", "1", "enc", false}, {"b1.1.pkg", "1", "pkg", true}} {
		j := jobs[c.id].GetJob().GetJob()
		require.NotNil(t, j, c.id)
		want := map[string]string{"team": "video", bundle.TagBundleID: "b1", bundle.TagReplicaIndex: c.replica, bundle.TagJobName: c.name}
		if c.dormant {
			want[bundle.TagDormant] = "true"
		}
		require.Equal(t, want, j.GetTags(), c.id)
		require.NotNil(t, j.GetAutoPlacement().GetRequirements(), "requirements stamped into auto_placement")
		require.Equal(t, job.Hash(j), j.GetCurrentHash())
	}
	rec := e.record(t, "b1")
	require.EqualValues(t, 1, rec.GetGeneration())
	require.False(t, rec.GetPendingWork())
	require.Equal(t, []string{"b1.0.enc", "b1.0.pkg", "b1.1.enc", "b1.1.pkg"}, jobIDs(rec.GetJobs()))
	require.Equal(t, []string{"updated:b1:BUNDLE_STATE_LIVE"}, e.bundleEvents(t))

	// An existing id, and a bundle whose derived job id is taken, change nothing.
	r = e.create(t, "c2", testBundle("b1", false, spec("x", "", "")))
	require.Equal(t, errorpb.Code_ALREADY_EXISTS, r.GetCode())
	_, err := e.host.Request(context.Background(), actors.KindJob, "b2.0.enc", &internalpb.JobCommand{JobId: "b2.0.enc", RequestId: "j",
		Cmd: &internalpb.JobCommand_Create{Create: &internalpb.CreateJob{Job: &managerpb.Job{JobId: &commonpb.JobId{JobId: "b2.0.enc"}}}}})
	require.NoError(t, err)
	r = e.create(t, "c3", testBundle("b2", false, spec("enc", "", "")))
	require.Equal(t, errorpb.Code_ALREADY_EXISTS, r.GetCode())
	require.Contains(t, r.GetMessage(), "b2.0.enc")
	require.Nil(t, e.record(t, "b2"))
	require.Len(t, e.jobs(t), 5)
}

func jobIDs(js []*internalpb.BundleJobState) []string {
	var out []string
	for _, j := range js {
		out = append(out, j.GetJobId())
	}
	return out
}

func TestGrain_Update_DiffsDerivedJobs(t *testing.T) {
	e := newEnv(t)
	require.Equal(t, errorpb.Code_OK, e.create(t, "c1", testBundle("b", false, spec("keep", "", "k"), spec("change", "", "v1"), spec("drop", "", "d"))).GetCode())
	before := e.jobs(t)

	r := e.update(t, "u1", testBundle("b", false, spec("keep", "", "k"), spec("change", "", "v2"), spec("new", "manual", "n")))
	require.Equal(t, errorpb.Code_OK, r.GetCode(), r.GetMessage())
	// Answered once the kept and new jobs reflect the update; the removal
	// finishes in the background.
	after := e.jobs(t)
	require.True(t, proto.Equal(before["b.0.keep"], after["b.0.keep"]), "an unchanged job is not touched")
	require.Equal(t, "v2", after["b.0.change"].GetJob().GetJob().GetDescription())
	require.Len(t, after["b.0.change"].GetJob().GetHistoryEntry(), 2, "created, then updated with its current hash")
	require.Equal(t, "true", after["b.0.new"].GetJob().GetJob().GetTags()[bundle.TagDormant])
	eventually(t, "dropped job completed and deleted", func() bool {
		_, ok := e.jobs(t)["b.0.drop"]
		rec := e.record(t, "b")
		return !ok && !rec.GetPendingWork() && len(rec.GetRemovals()) == 0
	})
	rec := e.record(t, "b")
	require.EqualValues(t, 2, rec.GetGeneration())
	require.Equal(t, []string{"b.0.keep", "b.0.change", "b.0.new"}, jobIDs(rec.GetJobs()))

	// Start and stop toggle the dormant tag.
	require.Equal(t, errorpb.Code_OK, e.setDormant(t, "s1", "b", 0, "new", false).GetCode())
	_, dormant := e.jobs(t)["b.0.new"].GetJob().GetJob().GetTags()[bundle.TagDormant]
	require.False(t, dormant)
	require.Equal(t, errorpb.Code_OK, e.setDormant(t, "s2", "b", 0, "new", true).GetCode())
	require.Equal(t, "true", e.jobs(t)["b.0.new"].GetJob().GetJob().GetTags()[bundle.TagDormant])
	require.Equal(t, errorpb.Code_NOT_FOUND, e.setDormant(t, "s3", "b", 1, "new", false).GetCode(), "no replica 1 without a resilience policy")
	require.Equal(t, errorpb.Code_NOT_FOUND, e.update(t, "u9", testBundle("nope", false, spec("a", "", ""))).GetCode())

	// Adding a resilience policy derives the backups.
	b := testBundle("b", true, spec("keep", "", "k"), spec("change", "", "v2"), spec("new", "manual", "n"))
	require.Equal(t, errorpb.Code_OK, e.update(t, "u2", b).GetCode())
	require.Contains(t, e.jobs(t), "b.1.keep")
	require.Equal(t, "true", e.jobs(t)["b.1.new"].GetJob().GetJob().GetTags()[bundle.TagDormant])
	require.Equal(t, "true", e.jobs(t)["b.0.new"].GetJob().GetJob().GetTags()[bundle.TagDormant], "dormant state survives updates")
}

func TestGrain_Delete_SagaResumesAfterRestart(t *testing.T) {
	e := newEnv(t)
	require.Equal(t, errorpb.Code_OK, e.create(t, "c1", testBundle("b", true, spec("a", "", ""), spec("b", "", ""))).GetCode())
	e.gate.blockDeletes.Store(true)
	require.Equal(t, errorpb.Code_OK, e.del(t, "d1", "b").GetCode())
	rec := e.record(t, "b")
	require.Equal(t, managerpb.BundleState_BUNDLE_STATE_DELETING, rec.GetBundle().GetState())
	require.True(t, rec.GetPendingWork())
	require.Equal(t, errorpb.Code_FAILED_PRECONDITION, e.update(t, "u1", testBundle("b", false, spec("a", "", ""))).GetCode())
	require.Equal(t, errorpb.Code_FAILED_PRECONDITION, e.setDormant(t, "s1", "b", 0, "a", true).GetCode())
	require.Equal(t, errorpb.Code_OK, e.del(t, "d2", "b").GetCode(), "deleting a DELETING bundle is OK")

	// The saga completes every job but cannot delete them yet.
	eventually(t, "jobs completed, deletes failing", func() bool {
		rec := e.record(t, "b")
		for _, r := range rec.GetRemovals() {
			if r.GetLastError() == "" {
				return false
			}
		}
		for _, j := range e.jobs(t) {
			if j.GetJob().GetJob().GetState() != managerpb.Job_POST {
				return false
			}
		}
		return len(rec.GetRemovals()) == 4
	})

	// The manager stops mid-saga; on restart the reviver wakes the grain.
	// Deletes are let through only on the new host (its gate counts them):
	// the old host's grain keeps retrying until it stops.
	e.restart(t)
	e.gate.blockDeletes.Store(false)
	require.False(t, e.host.Active(actors.KindBundle, "b"))
	require.NoError(t, reconcile.Revive(context.Background(), reconcile.Config{Store: e.store, Router: e.host}))
	eventually(t, "saga finished", func() bool { return e.record(t, "b") == nil })
	require.Empty(t, e.jobs(t))
	require.EqualValues(t, 4, e.gate.deletes.Load())
	require.Equal(t, []string{"updated:b:BUNDLE_STATE_LIVE", "updated:b:BUNDLE_STATE_DELETING", "deleted:b"}, e.bundleEvents(t))
	require.Equal(t, errorpb.Code_NOT_FOUND, e.del(t, "d3", "b").GetCode())
	require.NoError(t, e.store.View(func(r *persistence.Reader) error {
		return r.PendingBundles(func(id string) error { t.Errorf("bundle %s still pending", id); return nil })
	}))

	// The id can be used again: a new incarnation (by a new request: "c1"
	// again would be a retry of the first create, which the tombstone
	// remembers).
	require.Equal(t, errorpb.Code_OK, e.create(t, "c2", testBundle("b", false, spec("a", "", ""))).GetCode())
	require.Greater(t, e.record(t, "b").GetIncarnation(), uint64(0))
	require.Contains(t, e.jobs(t), "b.0.a")
}

func TestGrain_DuplicateRequestIDs(t *testing.T) {
	e := newEnv(t)
	b := testBundle("b", false, spec("a", "", "v1"))
	require.Equal(t, errorpb.Code_OK, e.create(t, "c1", b).GetCode())
	r := e.create(t, "c1", b)
	require.Equal(t, errorpb.Code_OK, r.GetCode(), "a repeated create is answered as the first: %s", r.GetMessage())
	require.Equal(t, "b", r.GetCreateBundle().GetBundleId().GetBundleId())

	b2 := testBundle("b", false, spec("a", "", "v2"))
	require.Equal(t, errorpb.Code_OK, e.update(t, "u1", b2).GetCode())
	require.Equal(t, errorpb.Code_OK, e.update(t, "u1", b2).GetCode())
	require.EqualValues(t, 2, e.record(t, "b").GetGeneration(), "the repeated update was not applied again")
	require.Len(t, e.jobs(t)["b.0.a"].GetJob().GetHistoryEntry(), 2)

	require.Equal(t, errorpb.Code_OK, e.setDormant(t, "s1", "b", 0, "a", true).GetCode())
	require.Equal(t, errorpb.Code_OK, e.setDormant(t, "s1", "b", 0, "a", true).GetCode())
	require.EqualValues(t, 3, e.record(t, "b").GetGeneration())

	require.Equal(t, errorpb.Code_OK, e.del(t, "d1", "b").GetCode())
	require.Equal(t, errorpb.Code_OK, e.del(t, "d1", "b").GetCode())
	eventually(t, "deleted", func() bool { return e.record(t, "b") == nil })
	// Repeats that arrive once the bundle is gone (its tombstone keeps the
	// request ids) are answered as the first were, and change nothing.
	require.Equal(t, errorpb.Code_OK, e.del(t, "d1", "b").GetCode(), "a repeated delete after the deletion finished")
	require.Equal(t, errorpb.Code_OK, e.create(t, "c1", b).GetCode(), "a repeated create after the deletion finished")
	require.Nil(t, e.record(t, "b"), "a repeat re-created the bundle")
	require.Equal(t, []string{"updated:b:BUNDLE_STATE_LIVE", "updated:b:BUNDLE_STATE_LIVE", "updated:b:BUNDLE_STATE_DELETING", "deleted:b"}, e.bundleEvents(t))
}

func TestGrain_ExpiredCommandIsNotCarriedOut(t *testing.T) {
	e := newEnv(t)
	cmd := &internalpb.BundleCommand{Cmd: &internalpb.BundleCommand_Create{Create: &internalpb.CreateBundle{Bundle: testBundle("late", false, spec("a", "", ""))}}}
	cmd.Deadline = timestampPast()
	r := e.bundleCmd(t, "c1", "late", cmd)
	require.Equal(t, errorpb.Code_DEADLINE_EXCEEDED, r.GetCode())
	require.Nil(t, e.record(t, "late"))
}

func timestampPast() *timestamppb.Timestamp { return timestamppb.New(time.Now().Add(-time.Second)) }

// createPlainJob creates a job that no bundle created, with tags.
func (e *env) createPlainJob(t *testing.T, id string, tags map[string]string) {
	t.Helper()
	r, err := e.host.Request(context.Background(), actors.KindJob, id, &internalpb.JobCommand{JobId: id, RequestId: "plain:" + id,
		Cmd: &internalpb.JobCommand_Create{Create: &internalpb.CreateJob{Job: &managerpb.Job{JobId: &commonpb.JobId{JobId: id}, Description: "plain", Tags: tags}}}})
	require.NoError(t, err)
	require.Equal(t, errorpb.Code_OK, r.GetCode(), r.GetMessage())
}

// foreignTags are the tags of a plain job that takes a derived job's id:
// none, or a forged bundleId (and more) naming the bundle.
var foreignTags = []struct {
	name string
	tags map[string]string
}{
	{"untagged", nil},
	{"forged bundleId tag", map[string]string{bundle.TagBundleID: "c2", bundle.TagReplicaIndex: "0", bundle.TagJobName: "x"}},
}

func TestGrain_Create_RefusesExistingJobWhateverItsTags(t *testing.T) {
	for _, c := range foreignTags {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t)
			e.createPlainJob(t, "c2.0.x", c.tags)
			before := e.jobs(t)["c2.0.x"]

			r := e.create(t, "c1", testBundle("c2", false, spec("a", "", ""), spec("x", "", "")))
			require.Equal(t, errorpb.Code_ALREADY_EXISTS, r.GetCode(), r.GetMessage())
			require.Contains(t, r.GetMessage(), `"c2.0.x"`)
			require.Nil(t, e.record(t, "c2"), "nothing written")
			require.Empty(t, e.bundleEvents(t))
			jobs := e.jobs(t)
			require.Len(t, jobs, 1, "no derived job created")
			require.True(t, proto.Equal(before, jobs["c2.0.x"]), "the plain job is untouched")
		})
	}
}

func TestGrain_Update_RefusesExistingJobWhateverItsTags(t *testing.T) {
	for _, c := range foreignTags {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t)
			require.Equal(t, errorpb.Code_OK, e.create(t, "c1", testBundle("c2", false, spec("a", "", ""))).GetCode())
			e.createPlainJob(t, "c2.0.x", c.tags)
			before := e.jobs(t)["c2.0.x"]
			recBefore := e.record(t, "c2")

			r := e.update(t, "u1", testBundle("c2", false, spec("a", "", ""), spec("x", "", "")))
			require.Equal(t, errorpb.Code_ALREADY_EXISTS, r.GetCode(), r.GetMessage())
			require.Contains(t, r.GetMessage(), `"c2.0.x"`)
			require.True(t, proto.Equal(recBefore, e.record(t, "c2")), "nothing written: generation %d", e.record(t, "c2").GetGeneration())
			require.EqualValues(t, 1, e.record(t, "c2").GetGeneration())
			require.Equal(t, []string{"updated:c2:BUNDLE_STATE_LIVE"}, e.bundleEvents(t), "no bundle_updated for the refused update")
			require.True(t, proto.Equal(before, e.jobs(t)["c2.0.x"]), "the plain job is untouched")

			// A retry with the same request id is refused again (it was
			// never applied), and an update without the taken id goes through.
			require.Equal(t, errorpb.Code_ALREADY_EXISTS, e.update(t, "u1", testBundle("c2", false, spec("a", "", ""), spec("x", "", ""))).GetCode())
			require.Equal(t, errorpb.Code_OK, e.update(t, "u2", testBundle("c2", false, spec("a", "", "v2"))).GetCode())
			require.EqualValues(t, 2, e.record(t, "c2").GetGeneration())

			// Deleting the bundle removes its own jobs only.
			require.Equal(t, errorpb.Code_OK, e.del(t, "d1", "c2").GetCode())
			eventually(t, "bundle deleted", func() bool { return e.record(t, "c2") == nil })
			jobs := e.jobs(t)
			require.Len(t, jobs, 1)
			require.True(t, proto.Equal(before, jobs["c2.0.x"]), "the plain job survives DeleteBundle")
		})
	}
}

// A job the bundle is removing is the bundle's (its record lists it): an
// update that adds it back is not refused because the job still exists.
func TestGrain_Update_ReaddingAJobBeingRemoved(t *testing.T) {
	e := newEnv(t)
	require.Equal(t, errorpb.Code_OK, e.create(t, "c1", testBundle("b", false, spec("a", "", ""), spec("x", "", ""))).GetCode())
	e.gate.blockDeletes.Store(true)
	require.Equal(t, errorpb.Code_OK, e.update(t, "u1", testBundle("b", false, spec("a", "", ""))).GetCode())
	require.Len(t, e.record(t, "b").GetRemovals(), 1)
	require.Contains(t, e.jobs(t), "b.0.x", "the removal is held before the delete")

	e.gate.blockDeletes.Store(false)
	r := e.update(t, "u2", testBundle("b", false, spec("a", "", ""), spec("x", "", "back")))
	require.Equal(t, errorpb.Code_OK, r.GetCode(), r.GetMessage())
	eventually(t, "converged", func() bool { return !e.record(t, "b").GetPendingWork() })
	require.Equal(t, "back", e.jobs(t)["b.0.x"].GetJob().GetJob().GetDescription())
}
