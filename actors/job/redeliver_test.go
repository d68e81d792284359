package job_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/norsk-oss/norsk-manager/proto/commonpb"
	"github.com/norsk-oss/norsk-manager/proto/errorpb"
	"github.com/norsk-oss/norsk-manager/proto/internalpb"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
)

// TestJob_InstanceReport_RedeliveredAfterAFailedAppend: a job_started
// report whose first delivery could not be persisted (the Raft leader was
// lost mid-append) is answered UNAVAILABLE and leaves the instance
// PROVISIONING; the HA router delivers it again (cluster/grains
// TestRouter_Send_RetriesUntilCarriedOut) and the record ends RUNNING. A
// further repeat (its earlier attempt did commit, but the answer was lost)
// changes nothing: one "running" in the history.
func TestJob_InstanceReport_RedeliveredAfterAFailedAppend(t *testing.T) {
	e := newEnv(t)
	e.do(t, "j", create(runnable(&managerpb.Job{JobId: &commonpb.JobId{JobId: "j"}})))
	require.Equal(t, errorpb.Code_OK, e.do(t, "j", start("primary", "n1")).GetCode())
	require.Equal(t, internalpb.InstanceStatus_INSTANCE_PROVISIONING, e.record(t, "j").GetInstances()[0].GetStatus())

	e.journal.failNext.Store(true)
	r := e.do(t, "j", report(internalpb.InstanceReport_STARTED, "primary", "n1"))
	require.Equal(t, errorpb.Code_UNAVAILABLE, r.GetCode(), "a report that was not persisted must not be answered OK: %s", r.GetMessage())
	require.Equal(t, internalpb.InstanceStatus_INSTANCE_PROVISIONING, e.record(t, "j").GetInstances()[0].GetStatus())

	for attempt := 2; attempt <= 3; attempt++ {
		r := e.do(t, "j", report(internalpb.InstanceReport_STARTED, "primary", "n1"))
		require.Equal(t, errorpb.Code_OK, r.GetCode(), "attempt %d: %s", attempt, r.GetMessage())
		rec := e.record(t, "j")
		require.Len(t, rec.GetInstances(), 1)
		require.Equal(t, internalpb.InstanceStatus_INSTANCE_RUNNING, rec.GetInstances()[0].GetStatus(), "attempt %d", attempt)
		require.Equal(t, []string{"created", "provisioned", "running"}, history(rec), "attempt %d", attempt)
	}
}
