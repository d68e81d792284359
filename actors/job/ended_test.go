package job_test

import (
	"bytes"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/norsk-oss/norsk-manager/actors/job"
	"github.com/norsk-oss/norsk-manager/proto/commonpb"
	"github.com/norsk-oss/norsk-manager/proto/errorpb"
	"github.com/norsk-oss/norsk-manager/proto/internalpb"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
)

// syncBuffer is a bytes.Buffer safe for the grains' concurrent logging.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// endedLines returns the "job instance ended" log lines of role.
func endedLines(logs *syncBuffer, role string) []string {
	var out []string
	for _, l := range strings.Split(logs.String(), "\n") {
		if strings.Contains(l, `msg="job instance ended"`) && strings.Contains(l, "role="+role+" ") {
			out = append(out, l)
		}
	}
	return out
}

// TestJob_StoppedReasonIsTheRealOne (issue 21 §1): a job_stopped is
// recorded, and logged, with the reason that is true. An instance the
// manager stopped ends with its stop's reason (user request, preemption),
// not JOB_STOPPED_UNKNOWN_JOB. An instance the manager never stopped ended
// by itself — every service exited 0 (a job of `true`) — which for live
// video is a failure: JOB_STOPPED_JOB_FAILED, with a last failure and a
// job_info that say so, so that the placement engine backs off and counts
// it toward the restart ceiling instead of placing it again at once.
func TestJob_StoppedReasonIsTheRealOne(t *testing.T) {
	logs := &syncBuffer{}
	e := newEnvLogging(t, slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})))
	e.do(t, "j", create(&managerpb.Job{JobId: &commonpb.JobId{JobId: "j"},
		Services:      []*commonpb.Service{{Name: "once", Command: "true", Restart: commonpb.Service_NEVER}},
		AutoPlacement: &managerpb.AutoPlacement{}}))
	lastHistory := func(n int) []string {
		h := history(e.record(t, "j"))
		return h[len(h)-n:]
	}

	// Ended by itself: the worker reports job_stopped of a RUNNING instance.
	require.Equal(t, errorpb.Code_OK, e.do(t, "j", start("primary", "n1")).GetCode())
	e.do(t, "j", report(internalpb.InstanceReport_STARTED, "primary", "n1"))
	e.do(t, "j", report(internalpb.InstanceReport_STOPPED, "primary", "n1"))
	rec := e.record(t, "j")
	require.Empty(t, rec.GetInstances())
	require.Equal(t, []string{"running", "stopping:JOB_STOPPED_JOB_FAILED", "stopped"}, lastHistory(3))
	require.Len(t, rec.GetLastFailures(), 1)
	require.Equal(t, job.EndedByItself, rec.GetLastFailures()[0].GetReason())
	_, head := e.store.EventBounds()
	evs, err := e.store.ReadEvents(head, 1)
	require.NoError(t, err)
	require.Equal(t, "stopped: "+job.EndedByItself, evs[0].GetEvent().GetJobInfo().GetContainerEvent().GetText())
	lines := endedLines(logs, "primary")
	require.Len(t, lines, 1)
	require.Contains(t, lines[0], "reason=JOB_STOPPED_JOB_FAILED")

	// Stopped by the manager: the stop's reason, recorded and logged; no
	// failure added.
	for _, tc := range []struct {
		role string
		stop *internalpb.JobCommand
		want managerpb.JobHistoryJobStopping_Reason
	}{
		{role: "user", want: managerpb.JobHistoryJobStopping_JOB_STOPPED_USER_REQUESTED,
			stop: &internalpb.JobCommand{Cmd: &internalpb.JobCommand_Stop{Stop: &internalpb.StopJob{Role: "user", NodeId: "n2"}}}},
		{role: "low", want: managerpb.JobHistoryJobStopping_JOB_STOPPED_PREEMPTED,
			stop: &internalpb.JobCommand{Cmd: &internalpb.JobCommand_Preempt{Preempt: &internalpb.PreemptJob{Role: "low", NodeId: "n2",
				ForJobId: "hi", ForRole: "primary", Reason: "room for a HIGH job"}}}},
	} {
		require.Equal(t, errorpb.Code_OK, e.do(t, "j", start(tc.role, "n2")).GetCode())
		e.do(t, "j", report(internalpb.InstanceReport_STARTED, tc.role, "n2"))
		r := e.do(t, "j", tc.stop)
		require.Equal(t, errorpb.Code_OK, r.GetCode(), r.GetMessage())
		e.do(t, "j", report(internalpb.InstanceReport_STOPPED, tc.role, "n2"))
		require.Equal(t, []string{"stopping:" + tc.want.String(), "stopped"}, lastHistory(2), tc.role)
		lines := endedLines(logs, tc.role)
		require.Len(t, lines, 1, tc.role)
		require.Contains(t, lines[0], "reason="+tc.want.String(), "the confirmed stop is logged with its real reason")
	}
	require.Len(t, e.record(t, "j").GetLastFailures(), 1, "a stop the manager asked for is no failure")
	require.NotContains(t, logs.String(), "JOB_STOPPED_UNKNOWN_JOB")
}

// TestJob_FencedStopIsANodeLoss (issue 21 §1 with §10): a job_stopped the
// worker's fence made (InstanceReport.fenced) is recorded as a node loss,
// JOB_STOPPED_NODE_STOPPED with the fence's words, and is no failure: a
// worker frozen or cut off past its lease five times in ten minutes must
// not give a healthy job up at the restart ceiling.
func TestJob_FencedStopIsANodeLoss(t *testing.T) {
	logs := &syncBuffer{}
	e := newEnvLogging(t, slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})))
	e.do(t, "j", create(&managerpb.Job{JobId: &commonpb.JobId{JobId: "j"},
		Services:      []*commonpb.Service{{Name: "live", Command: "sleep 1000"}},
		AutoPlacement: &managerpb.AutoPlacement{}}))
	for range 6 {
		require.Equal(t, errorpb.Code_OK, e.do(t, "j", start("primary", "n1")).GetCode())
		e.do(t, "j", report(internalpb.InstanceReport_STARTED, "primary", "n1"))
		r := report(internalpb.InstanceReport_STOPPED, "primary", "n1")
		r.GetInstanceReport().Fenced = true
		e.do(t, "j", r)
	}
	rec := e.record(t, "j")
	require.Empty(t, rec.GetInstances())
	require.Empty(t, rec.GetLastFailures(), "a fenced stop is no failure of the job")
	h := history(rec)
	require.Equal(t, []string{"stopping:JOB_STOPPED_NODE_STOPPED", "stopped"}, h[len(h)-2:])
	_, head := e.store.EventBounds()
	evs, err := e.store.ReadEvents(head, 1)
	require.NoError(t, err)
	require.Equal(t, "stopped: "+job.Fenced, evs[0].GetEvent().GetJobInfo().GetContainerEvent().GetText())
	lines := endedLines(logs, "primary")
	require.Len(t, lines, 6)
	require.Contains(t, lines[5], "reason=JOB_STOPPED_NODE_STOPPED")
}
