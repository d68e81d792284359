package job_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/norsk-oss/norsk-manager/persistence"
	"github.com/norsk-oss/norsk-manager/proto/commonpb"
	"github.com/norsk-oss/norsk-manager/proto/errorpb"
	"github.com/norsk-oss/norsk-manager/proto/internalpb"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
)

// eventKinds lists the kinds of the events logged after index from.
func eventKinds(t *testing.T, store *persistence.Store, from persistence.Index) []string {
	t.Helper()
	evs, err := store.ReadEvents(from+1, 1000)
	require.NoError(t, err)
	var out []string
	for _, e := range evs {
		switch e.GetEvent().GetEvent().(type) {
		case *managerpb.EventStreamEvent_JobUpdated:
			out = append(out, "job_updated")
		case *managerpb.EventStreamEvent_JobPlaced:
			out = append(out, "job_placed")
		case *managerpb.EventStreamEvent_PlacementFailed:
			out = append(out, "placement_failed")
		case *managerpb.EventStreamEvent_PlacementDegraded:
			out = append(out, "placement_degraded:"+e.GetEvent().GetPlacementDegraded().GetState().String())
		default:
			out = append(out, "other")
		}
	}
	return out
}

func head(store *persistence.Store) persistence.Index {
	_, h := store.EventBounds()
	return h
}

func failure(role, reason string) *internalpb.JobCommand {
	return &internalpb.JobCommand{Cmd: &internalpb.JobCommand_RecordPlacementFailure{RecordPlacementFailure: &internalpb.RecordPlacementFailure{
		Role: role, Attempt: &managerpb.PlacementAttempt{Reason: reason, NodesEvaluated: 3,
			Filters: []*managerpb.PlacementFilterCount{{Filter: "capacity", NodesRemoved: 3, Detail: "capacity exhausted on 3 nodes (needs 2 units)"}}}}}}
}

// TestJob_PlacementNotes: a StartJob's placement note is kept on the
// instance and its commit raises job_updated, job_placed and (degraded)
// placement_degraded; a recorded placement failure raises placement_failed
// and is kept, marked cleared by the next placement; a failure for a role
// with an instance is refused and writes nothing; a re-check replaces the
// degradation once (a repeat writes nothing).
func TestJob_PlacementNotes(t *testing.T) {
	e := newEnv(t)
	e.do(t, "j", create(runnable(&managerpb.Job{JobId: &commonpb.JobId{JobId: "j"}})))

	h := head(e.store)
	require.Equal(t, errorpb.Code_OK, e.do(t, "j", failure("backup", "job j role backup fits no node: 3 nodes evaluated: capacity exhausted on 3 nodes (needs 2 units)")).GetCode())
	require.Equal(t, []string{"placement_failed"}, eventKinds(t, e.store, h))
	rec := e.record(t, "j")
	require.Len(t, rec.GetPlacementFailures(), 1)
	pf := rec.GetPlacementFailures()[0]
	require.Equal(t, "backup", pf.GetRole())
	require.False(t, pf.GetCleared())
	require.Equal(t, uint32(3), pf.GetAttempt().GetNodesEvaluated())
	require.Equal(t, e.now.Load().Unix(), pf.GetRecordedAt().AsTime().Unix())

	h = head(e.store)
	st := start("backup", "n1")
	st.GetStart().Placement = &internalpb.PlacementNote{Pool: "p", Tier: "cheap", DegradedAtPlacement: []string{"zone"}, PeerNodeId: "n2",
		Decision: "job j role backup on node n1 (tier cheap; 1 of 3 nodes fit; degraded: zone)"}
	require.Equal(t, errorpb.Code_OK, e.do(t, "j", st).GetCode())
	require.Equal(t, []string{"job_updated", "job_placed", "placement_degraded:DEGRADED"}, eventKinds(t, e.store, h))
	rec = e.record(t, "j")
	note := rec.GetInstances()[0].GetPlacement()
	require.Equal(t, "cheap", note.GetTier())
	require.Equal(t, []string{"zone"}, note.GetDegraded())
	require.Equal(t, managerpb.PlacementDegraded_DEGRADED, note.GetDegradation())
	require.True(t, rec.GetPlacementFailures()[0].GetCleared(), "a placement clears the role's failure")

	h = head(e.store)
	r := e.do(t, "j", failure("backup", "stale"))
	require.Equal(t, errorpb.Code_FAILED_PRECONDITION, r.GetCode(), r.GetMessage())
	require.Empty(t, eventKinds(t, e.store, h), "a refused failure writes nothing")

	recheck := &internalpb.JobCommand{Cmd: &internalpb.JobCommand_RecheckPlacement{RecheckPlacement: &internalpb.RecheckPlacement{
		Role: "backup", NodeId: "n1", Degraded: []string{"zone"}, Degradation: managerpb.PlacementDegraded_FIX_AVAILABLE, PeerNodeId: "n2",
		Message: "a node in another zone has room"}}}
	e.advance(time.Minute)
	require.Equal(t, errorpb.Code_OK, e.do(t, "j", recheck).GetCode())
	require.Equal(t, []string{"placement_degraded:FIX_AVAILABLE"}, eventKinds(t, e.store, h))
	require.Equal(t, managerpb.PlacementDegraded_FIX_AVAILABLE, e.record(t, "j").GetInstances()[0].GetPlacement().GetDegradation())
	h = head(e.store)
	again := &internalpb.JobCommand{Cmd: recheck.GetCmd()} // a new request id, the same state
	require.Equal(t, errorpb.Code_OK, e.do(t, "j", again).GetCode())
	require.Empty(t, eventKinds(t, e.store, h), "an unchanged re-check writes nothing")

	wrong := &internalpb.JobCommand{Cmd: &internalpb.JobCommand_RecheckPlacement{RecheckPlacement: &internalpb.RecheckPlacement{Role: "backup", NodeId: "n2"}}}
	require.Equal(t, errorpb.Code_FAILED_PRECONDITION, e.do(t, "j", wrong).GetCode())
}

// TestJob_PlacementNoteWhenStartReportedFirst: the worker's job_started
// arriving before the node grain's answer to the provision records the
// instance; the start's note is kept on it and job_placed raised then.
func TestJob_PlacementNoteWhenStartReportedFirst(t *testing.T) {
	e := newEnv(t)
	e.do(t, "j", create(runnable(&managerpb.Job{JobId: &commonpb.JobId{JobId: "j"}})))
	gate := make(chan struct{})
	e.nodes.gate.Store(&gate)
	st := start("primary", "n1")
	st.GetStart().Placement = &internalpb.PlacementNote{Tier: "cheap", Decision: "job j role primary on node n1 (tier cheap)"}
	started := make(chan *internalpb.Reply, 1)
	go func() { started <- e.do(t, "j", st) }()
	require.Eventually(t, func() bool { return e.nodes.held.Load() == 1 }, 5*time.Second, time.Millisecond)
	h := head(e.store)
	require.Equal(t, errorpb.Code_OK, e.do(t, "j", report(internalpb.InstanceReport_STARTED, "primary", "n1")).GetCode())
	close(gate)
	require.Equal(t, errorpb.Code_OK, (<-started).GetCode())
	require.Equal(t, []string{"job_updated", "job_placed"}, eventKinds(t, e.store, h))
	require.Equal(t, "cheap", e.record(t, "j").GetInstances()[0].GetPlacement().GetTier())
}
