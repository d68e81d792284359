package job_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/norsk-oss/norsk-manager/proto/commonpb"
	"github.com/norsk-oss/norsk-manager/proto/errorpb"
	"github.com/norsk-oss/norsk-manager/proto/internalpb"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
)

// TestJob_Delete_AutoPlacedSaysComplete: DeleteJob of an auto-placed job
// with an instance tells the operator to complete it, not to stop it —
// a stopped auto-placed job is placed again by the engine at once, so
// "stop it first" sent them round in a loop (found by hand).
func TestJob_Delete_AutoPlacedSaysComplete(t *testing.T) {
	e := newEnv(t)
	for _, tc := range []struct {
		id       string
		auto     bool
		contains string
	}{
		{"manual", false, "stop or complete it first"},
		{"auto", true, "complete it first"},
	} {
		j := runnable(&managerpb.Job{JobId: &commonpb.JobId{JobId: tc.id}})
		if tc.auto {
			j.AutoPlacement = &managerpb.AutoPlacement{}
		}
		e.do(t, tc.id, create(j))
		e.do(t, tc.id, report(internalpb.InstanceReport_STARTED, "primary", "n1"))
		r := e.do(t, tc.id, &internalpb.JobCommand{Cmd: &internalpb.JobCommand_Delete{Delete: &internalpb.DeleteJob{}}})
		require.Equal(t, errorpb.Code_FAILED_PRECONDITION, r.GetCode())
		require.Contains(t, r.GetMessage(), tc.contains, tc.id)
		if tc.auto {
			require.NotContains(t, r.GetMessage(), "stop or complete", "a stop does not help: the engine places it again")
		}
	}
}
