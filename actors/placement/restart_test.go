package placement

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/norsk-oss/norsk-manager/proto/commonpb"
	"github.com/norsk-oss/norsk-manager/proto/internalpb"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
)

// TestFailuresOf_MoveTargets: which failures of a move's target role count
// towards its logical role's ceiling, read from the history alone.
func TestFailuresOf_MoveTargets(t *testing.T) {
	t0 := time.Date(2026, 1, 2, 3, 0, 0, 0, time.UTC)
	at := func(s int) *timestamppb.Timestamp { return timestamppb.New(t0.Add(time.Duration(s) * time.Second)) }
	prov := func(s int, role string) *managerpb.JobHistoryEntry {
		return &managerpb.JobHistoryEntry{HistoryEntry: &managerpb.JobHistoryEntry_JobProvisioned{JobProvisioned: &managerpb.JobHistoryJobProvisioned{
			Timestamp: at(s), Role: role}}}
	}
	stopping := func(s int, role string, r managerpb.JobHistoryJobStopping_Reason) *managerpb.JobHistoryEntry {
		return &managerpb.JobHistoryEntry{HistoryEntry: &managerpb.JobHistoryEntry_JobStopping{JobStopping: &managerpb.JobHistoryJobStopping{
			Timestamp: at(s), Role: role, Reason: r, NodeMetadata: &commonpb.NodeMetadata{NodeId: &commonpb.NodeId{NodeId: "n"}}}}}
	}
	const failed, migrated = managerpb.JobHistoryJobStopping_JOB_STOPPED_JOB_FAILED, managerpb.JobHistoryJobStopping_JOB_STOPPED_MIGRATED
	for _, tc := range []struct {
		name    string
		history []*managerpb.JobHistoryEntry
		last    []*managerpb.InstanceFailure
		want    int
		paused  bool // a failure of a target that never took over paces the next move
	}{
		{name: "target failed before it took over",
			history: []*managerpb.JobHistoryEntry{prov(0, "primary"), prov(10, "primary~1"), stopping(20, "primary~1", failed)},
			last:    []*managerpb.InstanceFailure{{Role: "primary~1", Reason: "bad image", At: at(20)}},
			want:    0, paused: true},
		{name: "target failed after its move handed over",
			history: []*managerpb.JobHistoryEntry{prov(0, "primary"), prov(10, "primary~1"), stopping(20, "primary", migrated), stopping(30, "primary~1", failed)},
			last:    []*managerpb.InstanceFailure{{Role: "primary~1", Reason: "crash", At: at(30)}},
			want:    1},
		{name: "target failed while handing over (the source already stopping)",
			history: []*managerpb.JobHistoryEntry{prov(0, "primary"), prov(10, "primary~1"), stopping(20, "primary", migrated), stopping(21, "primary~1", failed)},
			want:    1},
		{name: "the moved instance fails while its own next move starts",
			history: []*managerpb.JobHistoryEntry{prov(0, "primary"), prov(10, "primary~1"), stopping(20, "primary", migrated),
				prov(30, "primary~2"), stopping(40, "primary~1", failed), stopping(41, "primary~2", failed)},
			want: 1, paused: true},
		{name: "the source fails; its failed targets do not add to it",
			history: []*managerpb.JobHistoryEntry{prov(0, "primary"), prov(10, "primary~1"), stopping(20, "primary~1", failed),
				prov(50, "primary~2"), stopping(60, "primary~2", failed), stopping(70, "primary", failed)},
			want: 1, paused: true},
		{name: "the target's provisioning dropped from the bounded history: counts",
			history: []*managerpb.JobHistoryEntry{stopping(20, "primary~1", failed)},
			last:    []*managerpb.InstanceFailure{{Role: "primary~1", Reason: "crash", At: at(20)}},
			want:    1},
		{name: "only the last failure is left of a target that never took over",
			history: []*managerpb.JobHistoryEntry{prov(10, "primary~1")},
			last:    []*managerpb.InstanceFailure{{Role: "primary~1", Reason: "bad image", At: at(20)}},
			want:    0, paused: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := &internalpb.JobRecord{Job: &managerpb.JobWithHistory{Job: &managerpb.Job{}, HistoryEntry: tc.history}, LastFailures: tc.last}
			require.Len(t, failuresOf(rec, "primary").times, tc.want)
			_, ok := lastUntakenFailure(rec, "primary")
			require.Equal(t, tc.paused, ok, "a failure of a target that never took over, to pace the next move by")
		})
	}
}
