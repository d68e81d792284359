package e2e

import (
	"context"
	"net"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/norsk-oss/norsk-manager/proto/commonpb"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
	"github.com/norsk-oss/norsk-manager/test/testproc"
)

// TestE2E_DockerWorker_EngineUnreachable: a --runtime=docker worker whose
// DOCKER_HOST names a closed port starts, the manager shows its engine as
// down with the reason (ListNodes, norsk-ctl node list/get), and a Docker
// job provisioned on it fails at once with that reason. No engine needed.
func TestE2E_DockerWorker_EngineUnreachable(t *testing.T) {
	ctx := context.Background()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	dockerHost := "tcp://" + l.Addr().String()
	require.NoError(t, l.Close())

	m := startManager(t, filepath.Join(t.TempDir(), "data"), testproc.FreePort(t))
	mc := connect(t, m.addr)
	ev := &testproc.EventLog{}
	ev.Follow(t, mc, 10*time.Second)
	nodeID, token, err := mc.RegisterClusterNode(ctx, "no-engine", nil)
	require.NoError(t, err)
	stateDir := filepath.Join(t.TempDir(), "worker")
	t.Cleanup(func() { testproc.KillProcessesMentioning(stateDir) })
	w := testproc.StartWith(t, "docker-worker", "norsk-ctl", func(c *exec.Cmd) { c.Env = append(c.Env, "DOCKER_HOST="+dockerHost) },
		"--mode=worker", "--runtime=docker", "--token", token, "--manager-url", m.addr,
		"--listen", testproc.Addr(testproc.FreePort(t)), "--state-dir", stateDir, "--log-level", "debug")
	testproc.Eventually(t, 20*time.Second, "worker online", func() bool {
		require.True(t, w.Running(), "a docker worker without an engine must run:\n%s", w.Output())
		return nodeConnected(t, mc, string(nodeID))
	})

	wantReason := "docker engine at " + dockerHost + " unreachable: "
	var cond *commonpb.RuntimeCondition
	testproc.Eventually(t, 10*time.Second, "the engine's condition in ListNodes", func() bool {
		nodes, err := mc.ListNodes(ctx)
		require.NoError(t, err)
		for _, n := range nodes {
			if n.GetMetadata().GetNodeId().GetNodeId() == string(nodeID) && len(n.GetRuntimeConditions()) == 1 {
				cond = n.GetRuntimeConditions()[0]
			}
		}
		return cond != nil
	})
	require.Equal(t, "docker", cond.GetRuntime())
	require.False(t, cond.GetOk())
	require.True(t, strings.HasPrefix(cond.GetReason(), wantReason), cond.GetReason())
	require.Contains(t, cond.GetReason(), "connection refused")

	out, code := ctl(t, m.addr, "node", "list")
	require.Equal(t, 0, code, out)
	require.Contains(t, out, "docker down")
	out, code = ctl(t, m.addr, "node", "get", string(nodeID))
	require.Equal(t, 0, code, out)
	require.Contains(t, out, "docker: down since ")
	require.Contains(t, out, wantReason)

	_, err = mc.CreateJob(ctx, &managerpb.Job{
		JobId: &commonpb.JobId{JobId: "needs-docker"},
		Services: []*commonpb.Service{{Name: "web",
			Container: &commonpb.Service_Docker{Docker: &commonpb.DockerContainer{ContainerUrl: &commonpb.ContainerUrl{Url: "example/web:1"}}}}},
	})
	require.NoError(t, err)
	require.NoError(t, mc.StartJob(ctx, "needs-docker", "primary", nodeID))
	testproc.Eventually(t, 20*time.Second, "the job failed with the engine's reason", func() bool {
		return ev.Has(func(e *managerpb.EventStreamEvent) bool {
			ce := e.GetJobInfo().GetContainerEvent()
			return e.GetJobInfo().GetJobKey().GetJobId().GetJobId() == "needs-docker" && ce.GetServiceName() == "" &&
				strings.HasPrefix(ce.GetText(), "failed: "+wantReason)
		})
	})
	require.NotContains(t, w.Output(), "pulling image", "nothing was pulled")
}
