package job_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/norsk-oss/norsk-manager/actors/job"
	"github.com/norsk-oss/norsk-manager/persistence"
	"github.com/norsk-oss/norsk-manager/proto/commonpb"
	"github.com/norsk-oss/norsk-manager/proto/errorpb"
	"github.com/norsk-oss/norsk-manager/proto/internalpb"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
)

// updateCmd is an UpdateJob of "j" to j at the record's current hash.
func updateCmd(t *testing.T, e *env, change func(j *managerpb.Job)) int64 {
	t.Helper()
	j := proto.Clone(e.record(t, "j").GetJob().GetJob()).(*managerpb.Job)
	change(j)
	return hashOf(t, e.do(t, "j", &internalpb.JobCommand{Cmd: &internalpb.JobCommand_Update{Update: &internalpb.UpdateJob{Job: j}}}))
}

// newCommand changes what the worker runs.
func newCommand(cmd string) func(j *managerpb.Job) {
	return func(j *managerpb.Job) { j.Services[0].Command = cmd }
}

// onlyBookkeeping changes nothing the worker runs.
func onlyBookkeeping(j *managerpb.Job) {
	j.Description = "renamed"
	j.Tags = map[string]string{"team": "b"}
	j.StartDateTime = timestamppb.New(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	j.UpdateStrategy = managerpb.UpdateStrategy_UPDATE_STRATEGY_MIGRATE
	j.AutoPlacement = &managerpb.AutoPlacement{Requirements: &managerpb.JobRequirements{RequiredCapacity: 2}}
}

// driftEvents returns the definition_drift events logged after from.
func driftEvents(t *testing.T, e *env, from persistence.Index) []*managerpb.DefinitionDrift {
	t.Helper()
	evs, err := e.store.ReadEvents(from+1, 1000)
	require.NoError(t, err)
	var out []*managerpb.DefinitionDrift
	for _, ev := range evs {
		if d := ev.GetEvent().GetDefinitionDrift(); d != nil {
			out = append(out, d)
		}
	}
	return out
}

// runningOf returns the one RunningJob of "j" as JobById shows it.
func runningOf(t *testing.T, e *env) *managerpb.RunningJob {
	t.Helper()
	rjs := job.RunningJobs(e.record(t, "j"))
	require.Len(t, rjs, 1)
	return rjs[0]
}

func TestRunHash_CoversWhatTheWorkerRuns(t *testing.T) {
	base := runnable(&managerpb.Job{JobId: &commonpb.JobId{JobId: "j"}, CurrentHash: 5})
	cases := []struct {
		name   string
		change func(j *managerpb.Job)
		same   bool
	}{
		{"current hash and state", func(j *managerpb.Job) { j.CurrentHash, j.State = 9, managerpb.Job_ACTIVE }, true},
		{"bookkeeping only", onlyBookkeeping, true},
		{"terminal state", func(j *managerpb.Job) { j.TerminalState = &managerpb.TerminalState{FailureReason: "x"} }, true},
		{"service command", newCommand("sleep 61"), false},
		{"volumes", func(j *managerpb.Job) { j.Volumes = []string{"v"} }, false},
		{"cpu list", func(j *managerpb.Job) { j.NorskCpuList = []uint32{1} }, false},
		{"write files", func(j *managerpb.Job) { j.WriteFiles = []*commonpb.WriteFile{{Path: "a"}} }, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			j := proto.Clone(base).(*managerpb.Job)
			tc.change(j)
			require.NotZero(t, job.RunHash(j))
			require.Equal(t, tc.same, job.RunHash(base) == job.RunHash(j))
		})
	}
}

func TestStale_UnknownIsNeverStale(t *testing.T) {
	j := runnable(&managerpb.Job{JobId: &commonpb.JobId{JobId: "j"}, CurrentHash: 5})
	other := proto.Clone(j).(*managerpb.Job)
	newCommand("other")(other)
	cases := []struct {
		name  string
		in    *internalpb.Instance
		stale bool
	}{
		{"unknown (old record)", &internalpb.Instance{}, false},
		{"current", &internalpb.Instance{DefinitionHash: 5, RunHash: job.RunHash(j)}, false},
		{"older hash, same run", &internalpb.Instance{DefinitionHash: 4, RunHash: job.RunHash(j)}, false},
		{"older definition", &internalpb.Instance{DefinitionHash: 4, RunHash: job.RunHash(other)}, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) { require.Equal(t, tc.stale, job.Stale(j, tc.in)) })
	}
}

// TestJob_Drift_UpdateLeavesRunningInstance: a start records the job's
// hash; an UpdateJob of what the worker runs leaves it (the instance is
// stale, JobById says so); one of bookkeeping alone carries it forward;
// a restart runs the current definition.
func TestJob_Drift_UpdateLeavesRunningInstance(t *testing.T) {
	e := newEnv(t)
	h0 := hashOf(t, e.do(t, "j", create(runnable(&managerpb.Job{JobId: &commonpb.JobId{JobId: "j"}}))))
	require.Equal(t, errorpb.Code_OK, e.do(t, "j", start("primary", "n1")).GetCode())
	id := e.nodes.provisionID(t, 1)
	e.do(t, "j", reportID(internalpb.InstanceReport_STARTED, "primary", "n1", id))
	in := e.record(t, "j").GetInstances()[0]
	require.Equal(t, h0, in.GetDefinitionHash(), "the start records the hash it provisioned")
	require.NotZero(t, in.GetRunHash())
	require.False(t, runningOf(t, e).GetDefinitionStale())

	from := head(e.store)
	h1 := updateCmd(t, e, onlyBookkeeping)
	require.Equal(t, h1, runningOf(t, e).GetDefinitionHash(), "an update of nothing the worker runs carries the instance forward")
	require.False(t, runningOf(t, e).GetDefinitionStale())
	require.Empty(t, driftEvents(t, e, from), "no drift, no definition_drift")

	from = head(e.store)
	h2 := updateCmd(t, e, newCommand("sleep 61"))
	rj := runningOf(t, e)
	require.Equal(t, h1, rj.GetDefinitionHash(), "UpdateJob leaves what the instance runs")
	require.True(t, rj.GetDefinitionStale())
	require.NotEqual(t, h1, h2)
	evs := driftEvents(t, e, from)
	require.Len(t, evs, 1, "one definition_drift in the update's commit")
	require.Equal(t, h2, evs[0].GetCurrentHash())
	require.Len(t, evs[0].GetInstances(), 1)
	require.Equal(t, h1, evs[0].GetInstances()[0].GetDefinitionHash())
	// MIGRATE (set by the bookkeeping update): the message says the
	// placement engine moves them.
	require.Equal(t, fmt.Sprintf("job j: primary on node n1 runs definition hash %d; current %d: "+
		"rolling update: the placement engine moves them to the current definition, make-before-break", h1, h2), evs[0].GetMessage())

	require.Equal(t, errorpb.Code_OK, e.do(t, "j", stopCmd("primary", "n1")).GetCode())
	e.do(t, "j", reportID(internalpb.InstanceReport_STOPPED, "primary", "n1", id))
	require.Equal(t, errorpb.Code_OK, e.do(t, "j", start("primary", "n1")).GetCode())
	rj = runningOf(t, e)
	require.Equal(t, h2, rj.GetDefinitionHash(), "a restart runs the current definition")
	require.False(t, rj.GetDefinitionStale())
}

// TestJob_Drift_AdoptedIsUnknown: an instance the worker reports without
// a start by this manager, or one the worker kept under another id
// instead of the start's, has an unknown definition: never stale.
func TestJob_Drift_AdoptedIsUnknown(t *testing.T) {
	t.Run("adopted", func(t *testing.T) {
		e := newEnv(t)
		e.do(t, "j", create(runnable(&managerpb.Job{JobId: &commonpb.JobId{JobId: "j"}})))
		e.do(t, "j", reportID(internalpb.InstanceReport_STARTED, "primary", "n1", "0123456789abcdef0123456789abcdef"))
		updateCmd(t, e, newCommand("sleep 61"))
		in := e.record(t, "j").GetInstances()[0]
		require.Zero(t, in.GetDefinitionHash())
		require.Zero(t, in.GetRunHash())
		require.False(t, runningOf(t, e).GetDefinitionStale())
	})
	t.Run("worker kept another instance", func(t *testing.T) {
		e := newEnv(t)
		e.do(t, "j", create(runnable(&managerpb.Job{JobId: &commonpb.JobId{JobId: "j"}})))
		require.Equal(t, errorpb.Code_OK, e.do(t, "j", start("primary", "n1")).GetCode())
		require.NotZero(t, e.record(t, "j").GetInstances()[0].GetDefinitionHash())
		e.do(t, "j", reportID(internalpb.InstanceReport_STARTED, "primary", "n1", "0123456789abcdef0123456789abcdef"))
		require.Zero(t, e.record(t, "j").GetInstances()[0].GetDefinitionHash(), "what an earlier instance runs is unknown")
	})
}

// TestJob_Drift_UpdateWhileStarting: a start whose provision crosses an
// UpdateJob records the definition it sent, not the one stored when its
// answer arrives — whichever path records the instance; an update that
// changed nothing the worker runs carries it forward to the new hash.
func TestJob_Drift_UpdateWhileStarting(t *testing.T) {
	for _, tc := range []struct {
		name        string
		reportFirst bool
		change      func(j *managerpb.Job)
		stale       bool
	}{
		{"answer first", false, newCommand("sleep 61"), true},
		{"running reported first", true, newCommand("sleep 61"), true},
		{"answer first, bookkeeping only", false, onlyBookkeeping, false},
		{"running reported first, bookkeeping only", true, onlyBookkeeping, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			h0 := hashOf(t, e.do(t, "j", create(runnable(&managerpb.Job{JobId: &commonpb.JobId{JobId: "j"}}))))
			gate := make(chan struct{})
			e.nodes.gate.Store(&gate)
			t.Cleanup(func() { e.nodes.gate.Store(nil) })
			started := make(chan *internalpb.Reply, 1)
			go func() { started <- e.do(t, "j", start("primary", "n1")) }()
			require.Eventually(t, func() bool { return e.nodes.held.Load() == 1 }, 5*time.Second, time.Millisecond)
			h1 := updateCmd(t, e, tc.change)
			if tc.reportFirst {
				e.do(t, "j", reportID(internalpb.InstanceReport_STARTED, "primary", "n1", e.nodes.provisionID(t, 1)))
			}
			close(gate)
			require.Equal(t, errorpb.Code_OK, (<-started).GetCode())
			rj := runningOf(t, e)
			require.Equal(t, tc.stale, rj.GetDefinitionStale())
			want := map[bool]int64{true: h0, false: h1}[tc.stale]
			require.Equal(t, want, rj.GetDefinitionHash(), "the provision sent the definition of hash %d", h0)
		})
	}
}

// BenchmarkStale is the cost JobById / JobSearch / GetBundle pay per
// instance: the fast path (definition current) and a stale instance (one
// RunHash of the job).
func BenchmarkStale(b *testing.B) {
	j := runnable(&managerpb.Job{JobId: &commonpb.JobId{JobId: "j"}, CurrentHash: 7, Description: "a typical job",
		Tags: map[string]string{"team": "video", "event": "final"}})
	for range 4 {
		j.Services = append(j.Services, proto.Clone(j.Services[0]).(*commonpb.Service))
	}
	current := &internalpb.Instance{DefinitionHash: 7, RunHash: job.RunHash(j)}
	stale := &internalpb.Instance{DefinitionHash: 6, RunHash: 1}
	b.Run("current", func(b *testing.B) {
		for b.Loop() {
			job.Stale(j, current)
		}
	})
	b.Run("stale", func(b *testing.B) {
		for b.Loop() {
			job.Stale(j, stale)
		}
	})
}
