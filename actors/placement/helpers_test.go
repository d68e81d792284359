package placement

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/norsk-oss/norsk-manager/actors"
	"github.com/norsk-oss/norsk-manager/actors/bundle"
	"github.com/norsk-oss/norsk-manager/actors/job"
	"github.com/norsk-oss/norsk-manager/persistence"
	"github.com/norsk-oss/norsk-manager/proto/commonpb"
	"github.com/norsk-oss/norsk-manager/proto/errorpb"
	"github.com/norsk-oss/norsk-manager/proto/internalpb"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
)

// fixture is a real store, a journal over it, a fake job grain router and
// an engine on them, with a clock the test sets.
type fixture struct {
	t      testing.TB
	store  *persistence.Store
	log    *persistence.LocalLog
	router *fakeRouter
	eng    *Engine
	now    time.Time
}

func newFixture(t testing.TB) *fixture {
	store, log := persistence.TestStore(t)
	f := &fixture{t: t, store: store, log: log, now: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}
	f.router = &fakeRouter{f: f}
	cfg := DefaultConfig()
	cfg.Store, cfg.Router, cfg.Clock = store, f.router, func() time.Time { return f.now }
	e, err := New(cfg)
	require.NoError(t, err)
	f.eng = e
	return f
}

// pass runs one pass and waits for what it sent to be answered.
func (f *fixture) pass() {
	f.t.Helper()
	require.NoError(f.t, f.eng.Pass(context.Background()))
	f.eng.settle()
}

// put writes rec under k at the entity's current sequence, with events.
func (f *fixture) put(k persistence.EntityKey, rec proto.Message, events ...*managerpb.EventStreamEvent) {
	f.t.Helper()
	seq, err := f.store.Seq(k)
	require.NoError(f.t, err)
	b, err := proto.Marshal(rec)
	require.NoError(f.t, err)
	_, err = f.log.Append(context.Background(), k, seq, persistence.Change{Record: b, Events: events})
	require.NoError(f.t, err)
}

func (f *fixture) job(id string) *internalpb.JobRecord {
	f.t.Helper()
	var rec *internalpb.JobRecord
	require.NoError(f.t, f.store.View(func(r *persistence.Reader) error {
		var err error
		rec, _, err = r.Job(id)
		return err
	}))
	return rec
}

func (f *fixture) putJob(rec *internalpb.JobRecord) {
	f.put(persistence.JobKey(rec.GetJob().GetJob().GetJobId().GetJobId()), rec)
}

// autoJob is an ACTIVE auto-placed job requiring capacity units.
func autoJob(id string, capacity float64, tags map[string]string) *internalpb.JobRecord {
	return &internalpb.JobRecord{Job: &managerpb.JobWithHistory{Job: &managerpb.Job{
		JobId: &commonpb.JobId{JobId: id}, State: managerpb.Job_ACTIVE, Tags: tags, CurrentHash: 7,
		AutoPlacement: &managerpb.AutoPlacement{Requirements: &managerpb.JobRequirements{RequiredCapacity: capacity}},
	}}}
}

// putNode writes a STARTED cluster node with capacity units in zone.
func (f *fixture) putNode(id string, capacity float64, zone string, tags map[string]string) {
	f.put(persistence.NodeKey(id), &internalpb.NodeRecord{NodeId: id, Provider: managerpb.NodeProvider_NODE_PROVIDER_CLUSTER,
		State:     managerpb.NodeLifecycle_NODE_LIFECYCLE_STARTED,
		Metadata:  &commonpb.NodeMetadata{NodeId: &commonpb.NodeId{NodeId: id}, Tags: tags},
		Resources: &commonpb.NodeResources{Capacity: capacity, Zone: zone}})
}

// stopNode marks node id STOPPED and ends its instances NODE_STOPPED, as
// the node and job grains do when a node is lost.
func (f *fixture) stopNode(id string) {
	var rec *internalpb.NodeRecord
	require.NoError(f.t, f.store.View(func(r *persistence.Reader) error {
		var err error
		rec, _, err = r.Node(id)
		return err
	}))
	rec.State = managerpb.NodeLifecycle_NODE_LIFECYCLE_STOPPED
	f.put(persistence.NodeKey(id), rec)
	var jobs []*internalpb.JobRecord
	require.NoError(f.t, f.store.View(func(r *persistence.Reader) error {
		return r.Jobs(func(j *internalpb.JobRecord) error { jobs = append(jobs, j); return nil })
	}))
	for _, j := range jobs {
		for _, in := range slices.Clone(j.GetInstances()) {
			if in.GetNodeId() == id {
				f.endInstance(j, in.GetRole(), managerpb.JobHistoryJobStopping_JOB_STOPPED_NODE_STOPPED, "")
			}
		}
	}
}

// endInstance ends job's instance of role as the job grain does: history
// stopping(reason) and stopped, and for JOB_FAILED the last failure.
func (f *fixture) endInstance(rec *internalpb.JobRecord, role string, reason managerpb.JobHistoryJobStopping_Reason, why string) {
	f.t.Helper()
	i := slices.IndexFunc(rec.GetInstances(), func(in *internalpb.Instance) bool { return in.GetRole() == role })
	require.GreaterOrEqual(f.t, i, 0, "no instance of role %s", role)
	in := rec.Instances[i]
	at := timestamppb.New(f.now)
	rec.Job.HistoryEntry = append(rec.Job.HistoryEntry,
		&managerpb.JobHistoryEntry{HistoryEntry: &managerpb.JobHistoryEntry_JobStopping{JobStopping: &managerpb.JobHistoryJobStopping{
			Timestamp: at, Role: role, NodeMetadata: in.GetNodeMetadata(), Reason: reason}}},
		&managerpb.JobHistoryEntry{HistoryEntry: &managerpb.JobHistoryEntry_JobStopped{JobStopped: &managerpb.JobHistoryJobStopped{
			Timestamp: at, Role: role, NodeMetadata: in.GetNodeMetadata()}}})
	if reason == managerpb.JobHistoryJobStopping_JOB_STOPPED_JOB_FAILED {
		rec.LastFailures = slices.DeleteFunc(rec.LastFailures, func(x *managerpb.InstanceFailure) bool { return x.GetRole() == role })
		rec.LastFailures = append(rec.LastFailures, &managerpb.InstanceFailure{Role: role, NodeId: in.GetNodeMetadata().GetNodeId(), Reason: why, At: at})
	}
	rec.Instances = slices.Delete(rec.Instances, i, i+1)
	f.putJob(rec)
}

// fail ends job id's instance of role JOB_FAILED with reason why.
func (f *fixture) fail(id, role, why string) {
	f.t.Helper()
	f.endInstance(f.job(id), role, managerpb.JobHistoryJobStopping_JOB_STOPPED_JOB_FAILED, why)
}

// nodeOf returns the node job id's role runs on, "" if none.
func (f *fixture) nodeOf(id, role string) string {
	for _, in := range f.job(id).GetInstances() {
		if in.GetRole() == role {
			return in.GetNodeId()
		}
	}
	return ""
}

// fakeRouter plays the job grains: a StartJob records the instance (with
// the request id, as the grain does, so a repeat is answered OK without a
// second start); an UpdateJob stores the job (checking the hash). hold,
// when set, makes StartJob wait until it is closed.
type fakeRouter struct {
	f    *fixture
	mu   sync.Mutex
	cmds []*internalpb.JobCommand
	// starts counts StartJobs carried out, by "job/role".
	starts map[string]int
	// stops counts StopJobs carried out, by "job/role".
	stops map[string]int
	hold  chan struct{}
	// refuse, when set, answers every StartJob with it.
	refuse *internalpb.Reply
	// failureWrites and rechecks count the RecordPlacementFailure and
	// RecheckPlacement commands carried out, by "job/role".
	failureWrites, rechecks map[string]int
	// preempts counts the PreemptJob commands carried out, by "job/role".
	preempts map[string]int
	// other, when set, answers the commands to other kinds of grain
	// (provision_test.go: node and mock pool grains).
	other func(ctx context.Context, kind, id string, cmd proto.Message) (*internalpb.Reply, error)
	// provisioning, when set, records started instances PROVISIONING (a
	// test then reports them running with run); else RUNNING at once.
	provisioning bool
	// begins counts the moves begun, by "job/role" (the source role).
	begins map[string]int
}

func (r *fakeRouter) Request(ctx context.Context, kind, id string, cmd proto.Message) (*internalpb.Reply, error) {
	if kind != actors.KindJob {
		if r.other != nil {
			return r.other(ctx, kind, id, cmd)
		}
		return nil, errors.New("fake router: only job grains")
	}
	c := cmd.(*internalpb.JobCommand)
	r.mu.Lock()
	r.cmds = append(r.cmds, c)
	hold, refuse := r.hold, r.refuse
	r.mu.Unlock()
	if hold != nil {
		select {
		case <-hold:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	if refuse != nil {
		return refuse, nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	rec := r.f.job(id)
	if slices.Contains(rec.GetRecentRequests(), c.GetRequestId()) {
		return actors.OK(), nil
	}
	rec.RecentRequests = append(rec.RecentRequests, c.GetRequestId())
	var events []*managerpb.EventStreamEvent
	at := timestamppb.New(r.f.now)
	switch x := c.GetCmd().(type) {
	case *internalpb.JobCommand_RecordPlacementFailure:
		ev, fail := job.ApplyPlacementFailure(rec, x.RecordPlacementFailure, at)
		if fail != nil {
			return fail, nil
		}
		events = append(events, ev)
		r.count(&r.failureWrites, id+"/"+x.RecordPlacementFailure.GetRole())
	case *internalpb.JobCommand_RecheckPlacement:
		ev, fail := job.ApplyRecheck(rec, x.RecheckPlacement, at)
		if fail != nil || ev == nil {
			if fail == nil {
				return actors.OK(), nil
			}
			return fail, nil
		}
		events = append(events, ev)
		r.count(&r.rechecks, id+"/"+x.RecheckPlacement.GetRole())
	case *internalpb.JobCommand_Start:
		role, node := x.Start.GetRole(), x.Start.GetNodeId()
		if slices.ContainsFunc(rec.GetInstances(), func(in *internalpb.Instance) bool { return in.GetRole() == role }) {
			return actors.Fail(errorpb.Code_ALREADY_EXISTS, "job %q role %q is already running", id, role), nil
		}
		if fail := fakeMoveStart(rec, role); fail != nil {
			return fail, nil
		}
		status := internalpb.InstanceStatus_INSTANCE_RUNNING
		if r.provisioning {
			status = internalpb.InstanceStatus_INSTANCE_PROVISIONING
		}
		in := &internalpb.Instance{Role: role, NodeId: node, Status: status, Since: at,
			NodeMetadata: &commonpb.NodeMetadata{NodeId: &commonpb.NodeId{NodeId: node}}, CpuList: x.Start.GetCpuList()}
		if j := rec.GetJob().GetJob(); j.GetCurrentHash() != 0 { // the definition the start sends, as the grain records it
			in.DefinitionHash, in.RunHash = j.GetCurrentHash(), job.RunHash(j)
		}
		rec.Instances = append(rec.Instances, in)
		rec.Job.HistoryEntry = append(rec.Job.HistoryEntry, &managerpb.JobHistoryEntry{HistoryEntry: &managerpb.JobHistoryEntry_JobProvisioned{
			JobProvisioned: &managerpb.JobHistoryJobProvisioned{Timestamp: at, Role: role, NodeMetadata: in.GetNodeMetadata()}}})
		fakeTargetStarted(rec, in, at)
		events = append(events, job.NotePlaced(rec, in, x.Start.GetPlacement(), at)...)
		slices.SortFunc(rec.Instances, func(a, b *internalpb.Instance) int { return strings.Compare(a.GetRole(), b.GetRole()) })
		if r.starts == nil {
			r.starts = map[string]int{}
		}
		r.starts[id+"/"+role]++
	case *internalpb.JobCommand_Stop:
		i := slices.IndexFunc(rec.GetInstances(), func(in *internalpb.Instance) bool { return in.GetRole() == x.Stop.GetRole() })
		if i < 0 || rec.Instances[i].GetNodeId() != x.Stop.GetNodeId() {
			return actors.Fail(errorpb.Code_FAILED_PRECONDITION, "job %q role %q: no instance on node %q", id, x.Stop.GetRole(), x.Stop.GetNodeId()), nil
		}
		if want := x.Stop.GetInstanceId(); want != "" && rec.Instances[i].GetInstanceId() != want {
			return actors.Fail(errorpb.Code_FAILED_PRECONDITION, "job %q role %q: a stale stop of instance %q", id, x.Stop.GetRole(), want), nil
		}
		rec.Instances[i].Status = internalpb.InstanceStatus_INSTANCE_STOPPING
		if r.stops == nil {
			r.stops = map[string]int{}
		}
		r.stops[id+"/"+x.Stop.GetRole()]++
	case *internalpb.JobCommand_Preempt:
		ev, fail := fakePreempt(rec, x.Preempt, at)
		if fail != nil {
			return fail, nil
		}
		events = append(events, updatedEvent(rec), ev)
		r.count(&r.preempts, id+"/"+x.Preempt.GetRole())
	case *internalpb.JobCommand_Update:
		if x.Update.GetJob().GetCurrentHash() != rec.GetJob().GetJob().GetCurrentHash() {
			return actors.Fail(errorpb.Code_FAILED_PRECONDITION, "stale hash"), nil
		}
		rec.Job.Job = x.Update.GetJob()
	default:
		ev, fail := r.fakeMove(rec, c, at)
		if fail != nil {
			rec.RecentRequests = rec.RecentRequests[:len(rec.RecentRequests)-1]
			return fail, nil
		}
		if ev != nil {
			events = append(events, ev)
		}
	}
	r.f.put(persistence.JobKey(id), rec, events...)
	return actors.OK(), nil
}

// count adds one to (*m)[k], making the map on first use. Called with mu held.
func (r *fakeRouter) count(m *map[string]int, k string) {
	if *m == nil {
		*m = map[string]int{}
	}
	(*m)[k]++
}

// writes returns how many failure writes and re-check writes were carried
// out for "job/role".
func (r *fakeRouter) writes(k string) (failures, rechecks int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.failureWrites[k], r.rechecks[k]
}

// events returns the events of kind logged after index from (each as
// the EventStreamEvent), kind being a oneof type such as
// *managerpb.EventStreamEvent_JobPlaced.
func events[T any](f *fixture, from persistence.Index) []T {
	f.t.Helper()
	evs, err := f.store.ReadEvents(from+1, 100000)
	require.NoError(f.t, err)
	var out []T
	for _, e := range evs {
		if x, ok := e.GetEvent().GetEvent().(T); ok {
			out = append(out, x)
		}
	}
	return out
}

// head is the newest event log index.
func (f *fixture) head() persistence.Index {
	_, h := f.store.EventBounds()
	return h
}

func (r *fakeRouter) RequestFuture(string, string, proto.Message, time.Duration) *actor.Future {
	return nil
}
func (r *fakeRouter) Send(string, string, proto.Message) {}

func (r *fakeRouter) startCount(id, role string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.starts[id+"/"+role]
}

func (r *fakeRouter) stopCount(id, role string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.stops[id+"/"+role]
}

// confirmStops ends every STOPPING instance USER_REQUESTED, as the job
// grain does when the worker reports job_stopped.
func (f *fixture) confirmStops() {
	f.t.Helper()
	var jobs []*internalpb.JobRecord
	require.NoError(f.t, f.store.View(func(r *persistence.Reader) error {
		return r.Jobs(func(j *internalpb.JobRecord) error { jobs = append(jobs, j); return nil })
	}))
	for _, j := range jobs {
		for _, in := range slices.Clone(j.GetInstances()) {
			if in.GetStatus() == internalpb.InstanceStatus_INSTANCE_STOPPING {
				f.endInstance(j, in.GetRole(), managerpb.JobHistoryJobStopping_JOB_STOPPED_USER_REQUESTED, "")
			}
		}
	}
}

func (r *fakeRouter) sent() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.cmds)
}

// putBundle writes a live bundle record for b with every derived job
// (dormant as given by name) and the derived job records themselves.
func (f *fixture) putBundle(b *managerpb.Bundle, dormant map[string]bool) {
	rec := &internalpb.BundleRecord{Bundle: b, Generation: 1, Jobs: bundle.Expand(b, 1)}
	for _, js := range rec.Jobs {
		js.Dormant = dormant[js.GetJobName()]
		j := bundle.DerivedJob(b, bundleSpec(b, js.GetJobName()), js.GetReplicaIndex(), js.Dormant)
		j.State = managerpb.Job_ACTIVE
		f.putJob(&internalpb.JobRecord{Job: &managerpb.JobWithHistory{Job: j}})
	}
	f.put(persistence.BundleKey(b.GetBundleId().GetBundleId()), rec)
}

func bundleSpec(b *managerpb.Bundle, name string) *managerpb.BundleJobSpec {
	for _, s := range b.GetJobs() {
		if s.GetJobName() == name {
			return s
		}
	}
	return nil
}

func (f *fixture) putPool(name string, ceiling, windowSecs uint32, tiers ...*managerpb.PoolTier) {
	f.put(persistence.PlacementPoolKey(name), &internalpb.PoolRecord{Pool: &managerpb.Pool{Name: name, Tiers: tiers,
		RestartCeiling: &managerpb.RestartCeiling{MaxFailures: ceiling, WindowSeconds: windowSecs}}})
}

// setScheduling sets node id's cordon/drain state, as the node grain's
// SetScheduling command does.
func (f *fixture) setScheduling(id string, st managerpb.NodeScheduling) {
	var rec *internalpb.NodeRecord
	require.NoError(f.t, f.store.View(func(r *persistence.Reader) error {
		var err error
		rec, _, err = r.Node(id)
		return err
	}))
	rec.Scheduling = &managerpb.NodeSchedulingState{State: st}
	f.put(persistence.NodeKey(id), rec)
}
