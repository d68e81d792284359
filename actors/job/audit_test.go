package job_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/norsk-oss/norsk-manager/persistence"
	"github.com/norsk-oss/norsk-manager/persistence/auditchain"
	"github.com/norsk-oss/norsk-manager/proto/commonpb"
	"github.com/norsk-oss/norsk-manager/proto/errorpb"
	"github.com/norsk-oss/norsk-manager/proto/internalpb"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
)

// auditKinds returns "kind/who" of every audit entry in the store.
func auditKinds(t *testing.T, s *persistence.Store) []string {
	t.Helper()
	var out []string
	require.NoError(t, s.View(func(r *persistence.Reader) error {
		return r.AuditEntries(0, 0, 0, func(e *managerpb.AuditLogEntry) error {
			out = append(out, e.GetKind()+"/"+e.GetWho())
			return nil
		})
	}))
	return out
}

func audited(cmd *internalpb.JobCommand, rid, kind string) *internalpb.JobCommand {
	cmd.RequestId = rid
	cmd.Audit = &internalpb.AuditIntent{Source: auditchain.SourceManager, Kind: kind, Who: "alice", Payload: `{"job_id":"a"}`}
	return cmd
}

// TestGrain_Audit: an accepted command's intent is written once, with the
// commit of its change (a StartJob's after the node accepted the
// provision); a refused command, a repeated request id and an internal
// command (no intent) write nothing.
func TestGrain_Audit(t *testing.T) {
	e := newEnv(t)
	j := runnable(&managerpb.Job{JobId: &commonpb.JobId{JobId: "a"}})
	r := e.do(t, "a", audited(create(j), "r1", "job.create"))
	require.Equal(t, errorpb.Code_OK, r.GetCode(), r.GetMessage())
	require.Equal(t, []string{"job.create/alice"}, auditKinds(t, e.store))

	r = e.do(t, "a", audited(create(j), "r2", "job.create")) // refused: exists
	require.Equal(t, errorpb.Code_ALREADY_EXISTS, r.GetCode())
	r = e.do(t, "a", audited(create(j), "r1", "job.create")) // repeat of r1
	require.Equal(t, errorpb.Code_OK, r.GetCode())
	r = e.do(t, "a", audited(start("primary", "offline-node"), "r3", "job.start")) // refused by the node
	require.Equal(t, errorpb.Code_FAILED_PRECONDITION, r.GetCode())
	require.Equal(t, []string{"job.create/alice"}, auditKinds(t, e.store))

	r = e.do(t, "a", audited(start("primary", "n1"), "r4", "job.start"))
	require.Equal(t, errorpb.Code_OK, r.GetCode(), r.GetMessage())
	r = e.do(t, "a", report(internalpb.InstanceReport_STARTED, "primary", "n1")) // internal: no intent
	require.Equal(t, errorpb.Code_OK, r.GetCode(), r.GetMessage())
	require.Equal(t, []string{"job.create/alice", "job.start/alice"}, auditKinds(t, e.store))
}
