package placement

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/norsk-oss/norsk-manager/actors/placement/scheduler"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
)

// provisionTimes returns the times of job id's job_provisioned entries of
// role, oldest first.
func provisionTimes(f *fixture, id, role string) []time.Time {
	var out []time.Time
	for _, e := range f.job(id).GetJob().GetHistoryEntry() {
		if p := e.GetJobProvisioned(); p != nil && p.GetRole() == role {
			out = append(out, p.GetTimestamp().AsTime())
		}
	}
	return out
}

// TestEngine_Pass_NoHotReplacement (issue 21 §1): whatever reason the
// record gives for the end of a role's instance, a role whose every
// instance ends as soon as it is placed (a job of `true`) is not placed
// again faster than the restart backoff. The engine runs a pass every
// 50 ms of a 20 s window (as fast as record changes trigger them) and the
// instance ends right after each placement; the test fails on any two
// placements closer than the policy's InitialBackoff, and on more than
// maxPlaced placements in the window.
//
// Ends the record counts as failures (JOB_STOPPED_JOB_FAILED, which the
// job grain records for an instance that ended by itself, exit 0) follow
// the failure backoff (1 s, 2 s, 4 s, 8 s) to the ceiling; ends it does
// not count (JOB_STOPPED_UNKNOWN_JOB, as an older manager recorded a clean
// exit, or a reason this manager does not know) are held to the pace
// floor. Before the fix a `true` job was placed 5–12 times a second.
func TestEngine_Pass_NoHotReplacement(t *testing.T) {
	const window, step = 20 * time.Second, 50 * time.Millisecond
	initial := scheduler.DefaultRestartPolicy().InitialBackoff
	for _, tc := range []struct {
		name      string
		reason    managerpb.JobHistoryJobStopping_Reason
		maxPlaced int
		terminal  bool
	}{
		{name: "ended by itself (JOB_FAILED)", reason: managerpb.JobHistoryJobStopping_JOB_STOPPED_JOB_FAILED, maxPlaced: 5, terminal: true},
		{name: "unknown job (an older record's clean exit)", reason: managerpb.JobHistoryJobStopping_JOB_STOPPED_UNKNOWN_JOB,
			maxPlaced: int(window/initial) + 1},
		{name: "a reason this manager does not know", reason: managerpb.JobHistoryJobStopping_Reason(99), maxPlaced: int(window/initial) + 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			f.putNode("n1", 4, "z1", nil)
			f.putNode("n2", 4, "z1", nil)
			f.putJob(autoJob("j", 1, nil))
			start := f.now
			for f.now.Sub(start) < window {
				f.pass()
				if f.nodeOf("j", "primary") != "" {
					f.endInstance(f.job("j"), "primary", tc.reason, "every service exited with code 0")
				}
				f.now = f.now.Add(step)
			}
			times := provisionTimes(f, "j", "primary")
			require.NotEmpty(t, times)
			for i := 1; i < len(times); i++ {
				require.GreaterOrEqual(t, times[i].Sub(times[i-1]), initial,
					"placement %d came %s after the one before: faster than the restart backoff", i+1, times[i].Sub(times[i-1]))
			}
			require.LessOrEqual(t, len(times), tc.maxPlaced, "placements in %s", window)
			require.Equal(t, tc.terminal, f.job("j").GetJob().GetJob().GetTerminalState() != nil, "terminal verdict")
			t.Logf("%d placements in %s", len(times), window)
		})
	}
}

// TestReplaceWait: the pace floor holds back only a role whose newest
// instance ended for a reason the manager neither decided nor took from a
// lost node, and only within InitialBackoff of its provisioning.
func TestReplaceWait(t *testing.T) {
	pol := scheduler.DefaultRestartPolicy()
	for _, tc := range []struct {
		name   string
		reason managerpb.JobHistoryJobStopping_Reason
		ran    time.Duration // from provisioning to now
		want   time.Duration
	}{
		{name: "unknown end at once", reason: managerpb.JobHistoryJobStopping_JOB_STOPPED_UNKNOWN_JOB, want: time.Second},
		{name: "unknown end after 300ms", reason: managerpb.JobHistoryJobStopping_JOB_STOPPED_UNKNOWN_JOB, ran: 300 * time.Millisecond, want: 700 * time.Millisecond},
		{name: "unknown end after a minute", reason: managerpb.JobHistoryJobStopping_JOB_STOPPED_UNKNOWN_JOB, ran: time.Minute},
		{name: "node lost at once: failover now", reason: managerpb.JobHistoryJobStopping_JOB_STOPPED_NODE_STOPPED},
		{name: "node terminated", reason: managerpb.JobHistoryJobStopping_JOB_STOPPED_NODE_TERMINATED},
		{name: "stopped by an operator", reason: managerpb.JobHistoryJobStopping_JOB_STOPPED_USER_REQUESTED},
		{name: "preempted", reason: managerpb.JobHistoryJobStopping_JOB_STOPPED_PREEMPTED},
		{name: "moved", reason: managerpb.JobHistoryJobStopping_JOB_STOPPED_MIGRATED},
		{name: "provisioned after now (a clock ahead)", reason: managerpb.JobHistoryJobStopping_JOB_STOPPED_UNKNOWN_JOB, ran: -time.Hour},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			f.putNode("n1", 4, "z1", nil)
			f.putJob(autoJob("j", 1, nil))
			f.pass()
			f.endInstance(f.job("j"), "primary", tc.reason, "")
			require.Equal(t, tc.want, replaceWait(f.job("j"), "primary", pol, f.now.Add(tc.ran)))
		})
	}
	rec := autoJob("j", 1, nil)
	require.Zero(t, replaceWait(rec, "primary", pol, time.Now()), "never placed")
}
