package e2e

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/norsk-oss/norsk-manager/client"
	"github.com/norsk-oss/norsk-manager/proto/commonpb"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
	"github.com/norsk-oss/norsk-manager/test/testproc"
)

// TestE2E_ProductTemplate_NodeWithoutCatalogue (issue 14 §1, the
// manager's half): a real worker without a template catalogue. A job
// naming a template is refused at StartJob by hand on it
// (FailedPrecondition naming the template, the version and "none"), with
// nothing recorded; an auto-placed one is not placed, and GetPlacement
// names the product_template filter; norsk-ctl node get shows no
// templates; a job whose template name is no catalogue name is refused at
// CreateJob naming the field. The worker's side (--template-dir reported
// in the hello, the stack run) is the template runtime's to test.
func TestE2E_ProductTemplate_NodeWithoutCatalogue(t *testing.T) {
	ctx := context.Background()
	m := startManager(t, filepath.Join(t.TempDir(), "data"), testproc.FreePort(t))
	mc := connect(t, m.addr)
	nodeID, token, err := mc.RegisterClusterNode(ctx, "templates", nil)
	require.NoError(t, err)
	stateDir := filepath.Join(t.TempDir(), "worker")
	t.Cleanup(func() { testproc.KillProcessesMentioning(stateDir) })
	start(t, "worker", "norsk-ctl", "--mode=worker", "--manager-url", m.addr, "--listen", testproc.Addr(testproc.FreePort(t)),
		"--state-dir", stateDir, "--log-level", "debug", "--token", token, "--capacity", "4")
	testproc.Eventually(t, 20*time.Second, "worker online", func() bool { return nodeConnected(t, mc, string(nodeID)) })

	hello := &commonpb.ProductTemplateRef{Name: "hello", Version: "1.0"}
	manual := webJob("manual", filepath.Join(testproc.JobFilesDir(t), "manual.pid"), testproc.FreePort(t))
	manual.ProductTemplate = hello
	_, err = mc.CreateJob(ctx, manual)
	require.NoError(t, err)
	err = mc.StartJob(ctx, "manual", "primary", nodeID)
	require.Equal(t, codes.FailedPrecondition, status.Code(err), "StartJob: %v", err)
	require.Contains(t, err.Error(), "node "+string(nodeID)+" has no product template hello 1.0; it has: none")
	j, err := mc.JobByID(ctx, "manual")
	require.NoError(t, err)
	require.Empty(t, j.GetInstances(), "a refused start records no instance")

	auto := webJob("auto", filepath.Join(testproc.JobFilesDir(t), "auto.pid"), testproc.FreePort(t))
	auto.ProductTemplate = hello
	auto.AutoPlacement = &managerpb.AutoPlacement{Requirements: &managerpb.JobRequirements{RequiredCapacity: 1}}
	_, err = mc.CreateJob(ctx, auto)
	require.NoError(t, err)
	const want = "constraint product_template filtered 1 node (wants hello 1.0; no hello 1)"
	testproc.Eventually(t, 20*time.Second, "the engine explains why the job waits", func() bool {
		p, err := mc.GetPlacement(ctx, "auto")
		require.NoError(t, err)
		for _, r := range p.GetRoles() {
			require.Empty(t, r.GetNodeId(), "placed on a node without the template")
			if r.GetLastAttempt() != nil {
				require.Contains(t, r.GetLastAttempt().GetReason(), want)
				return true
			}
		}
		return false
	})

	out, code := ctl(t, m.addr, "node", "get", string(nodeID))
	require.Equal(t, 0, code, out)
	require.Contains(t, out, "Templates:  none\n")

	bad := webJob("bad", filepath.Join(testproc.JobFilesDir(t), "bad.pid"), testproc.FreePort(t))
	bad.ProductTemplate = &commonpb.ProductTemplateRef{Name: "../hello", Version: "1.0"}
	_, err = mc.CreateJob(ctx, bad)
	require.Equal(t, codes.InvalidArgument, status.Code(err), "CreateJob: %v", err)
	require.Contains(t, err.Error(), "job.product_template.name")
	_, err = mc.JobByID(ctx, client.JobID("bad"))
	require.Equal(t, codes.NotFound, status.Code(err), "a refused job is not stored: %v", err)
}
