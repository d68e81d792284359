package job_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/norsk-oss/norsk-manager/actors"
	"github.com/norsk-oss/norsk-manager/actors/job"
	"github.com/norsk-oss/norsk-manager/persistence"
	"github.com/norsk-oss/norsk-manager/proto/commonpb"
	"github.com/norsk-oss/norsk-manager/proto/errorpb"
	"github.com/norsk-oss/norsk-manager/proto/internalpb"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
	"github.com/norsk-oss/norsk-manager/proto/workerpb"
)

// fakeNodes answers node commands: Provision succeeds for nodes in online,
// StopInstance and DeleteJobData are recorded, Get is answered OK (a
// marker: what was sent to the node before it has been handled).
type fakeNodes struct {
	mu      sync.Mutex
	online  map[string]bool
	stops   []string
	orphans []string // node/job/role of OrphanFound
	deletes []string // node/job
	undated []string // DeleteJobData commands without a deadline
	// provisioned holds the WorkerJob of every Provision received;
	// stopIDs the instance id of every StopInstance, in order.
	provisioned []*workerpb.WorkerJob
	stopIDs     []string
	// gate, when set, holds every Provision answer until it is closed;
	// held counts the Provisions held so far.
	gate atomic.Pointer[chan struct{}]
	held atomic.Int32
}

func (f *fakeNodes) kind() actors.Kind {
	return actors.Kind{Name: actors.KindNode, Props: func(id string) *actor.Props {
		return actor.PropsFromFunc(func(ctx actor.Context) {
			m, ok := ctx.Message().(*internalpb.NodeCommand)
			if !ok {
				return
			}
			if p := m.GetProvision(); p != nil {
				f.mu.Lock()
				f.provisioned = append(f.provisioned, p.GetJob())
				f.mu.Unlock()
			}
			if g := f.gate.Load(); g != nil && m.GetProvision() != nil {
				f.held.Add(1)
				<-*g
			}
			f.mu.Lock()
			defer f.mu.Unlock()
			switch c := m.GetCmd().(type) {
			case *internalpb.NodeCommand_Provision:
				if !f.online[id] {
					ctx.Respond(actors.Fail(errorpb.Code_FAILED_PRECONDITION, "node %q is not online", id))
					return
				}
				ctx.Respond(&internalpb.Reply{Payload: &internalpb.Reply_Node{Node: &internalpb.NodeRecord{NodeId: id,
					Metadata: &commonpb.NodeMetadata{NodeId: &commonpb.NodeId{NodeId: id}}}}})
			case *internalpb.NodeCommand_StopInstance:
				f.stops = append(f.stops, id+"/"+c.StopInstance.GetJobId()+"/"+c.StopInstance.GetRole())
				f.stopIDs = append(f.stopIDs, c.StopInstance.GetInstanceId())
			case *internalpb.NodeCommand_OrphanFound:
				f.orphans = append(f.orphans, id+"/"+c.OrphanFound.GetJobId()+"/"+c.OrphanFound.GetRole())
			case *internalpb.NodeCommand_DeleteJobData:
				f.deletes = append(f.deletes, id+"/"+c.DeleteJobData.GetJobId())
				if m.GetDeadline() == nil {
					f.undated = append(f.undated, id+"/"+c.DeleteJobData.GetJobId())
				}
			case *internalpb.NodeCommand_Get:
				ctx.Respond(actors.OK())
			}
		})
	}}
}

func (f *fakeNodes) stopped() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.stops...)
}

// waitStop waits until the node stop key was requested (the job grain
// sends stops without waiting for an answer).
func (f *fakeNodes) waitStop(t *testing.T, key string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !slices.Contains(f.stopped(), key) {
		if time.Now().After(deadline) {
			t.Fatalf("no stop of %s requested; got %v", key, f.stopped())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// waitStops waits until at least n stops were requested in all.
func (f *fakeNodes) waitStops(t *testing.T, n int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for len(f.stopped()) < n {
		if time.Now().After(deadline) {
			t.Fatalf("want %d stops requested; got %v", n, f.stopped())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// crashyJournal panics inside Append while armed (simulating a bug hit by
// one command); with failNext set, the next Append fails without
// appending (a leader lost mid-append: outcome unknown, nothing kept).
type crashyJournal struct {
	persistence.Journal
	armed    atomic.Bool
	failNext atomic.Bool
	// lostAnswer, when set, makes the next Append commit and then fail as
	// failNext does (the leader committed it; its answer was lost).
	lostAnswer atomic.Bool
}

func (c *crashyJournal) Append(ctx context.Context, k persistence.EntityKey, s persistence.Seq, ch persistence.Change) (persistence.AppendResult, error) {
	if c.armed.CompareAndSwap(true, false) {
		panic("injected crash")
	}
	if c.failNext.CompareAndSwap(true, false) {
		return persistence.AppendResult{}, errors.New("injected: append via leader: outcome unknown")
	}
	if c.lostAnswer.CompareAndSwap(true, false) {
		if _, err := c.Journal.Append(ctx, k, s, ch); err != nil {
			return persistence.AppendResult{}, err
		}
		return persistence.AppendResult{}, errors.New("injected: append via leader: outcome unknown (committed)")
	}
	return c.Journal.Append(ctx, k, s, ch)
}

type env struct {
	host    *actors.Host
	nodes   *fakeNodes
	journal *crashyJournal
	store   *persistence.Store
	now     atomic.Pointer[time.Time]
}

func newEnv(t *testing.T) *env { return newEnvLogging(t, nil) }

// newEnvLogging is newEnv with the job grains logging to logger (nil:
// nowhere).
func newEnvLogging(t *testing.T, logger *slog.Logger) *env {
	store, log := persistence.TestStore(t)
	e := &env{nodes: &fakeNodes{online: map[string]bool{"n1": true, "n2": true}}, journal: &crashyJournal{Journal: log}, store: store}
	t0 := time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC)
	e.now.Store(&t0)
	system := actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return slog.New(slog.DiscardHandler) }))
	router := &late{}
	host, err := actors.NewHost(system, actors.HostConfig{RequestTimeout: 5 * time.Second},
		job.Kind(job.Config{Journal: e.journal, Router: router, Store: store, Clock: func() time.Time { return *e.now.Load() }, Logger: logger}),
		e.nodes.kind())
	require.NoError(t, err)
	router.Router = host
	e.host = host
	t.Cleanup(func() { host.Stop(); system.Shutdown() })
	return e
}

type late struct{ actors.Router }

func (e *env) advance(d time.Duration) {
	t := e.now.Load().Add(d)
	e.now.Store(&t)
}

func (e *env) do(t *testing.T, id string, cmd *internalpb.JobCommand) *internalpb.Reply {
	t.Helper()
	cmd.JobId = id
	r, err := e.host.Request(context.Background(), actors.KindJob, id, cmd)
	require.NoError(t, err)
	return r
}

func (e *env) record(t *testing.T, id string) *internalpb.JobRecord {
	t.Helper()
	r := e.do(t, id, &internalpb.JobCommand{Cmd: &internalpb.JobCommand_Get{Get: &internalpb.GetJob{}}})
	require.Equal(t, errorpb.Code_OK, r.GetCode(), r.GetMessage())
	return r.GetJob()
}

func create(j *managerpb.Job) *internalpb.JobCommand {
	return &internalpb.JobCommand{Cmd: &internalpb.JobCommand_Create{Create: &internalpb.CreateJob{Job: j}}}
}

// runnable gives j a service, as a job needs one to be started
// (checkStartable), and returns it.
func runnable(j *managerpb.Job) *managerpb.Job {
	j.Services = append(j.Services, &commonpb.Service{Name: "svc", Command: "sleep 60"})
	return j
}

func start(role, node string) *internalpb.JobCommand {
	return &internalpb.JobCommand{Cmd: &internalpb.JobCommand_Start{Start: &internalpb.StartJob{Role: role, NodeId: node}}}
}

func report(kind internalpb.InstanceReport_Kind, role, node string) *internalpb.JobCommand {
	return &internalpb.JobCommand{Cmd: &internalpb.JobCommand_InstanceReport{InstanceReport: &internalpb.InstanceReport{Kind: kind, Role: role, NodeId: node}}}
}

func history(rec *internalpb.JobRecord) []string {
	var out []string
	for _, h := range rec.GetJob().GetHistoryEntry() {
		switch h.GetHistoryEntry().(type) {
		case *managerpb.JobHistoryEntry_JobCreated:
			out = append(out, "created")
		case *managerpb.JobHistoryEntry_JobUpdated:
			out = append(out, "updated")
		case *managerpb.JobHistoryEntry_JobProvisioned:
			out = append(out, "provisioned")
		case *managerpb.JobHistoryEntry_JobRunning:
			out = append(out, "running")
		case *managerpb.JobHistoryEntry_JobStopping:
			out = append(out, "stopping:"+h.GetJobStopping().GetReason().String())
		case *managerpb.JobHistoryEntry_JobStopped:
			out = append(out, "stopped")
		case *managerpb.JobHistoryEntry_JobCompleted:
			out = append(out, "completed")
		}
	}
	return out
}

func TestJob_StateRule(t *testing.T) {
	e := newEnv(t)
	now := *e.now.Load()
	cases := []struct {
		name  string
		start *timestamppb.Timestamp
		want  managerpb.Job_JobState
	}{
		{"no start time is active at once", nil, managerpb.Job_ACTIVE},
		{"start in the past", timestamppb.New(now.Add(-time.Minute)), managerpb.Job_ACTIVE},
		{"start exactly now", timestamppb.New(now), managerpb.Job_ACTIVE},
		{"start in the future", timestamppb.New(now.Add(time.Hour)), managerpb.Job_PRE},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			id := string(rune('a' + i))
			r := e.do(t, id, create(&managerpb.Job{JobId: &commonpb.JobId{JobId: id}, StartDateTime: tc.start, State: managerpb.Job_POST}))
			require.Equal(t, errorpb.Code_OK, r.GetCode(), r.GetMessage())
			require.Equal(t, tc.want, e.record(t, id).GetJob().GetJob().GetState(), "the state a client sends is ignored")
		})
	}
	// PRE → ACTIVE once the start passes (the activator's command).
	id := "d"
	activate := &internalpb.JobCommand{Cmd: &internalpb.JobCommand_Activate{Activate: &internalpb.ActivateJob{}}}
	e.do(t, id, activate)
	require.Equal(t, managerpb.Job_PRE, e.record(t, id).GetJob().GetJob().GetState(), "too early")
	e.advance(time.Hour)
	e.do(t, id, activate)
	require.Equal(t, managerpb.Job_ACTIVE, e.record(t, id).GetJob().GetJob().GetState())
	// ACTIVE never returns to PRE.
	rec := e.record(t, id)
	j := proto.Clone(rec.GetJob().GetJob()).(*managerpb.Job)
	j.StartDateTime = timestamppb.New(e.now.Load().Add(24 * time.Hour))
	r := e.do(t, id, &internalpb.JobCommand{Cmd: &internalpb.JobCommand_Update{Update: &internalpb.UpdateJob{Job: j}}})
	require.Equal(t, errorpb.Code_OK, r.GetCode(), r.GetMessage())
	require.Equal(t, managerpb.Job_ACTIVE, e.record(t, id).GetJob().GetJob().GetState())
}

func TestJob_FirstStartActivatesPreJob(t *testing.T) {
	e := newEnv(t)
	future := timestamppb.New(e.now.Load().Add(time.Hour))
	e.do(t, "j", create(runnable(&managerpb.Job{JobId: &commonpb.JobId{JobId: "j"}, StartDateTime: future})))
	require.Equal(t, errorpb.Code_OK, e.do(t, "j", start("primary", "n1")).GetCode())
	require.Equal(t, managerpb.Job_PRE, e.record(t, "j").GetJob().GetJob().GetState(), "provisioned is not started")
	e.do(t, "j", report(internalpb.InstanceReport_STARTED, "primary", "n1"))
	rec := e.record(t, "j")
	require.Equal(t, managerpb.Job_ACTIVE, rec.GetJob().GetJob().GetState())
	require.Equal(t, []string{"created", "provisioned", "running"}, history(rec))
	require.Equal(t, internalpb.InstanceStatus_INSTANCE_RUNNING, rec.GetInstances()[0].GetStatus())
}

func TestJob_InstanceReconciliation(t *testing.T) {
	e := newEnv(t)
	e.do(t, "j", create(runnable(&managerpb.Job{JobId: &commonpb.JobId{JobId: "j"}})))
	// Start on an offline node: refused, nothing recorded.
	e.nodes.mu.Lock()
	e.nodes.online["off"] = false
	e.nodes.mu.Unlock()
	r := e.do(t, "j", start("primary", "off"))
	require.Equal(t, errorpb.Code_FAILED_PRECONDITION, r.GetCode())
	require.Empty(t, e.record(t, "j").GetInstances())

	// Adoption: the worker reports an instance the record does not have.
	e.do(t, "j", report(internalpb.InstanceReport_STARTED, "primary", "n1"))
	require.Equal(t, []string{"created", "provisioned", "running"}, history(e.record(t, "j")))
	// A second start of the same role is refused.
	require.Equal(t, errorpb.Code_ALREADY_EXISTS, e.do(t, "j", start("primary", "n2")).GetCode())
	// A duplicate on another node is stopped there; the record keeps n1.
	e.do(t, "j", report(internalpb.InstanceReport_STARTED, "primary", "n2"))
	e.nodes.waitStop(t, "n2/j/primary")
	require.Equal(t, "n1", e.record(t, "j").GetInstances()[0].GetNodeId())
	// Deleting a job with instances is refused and names them.
	r = e.do(t, "j", &internalpb.JobCommand{Cmd: &internalpb.JobCommand_Delete{Delete: &internalpb.DeleteJob{}}})
	require.Equal(t, errorpb.Code_FAILED_PRECONDITION, r.GetCode())
	require.Contains(t, r.GetMessage(), `role "primary" on node "n1"`)
	// Missing from the worker's hello → ended with NODE_STOPPED.
	e.do(t, "j", report(internalpb.InstanceReport_MISSING, "primary", "n1"))
	rec := e.record(t, "j")
	require.Empty(t, rec.GetInstances())
	require.Equal(t, []string{"created", "provisioned", "running", "stopping:JOB_STOPPED_NODE_STOPPED", "stopped"}, history(rec))
	// A failure report ends the instance with JOB_FAILED.
	require.Equal(t, errorpb.Code_OK, e.do(t, "j", start("backup", "n2")).GetCode())
	failed := report(internalpb.InstanceReport_FAILED, "backup", "n2")
	failed.GetInstanceReport().Reason = "service \"web\" exited with code 1"
	e.do(t, "j", failed)
	h := history(e.record(t, "j"))
	require.Equal(t, []string{"stopping:JOB_STOPPED_JOB_FAILED", "stopped"}, h[len(h)-2:])
	_, head := e.store.EventBounds()
	evs, err := e.store.ReadEvents(head, 1)
	require.NoError(t, err)
	require.Equal(t, `failed: service "web" exited with code 1`, evs[0].GetEvent().GetJobInfo().GetContainerEvent().GetText(),
		"the worker's reason reaches the event stream")
	// Node gone ends every instance on it.
	require.Equal(t, errorpb.Code_OK, e.do(t, "j", start("a", "n2")).GetCode())
	require.Equal(t, errorpb.Code_OK, e.do(t, "j", start("b", "n2")).GetCode())
	e.do(t, "j", &internalpb.JobCommand{Cmd: &internalpb.JobCommand_NodeGone{NodeGone: &internalpb.NodeGone{NodeId: "n2",
		Reason: managerpb.JobHistoryJobStopping_JOB_STOPPED_NODE_TERMINATED}}})
	require.Empty(t, e.record(t, "j").GetInstances())
	// A job the store never knew reported running is an orphan: reported
	// to its node grain (which keeps it for the grace), not stopped.
	e.do(t, "ghost", report(internalpb.InstanceReport_STARTED, "primary", "n1"))
	deadline := time.Now().Add(5 * time.Second)
	for {
		e.nodes.mu.Lock()
		found := slices.Contains(e.nodes.orphans, "n1/ghost/primary")
		e.nodes.mu.Unlock()
		if found {
			break
		}
		require.False(t, time.Now().After(deadline), "no orphan reported for n1/ghost/primary")
		time.Sleep(5 * time.Millisecond)
	}
	require.NotContains(t, e.nodes.stopped(), "n1/ghost/primary")
	// A deleted job (its tombstone says so) reported running is stopped.
	e.do(t, "gone", create(&managerpb.Job{JobId: &commonpb.JobId{JobId: "gone"}}))
	e.do(t, "gone", &internalpb.JobCommand{Cmd: &internalpb.JobCommand_Delete{Delete: &internalpb.DeleteJob{}}})
	e.do(t, "gone", report(internalpb.InstanceReport_STARTED, "primary", "n1"))
	e.nodes.waitStop(t, "n1/gone/primary")
}

// TestJob_FailureBeforeProvisionAnswer: a worker that fails (or finishes)
// a job before the node grain's answer to the provision reaches the job
// grain (a Docker start refused at once) is recorded as provisioned,
// stopping with the reason and stopped — not left "provisioned".
func TestJob_FailureBeforeProvisionAnswer(t *testing.T) {
	for _, kind := range []internalpb.InstanceReport_Kind{internalpb.InstanceReport_FAILED, internalpb.InstanceReport_STOPPED} {
		t.Run(kind.String(), func(t *testing.T) {
			e := newEnv(t)
			e.do(t, "j", create(runnable(&managerpb.Job{JobId: &commonpb.JobId{JobId: "j"}})))
			gate := make(chan struct{})
			e.nodes.gate.Store(&gate)
			started := make(chan *internalpb.Reply, 1)
			go func() { started <- e.do(t, "j", start("primary", "n1")) }()
			// Report only once the start is pending (the node holds its
			// Provision); before that it would be a report of an unknown role.
			require.Eventually(t, func() bool { return e.nodes.held.Load() == 1 }, 5*time.Second, time.Millisecond)
			rep := report(kind, "primary", "n1")
			rep.GetInstanceReport().Reason = "pull image x: refused"
			require.Equal(t, errorpb.Code_OK, e.do(t, "j", rep).GetCode())
			close(gate)
			require.Equal(t, errorpb.Code_OK, (<-started).GetCode())
			rec := e.record(t, "j")
			// A job_stopped the manager did not ask for: the job ended by
			// itself, a failure as much as a job_failed.
			require.Equal(t, []string{"created", "provisioned", "stopping:JOB_STOPPED_JOB_FAILED", "stopped"}, history(rec))
			require.Empty(t, rec.GetInstances())
			// The role can be started again.
			e.nodes.gate.Store(nil)
			require.Equal(t, errorpb.Code_OK, e.do(t, "j", start("primary", "n1")).GetCode())
			require.Len(t, e.record(t, "j").GetInstances(), 1)
		})
	}
}

// TestJob_DeleteTellsNodesThatMayHaveSessions: once a deletion commits,
// the grain sends DeleteJobData (one-way, with a deadline) to every node
// that may hold a worker session (a dial-back address, not stopped on
// purpose), whether the job ran there or not; a refused deletion sends
// nothing.
func TestJob_DeleteTellsNodesThatMayHaveSessions(t *testing.T) {
	e := newEnv(t)
	putNode := func(rec *internalpb.NodeRecord) {
		b, err := proto.Marshal(rec)
		require.NoError(t, err)
		_, err = e.journal.Append(context.Background(), persistence.NodeKey(rec.GetNodeId()), 0, persistence.Change{Record: b, At: time.Now()})
		require.NoError(t, err)
	}
	userStop, lost := managerpb.NodeStopping_USER_REQUESTED, managerpb.NodeStopping_HEALTH_PING_TIME_EXCEEDED
	putNode(&internalpb.NodeRecord{NodeId: "n1", Address: "10.0.0.1", Port: 7001, State: managerpb.NodeLifecycle_NODE_LIFECYCLE_STARTED})
	putNode(&internalpb.NodeRecord{NodeId: "n2", Address: "10.0.0.2", Port: 7001, State: managerpb.NodeLifecycle_NODE_LIFECYCLE_STOPPED, StopReason: &lost})
	putNode(&internalpb.NodeRecord{NodeId: "n3", Address: "10.0.0.3", Port: 7001, State: managerpb.NodeLifecycle_NODE_LIFECYCLE_STOPPED, StopReason: &userStop})
	putNode(&internalpb.NodeRecord{NodeId: "n4", State: managerpb.NodeLifecycle_NODE_LIFECYCLE_REGISTERED})
	del := &internalpb.JobCommand{Cmd: &internalpb.JobCommand_Delete{Delete: &internalpb.DeleteJob{}}}
	// handled waits until every node grain handled what was sent to it
	// before (a Get behind it in its mailbox) and returns the deletes.
	handled := func() []string {
		for _, n := range []string{"n1", "n2", "n3", "n4"} {
			r, err := e.host.Request(context.Background(), actors.KindNode, n, &internalpb.NodeCommand{NodeId: n, Cmd: &internalpb.NodeCommand_Get{Get: &internalpb.GetNode{}}})
			require.NoError(t, err)
			require.Equal(t, errorpb.Code_OK, r.GetCode())
		}
		e.nodes.mu.Lock()
		defer e.nodes.mu.Unlock()
		return slices.Clone(e.nodes.deletes)
	}

	e.do(t, "j", create(runnable(&managerpb.Job{JobId: &commonpb.JobId{JobId: "j"}})))
	require.Equal(t, errorpb.Code_OK, e.do(t, "j", start("primary", "n1")).GetCode())
	require.Equal(t, errorpb.Code_FAILED_PRECONDITION, e.do(t, "j", proto.Clone(del).(*internalpb.JobCommand)).GetCode())
	require.Equal(t, errorpb.Code_NOT_FOUND, e.do(t, "nope", proto.Clone(del).(*internalpb.JobCommand)).GetCode())
	require.Empty(t, handled(), "a refused deletion tells no worker")

	e.do(t, "j", report(internalpb.InstanceReport_STOPPED, "primary", "n1"))
	require.Equal(t, errorpb.Code_OK, e.do(t, "j", proto.Clone(del).(*internalpb.JobCommand)).GetCode())
	deletes := handled()
	slices.Sort(deletes)
	require.Equal(t, []string{"n1/j", "n2/j"}, deletes)
	e.nodes.mu.Lock()
	require.Empty(t, e.nodes.undated, "DeleteJobData carries a deadline")
	e.nodes.mu.Unlock()
}

func TestJob_CompleteStopsInstancesAndIsFinal(t *testing.T) {
	e := newEnv(t)
	e.do(t, "j", create(runnable(&managerpb.Job{JobId: &commonpb.JobId{JobId: "j"}})))
	require.Equal(t, errorpb.Code_OK, e.do(t, "j", start("primary", "n1")).GetCode())
	complete := &internalpb.JobCommand{Cmd: &internalpb.JobCommand_Complete{Complete: &internalpb.CompleteJob{}}}
	require.Equal(t, errorpb.Code_OK, e.do(t, "j", complete).GetCode())
	rec := e.record(t, "j")
	require.Equal(t, managerpb.Job_POST, rec.GetJob().GetJob().GetState())
	require.Equal(t, []string{"created", "provisioned", "stopping:JOB_STOPPED_USER_REQUESTED", "completed"}, history(rec))
	e.nodes.waitStop(t, "n1/j/primary")
	require.Equal(t, errorpb.Code_FAILED_PRECONDITION, e.do(t, "j", start("backup", "n1")).GetCode())
	// The worker confirms; a completed job's late start report is stopped.
	e.do(t, "j", report(internalpb.InstanceReport_STOPPED, "primary", "n1"))
	require.Empty(t, e.record(t, "j").GetInstances())
	require.Equal(t, errorpb.Code_OK, e.do(t, "j", complete).GetCode(), "idempotent")
}

func TestJob_RequestIDsAreIdempotent(t *testing.T) {
	e := newEnv(t)
	c := create(&managerpb.Job{JobId: &commonpb.JobId{JobId: "j"}})
	c.RequestId = "req-1"
	r1 := e.do(t, "j", c)
	r2 := e.do(t, "j", proto.Clone(c).(*internalpb.JobCommand))
	require.Equal(t, errorpb.Code_OK, r2.GetCode(), "a retried create is answered, not refused")
	require.Equal(t, r1.GetJobHash().GetHash(), r2.GetJobHash().GetHash())
	require.Len(t, history(e.record(t, "j")), 1)
}

func TestJob_CrashedGrainRecoversItsState(t *testing.T) {
	e := newEnv(t)
	e.do(t, "j", create(&managerpb.Job{JobId: &commonpb.JobId{JobId: "j"}, Description: "v1"}))
	rec := e.record(t, "j")
	e.journal.armed.Store(true)
	j := proto.Clone(rec.GetJob().GetJob()).(*managerpb.Job)
	j.Description = "v2"
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	_, err := e.host.Request(ctx, actors.KindJob, "j", &internalpb.JobCommand{JobId: "j", Cmd: &internalpb.JobCommand_Update{Update: &internalpb.UpdateJob{Job: j}}})
	require.Error(t, err, "the command that crashed the grain gets no answer")
	// The supervisor restarted the grain; it reloaded the record.
	rec2 := e.record(t, "j")
	require.Equal(t, "v1", rec2.GetJob().GetJob().GetDescription())
	r := e.do(t, "j", &internalpb.JobCommand{Cmd: &internalpb.JobCommand_Update{Update: &internalpb.UpdateJob{Job: j}}})
	require.Equal(t, errorpb.Code_OK, r.GetCode(), r.GetMessage())
	require.Equal(t, "v2", e.record(t, "j").GetJob().GetJob().GetDescription())
}

// TestJob_LargeJobHistoryStaysWithinLimits: repeated updates of a large job
// must keep working: the history is trimmed instead of the record growing
// past the store's limit.
func TestJob_LargeJobHistoryStaysWithinLimits(t *testing.T) {
	e := newEnv(t)
	cfg := strings.Repeat("c", 700<<10)
	e.do(t, "j", create(&managerpb.Job{JobId: &commonpb.JobId{JobId: "j"}, ManagerConfiguration: cfg}))
	for i := range 6 {
		rec := e.record(t, "j")
		j := proto.Clone(rec.GetJob().GetJob()).(*managerpb.Job)
		j.Description = fmt.Sprintf("v%d", i)
		r := e.do(t, "j", &internalpb.JobCommand{Cmd: &internalpb.JobCommand_Update{Update: &internalpb.UpdateJob{Job: j}}})
		require.Equal(t, errorpb.Code_OK, r.GetCode(), "update %d: %s", i, r.GetMessage())
	}
	rec := e.record(t, "j")
	require.LessOrEqual(t, proto.Size(rec), 3<<19)
	require.Equal(t, "v5", rec.GetJob().GetJob().GetDescription())
	h := rec.GetJob().GetHistoryEntry()
	require.NotNil(t, h[len(h)-1].GetJobUpdated(), "the newest entry is kept")
}

// TestJob_TwoActivationsCannotBothCommit forces what a topology change can
// cause in a cluster: two activations of the same job grain (here on two
// actor systems over one journal) that both loaded the same record. Each
// answers from the newest committed record (actors.Current), and every
// update they race must either be acknowledged and kept, or refused and
// leave nothing behind: never two writers on one sequence.
func TestJob_TwoActivationsCannotBothCommit(t *testing.T) {
	_, log := persistence.TestStore(t)
	hosts := make([]*actors.Host, 2)
	for i := range hosts {
		system := actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return slog.New(slog.DiscardHandler) }))
		router := &late{}
		nodes := &fakeNodes{online: map[string]bool{}}
		h, err := actors.NewHost(system, actors.HostConfig{RequestTimeout: 5 * time.Second},
			job.Kind(job.Config{Journal: log, Router: router}), nodes.kind())
		require.NoError(t, err)
		router.Router = h
		hosts[i] = h
		t.Cleanup(func() { h.Stop(); system.Shutdown() })
	}
	do := func(h *actors.Host, cmd *internalpb.JobCommand) *internalpb.Reply {
		cmd.JobId = "j"
		r, err := h.Request(context.Background(), actors.KindJob, "j", cmd)
		require.NoError(t, err)
		return r
	}
	get := &internalpb.JobCommand{Cmd: &internalpb.JobCommand_Get{Get: &internalpb.GetJob{}}}
	require.Equal(t, errorpb.Code_OK, do(hosts[0], create(&managerpb.Job{JobId: &commonpb.JobId{JobId: "j"}})).GetCode())
	// Both activations are live and have loaded the record at the same seq.
	for _, h := range hosts {
		require.Equal(t, errorpb.Code_OK, do(h, proto.Clone(get).(*internalpb.JobCommand)).GetCode())
	}
	// update sends an update carrying the current_hash that h's activation
	// believes in, as a client that just read the job through it would:
	// the grain's own precondition passes, only the journal can refuse.
	update := func(h *actors.Host, desc string) *internalpb.Reply {
		cur := do(h, proto.Clone(get).(*internalpb.JobCommand)).GetJob().GetJob().GetJob()
		return do(h, &internalpb.JobCommand{Cmd: &internalpb.JobCommand_Update{Update: &internalpb.UpdateJob{
			Job: &managerpb.Job{JobId: &commonpb.JobId{JobId: "j"}, Description: desc, CurrentHash: cur.GetCurrentHash()}}}})
	}

	// The second activation answers from the newest record, although it
	// loaded the job before the first one committed: a read returns the
	// winner's version, and an update with the hash it held refuses
	// naming the current hash (not the one it loaded).
	before := do(hosts[1], proto.Clone(get).(*internalpb.JobCommand)).GetJob().GetJob().GetJob().GetCurrentHash()
	require.Equal(t, errorpb.Code_OK, update(hosts[0], "a0").GetCode())
	cur := do(hosts[1], proto.Clone(get).(*internalpb.JobCommand)).GetJob().GetJob().GetJob()
	require.Equal(t, "a0", cur.GetDescription(), "a stale activation must reload before it answers")
	r := do(hosts[1], &internalpb.JobCommand{Cmd: &internalpb.JobCommand_Update{Update: &internalpb.UpdateJob{
		Job: &managerpb.Job{JobId: &commonpb.JobId{JobId: "j"}, Description: "b0", CurrentHash: before}}}})
	require.Equal(t, errorpb.Code_FAILED_PRECONDITION, r.GetCode(), r.GetMessage())
	require.Contains(t, r.GetMessage(), fmt.Sprintf("current hash is %d", cur.GetCurrentHash()), "the refusal names the newest hash")
	// An update with the newest hash through the stale activation, with
	// no read through it first, is carried out: its in-memory refusal is
	// checked and decided again on the newest record.
	newest := hashOf(t, update(hosts[0], "a1"))
	r = do(hosts[1], &internalpb.JobCommand{Cmd: &internalpb.JobCommand_Update{Update: &internalpb.UpdateJob{
		Job: &managerpb.Job{JobId: &commonpb.JobId{JobId: "j"}, Description: "b1", CurrentHash: newest}}}})
	require.Equal(t, errorpb.Code_OK, r.GetCode(), r.GetMessage())
	require.Equal(t, "b1", do(hosts[0], proto.Clone(get).(*internalpb.JobCommand)).GetJob().GetJob().GetJob().GetDescription())

	// Then both race: every acknowledged update is in the history exactly
	// once, every refused one is absent.
	var mu sync.Mutex
	acked := map[string]bool{}
	refused := map[string]bool{}
	var wg sync.WaitGroup
	for i, h := range hosts {
		wg.Go(func() {
			for n := range 50 {
				desc := fmt.Sprintf("h%d-%d", i, n)
				r := update(h, desc)
				mu.Lock()
				switch r.GetCode() {
				case errorpb.Code_OK:
					acked[desc] = true
				case errorpb.Code_ABORTED, errorpb.Code_FAILED_PRECONDITION:
					// ABORTED: the journal refused a stale activation;
					// FAILED_PRECONDITION: the other one committed between
					// this read and this update.
					refused[desc] = true
				default:
					t.Errorf("update %s: unexpected %s: %s", desc, r.GetCode(), r.GetMessage())
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	// Read what was committed from the journal itself: an activation that
	// lost the last race still holds its older view in memory.
	rec := &internalpb.JobRecord{}
	found, _, err := actors.LoadRecord(log, persistence.JobKey("j"), rec)
	require.NoError(t, err)
	require.True(t, found)
	// Each update entry keeps the job as it was before; with the current
	// job they name every version that was committed.
	seen := map[string]int{rec.GetJob().GetJob().GetDescription(): 1}
	for _, h := range rec.GetJob().GetHistoryEntry() {
		if u := h.GetJobUpdated(); u != nil {
			seen[u.GetPreviousJob().GetDescription()]++
		}
	}
	for desc := range acked {
		require.Equal(t, 1, seen[desc], "acknowledged update %s must be committed exactly once", desc)
	}
	for desc := range refused {
		require.Zero(t, seen[desc], "refused update %s must leave nothing behind", desc)
	}
	require.Len(t, seen, len(acked)+4, "only the created version, a0, a1, b1 and the acknowledged updates were committed")
	t.Logf("%d acknowledged, %d refused", len(acked), len(refused))
}

// hashOf returns the hash a successful CreateJob or UpdateJob reply carries.
func hashOf(t *testing.T, r *internalpb.Reply) int64 {
	t.Helper()
	require.Equal(t, errorpb.Code_OK, r.GetCode(), r.GetMessage())
	return r.GetJobHash().GetHash()
}

// TestJob_LastFailureRecorded: a worker's failure report leaves the reason
// and time per role in the record (JobById's last_failures), replacing
// the role's earlier one; a stop does not.
func TestJob_LastFailureRecorded(t *testing.T) {
	e := newEnv(t)
	e.do(t, "j", create(&managerpb.Job{JobId: &commonpb.JobId{JobId: "j"}, Services: []*commonpb.Service{{Name: "web", Command: "true"}}}))
	fail := func(role, node, reason string) {
		require.Equal(t, errorpb.Code_OK, e.do(t, "j", start(role, node)).GetCode())
		r := report(internalpb.InstanceReport_FAILED, role, node)
		r.GetInstanceReport().Reason = reason
		e.do(t, "j", r)
	}
	fail("primary", "n1", "web: exited with status 1: listen tcp 127.0.0.1:80: bind: address already in use")
	fail("backup", "n2", "")
	fail("primary", "n2", "pull image x: not found")
	// A stop the manager asked for is not a failure.
	require.Equal(t, errorpb.Code_OK, e.do(t, "j", start("other", "n1")).GetCode())
	require.Equal(t, errorpb.Code_OK, e.do(t, "j", &internalpb.JobCommand{Cmd: &internalpb.JobCommand_Stop{
		Stop: &internalpb.StopJob{Role: "other", NodeId: "n1"}}}).GetCode())
	e.do(t, "j", report(internalpb.InstanceReport_STOPPED, "other", "n1"))
	require.Empty(t, e.record(t, "j").GetInstances())

	got := e.record(t, "j").GetLastFailures()
	require.Len(t, got, 2, "one per role that failed, sorted by role")
	require.Equal(t, "backup", got[0].GetRole())
	require.Equal(t, "failed (the worker gave no reason)", got[0].GetReason())
	require.Equal(t, "primary", got[1].GetRole())
	require.Equal(t, "n2", got[1].GetNodeId().GetNodeId())
	require.Equal(t, "pull image x: not found", got[1].GetReason())
	require.NotNil(t, got[1].GetAt())
}

// TestJob_RetriesAcrossADeletion: cluster requests are at-least-once, so
// a command can arrive again after the job was deleted (and even
// re-created). A retried delete is answered as done and never deletes the
// job's next incarnation; a retried create of a deleted job is answered as
// the first was, without creating it again.
func TestJob_RetriesAcrossADeletion(t *testing.T) {
	e := newEnv(t)
	withID := func(cmd *internalpb.JobCommand, id string) *internalpb.JobCommand { cmd.RequestId = id; return cmd }
	del := func() *internalpb.JobCommand {
		return &internalpb.JobCommand{Cmd: &internalpb.JobCommand_Delete{Delete: &internalpb.DeleteJob{}}}
	}
	first := &managerpb.Job{JobId: &commonpb.JobId{JobId: "j"}, Description: "first"}
	created := e.do(t, "j", withID(create(first), "create-1"))
	require.Equal(t, errorpb.Code_OK, e.do(t, "j", withID(del(), "delete-1")).GetCode())

	// The delete again, with the job gone: done, not NOT_FOUND.
	require.Equal(t, errorpb.Code_OK, e.do(t, "j", withID(del(), "delete-1")).GetCode())
	// The first create again, with the job deleted: answered as it was,
	// and the job stays deleted.
	r := e.do(t, "j", withID(create(first), "create-1"))
	require.Equal(t, errorpb.Code_OK, r.GetCode(), r.GetMessage())
	require.Equal(t, created.GetJobHash().GetHash(), r.GetJobHash().GetHash())
	require.Equal(t, errorpb.Code_NOT_FOUND, e.do(t, "j", &internalpb.JobCommand{Cmd: &internalpb.JobCommand_Get{Get: &internalpb.GetJob{}}}).GetCode())

	// Re-created: the old delete retried must not delete the new job.
	second := &managerpb.Job{JobId: &commonpb.JobId{JobId: "j"}, Description: "second"}
	require.Equal(t, errorpb.Code_OK, e.do(t, "j", withID(create(second), "create-2")).GetCode())
	require.Equal(t, errorpb.Code_OK, e.do(t, "j", withID(del(), "delete-1")).GetCode())
	require.Equal(t, "second", e.record(t, "j").GetJob().GetJob().GetDescription(), "a retried delete of the old job deleted the new one")
}

// TestJob_StartNeedsSomethingToRun: a job with no services is refused at
// StartJob with FAILED_PRECONDITION saying why, and nothing is recorded
// (issue 10 §6: it was reported running with nothing running); a service,
// or norsk_service_parameters (the Norsk Media container of a worker with
// media images), or a product template (its stack), is something to run.
func TestJob_StartNeedsSomethingToRun(t *testing.T) {
	cases := []struct {
		name string
		job  *managerpb.Job
		want errorpb.Code
	}{
		{"no services", &managerpb.Job{}, errorpb.Code_FAILED_PRECONDITION},
		{"a service", runnable(&managerpb.Job{}), errorpb.Code_OK},
		{"norsk media only", &managerpb.Job{NorskServiceParameters: &commonpb.ServiceParameters{}}, errorpb.Code_OK},
		{"a product template", &managerpb.Job{ProductTemplate: &commonpb.ProductTemplateRef{Name: "hello", Version: "1.0"}}, errorpb.Code_OK},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			tc.job.JobId = &commonpb.JobId{JobId: "j"}
			require.Equal(t, errorpb.Code_OK, e.do(t, "j", create(tc.job)).GetCode())
			r := e.do(t, "j", start("primary", "n1"))
			require.Equal(t, tc.want, r.GetCode(), r.GetMessage())
			if tc.want != errorpb.Code_OK {
				require.Contains(t, r.GetMessage(), `job "j" has no services, so there is nothing to run`)
				require.Empty(t, e.record(t, "j").GetInstances())
				require.Equal(t, []string{"created"}, history(e.record(t, "j")))
			}
		})
	}
}

// TestJob_ReportFromSupersededSessionIgnored: a worker report that comes
// from a session older than the one the node record names (it reached a
// node activation that had lost the worker) changes nothing; one from the
// current session is acted on.
func TestJob_ReportFromSupersededSessionIgnored(t *testing.T) {
	e := newEnv(t)
	rec, err := proto.Marshal(&internalpb.NodeRecord{NodeId: "n1", SessionEpoch: 5})
	require.NoError(t, err)
	_, err = e.journal.Append(context.Background(), persistence.NodeKey("n1"), 0, persistence.Change{Record: rec, At: time.Now()})
	require.NoError(t, err)
	e.do(t, "j", create(&managerpb.Job{JobId: &commonpb.JobId{JobId: "j"}}))

	stale := report(internalpb.InstanceReport_STARTED, "primary", "n1")
	stale.GetInstanceReport().SessionEpoch = 4
	require.Equal(t, errorpb.Code_OK, e.do(t, "j", stale).GetCode())
	require.Empty(t, e.record(t, "j").GetInstances(), "a report of a superseded session must not adopt an instance")

	current := report(internalpb.InstanceReport_STARTED, "primary", "n1")
	current.GetInstanceReport().SessionEpoch = 5
	e.do(t, "j", current)
	require.Len(t, e.record(t, "j").GetInstances(), 1, "a report of the current session is adopted")

	stale = report(internalpb.InstanceReport_STOPPED, "primary", "n1")
	stale.GetInstanceReport().SessionEpoch = 4
	e.do(t, "j", stale)
	require.Len(t, e.record(t, "j").GetInstances(), 1, "a superseded session's stop must not end the current instance")
}

// TestJob_StopOwedAfterNodeLoss: an acknowledged stop whose node is then
// declared lost before its worker confirmed it is owed: if that worker
// comes back still running the instance, it is stopped, not adopted; a
// start on that node on purpose voids it.
func TestJob_StopOwedAfterNodeLoss(t *testing.T) {
	e := newEnv(t)
	e.do(t, "j", create(&managerpb.Job{JobId: &commonpb.JobId{JobId: "j"}, Services: []*commonpb.Service{{Name: "web", Command: "true"}}}))
	require.Equal(t, errorpb.Code_OK, e.do(t, "j", start("primary", "n1")).GetCode())
	e.do(t, "j", report(internalpb.InstanceReport_STARTED, "primary", "n1"))
	stop := &internalpb.JobCommand{Cmd: &internalpb.JobCommand_Stop{Stop: &internalpb.StopJob{Role: "primary", NodeId: "n1"}}}
	require.Equal(t, errorpb.Code_OK, e.do(t, "j", stop).GetCode())
	// The stop goes out asynchronously: wait for it so it is not counted
	// as the re-sent stop below.
	e.nodes.waitStop(t, "n1/j/primary")
	e.do(t, "j", &internalpb.JobCommand{Cmd: &internalpb.JobCommand_NodeGone{NodeGone: &internalpb.NodeGone{NodeId: "n1",
		Reason: managerpb.JobHistoryJobStopping_JOB_STOPPED_NODE_STOPPED}}})
	rec := e.record(t, "j")
	require.Empty(t, rec.GetInstances())
	require.Len(t, rec.GetStopsOwed(), 1)

	// The worker comes back still running it: stopped, not adopted.
	before := len(e.nodes.stopped())
	e.do(t, "j", report(internalpb.InstanceReport_STARTED, "primary", "n1"))
	require.Empty(t, e.record(t, "j").GetInstances(), "an instance owed a stop must not be adopted")
	e.nodes.waitStops(t, before+1)
	// The worker confirms: the debt is paid.
	e.do(t, "j", report(internalpb.InstanceReport_STOPPED, "primary", "n1"))
	require.Empty(t, e.record(t, "j").GetStopsOwed())

	// Owed again, then started on that node on purpose: the stop is void.
	require.Equal(t, errorpb.Code_OK, e.do(t, "j", start("primary", "n1")).GetCode())
	e.do(t, "j", report(internalpb.InstanceReport_STARTED, "primary", "n1"))
	require.Equal(t, errorpb.Code_OK, e.do(t, "j", stop).GetCode())
	e.do(t, "j", &internalpb.JobCommand{Cmd: &internalpb.JobCommand_NodeGone{NodeGone: &internalpb.NodeGone{NodeId: "n1",
		Reason: managerpb.JobHistoryJobStopping_JOB_STOPPED_NODE_STOPPED}}})
	require.Len(t, e.record(t, "j").GetStopsOwed(), 1)
	require.Equal(t, errorpb.Code_OK, e.do(t, "j", start("primary", "n1")).GetCode())
	e.do(t, "j", report(internalpb.InstanceReport_STARTED, "primary", "n1"))
	rec = e.record(t, "j")
	require.Empty(t, rec.GetStopsOwed())
	require.Len(t, rec.GetInstances(), 1)
}
