//go:build linux

package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/norsk-oss/norsk-manager/client"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
	"github.com/norsk-oss/norsk-manager/test/testproc"
)

// TestE2E_ProductTemplate_RunsAndSurvivesWorkerKill (issue 14 §3): the
// example job (examples/hello-template/job.json) created and started
// through the manager on a real Docker worker with the example catalogue:
// web starts after api is healthy, on the template's fixed host port, and
// sees the fused launch config and the job's parameters; the worker is
// SIGKILLed and restarted (after the template was edited on disk): the
// stack is re-adopted without a restart, the manager keeps it running, and
// the edit does not reach it; StopJob then removes all but its volume.
func TestE2E_ProductTemplate_RunsAndSurvivesWorkerKill(t *testing.T) {
	catalogue := filepath.Join(t.TempDir(), "catalogue")
	copyTree(t, filepath.Join("..", "..", "examples", "hello-template", "catalogue"), catalogue)
	d := newDockerCluster(t, "--template-dir", catalogue)
	ctx := context.Background()

	raw, err := os.ReadFile(filepath.Join("..", "..", "examples", "hello-template", "job.json"))
	require.NoError(t, err)
	job := &managerpb.Job{}
	require.NoError(t, protojson.Unmarshal(raw, job))
	id := job.GetJobId().GetJobId()
	webPort := testproc.FreePort(t)
	job.ProductTemplateParameters["PROBE_IMAGE"] = d.image
	job.ProductTemplateParameters["WEB_PORT"] = fmt.Sprint(webPort)
	job.ProductTemplateParameters["API_WARMUP"] = "1s"
	d.startJob(job)

	ports := d.awaitRunning(id).GetServicePortMappings()
	require.Len(t, ports["web"].GetMappings(), 1, "ports %v", ports)
	require.Equal(t, uint32(webPort), ports["web"].GetMappings()[0].GetPublished(), "the template's fixed host port")
	url := baseURL(t, ports["web"].GetMappings()[0])
	const launch = `{"log":{"level":"debug"},"output":{"bitrate":6000000,"codec":"h265"}}`
	require.Equal(t, launch, httpGet(t, url+"/env?name=NORSK_LAUNCH_CONFIG"))
	require.Equal(t, launch, httpGet(t, url+"/file?path=/etc/norsk/launch-config.json"))
	require.Equal(t, "hello, operator", httpGet(t, url+"/env?name=GREETING"), "the job's parameter over .env")
	require.Equal(t, "hello, operator!", httpGet(t, url+"/env?name=GREETING_LOUD"), "env_file, interpolated")
	require.Equal(t, "Hello from the hello-template example.\n", httpGet(t, url+"/file?path=/etc/hello/banner.txt"))
	require.NotEmpty(t, strings.TrimSpace(httpGet(t, url+"/resolve?host=api")), "the stack's network")

	api, web := d.inspect(id, "api"), d.inspect(id, "web")
	apiStart, err := time.Parse(time.RFC3339Nano, api.State.StartedAt)
	require.NoError(t, err)
	webStart, err := time.Parse(time.RFC3339Nano, web.State.StartedAt)
	require.NoError(t, err)
	require.False(t, webStart.Before(apiStart.Add(time.Second)), "web started at %s, api at %s: before api could be healthy", webStart, apiStart)
	require.Equal(t, "hello", web.Config.Labels["io.norsk.template"])
	require.Equal(t, "1.0", web.Config.Labels["io.norsk.template-version"])
	kinds, err := d.mc.JobByID(ctx, client.JobID(id))
	require.NoError(t, err)

	mark := d.ev.Len()
	d.w.Kill()
	require.NoError(t, os.WriteFile(filepath.Join(catalogue, "hello", "1.0", "banner.txt"), []byte("edited\n"), 0o644))
	d.startWorker()
	d.awaitWorkerOnline()
	testproc.Await(t, 20*time.Second, "the new session's physical_node_connected with the job", func() error {
		for _, e := range d.ev.Snapshot()[mark:] {
			for _, in := range e.GetPhysicalNodeConnected().GetInstances() {
				if in.GetJobKey().GetJobId().GetJobId() == id {
					return nil
				}
			}
		}
		return fmt.Errorf("none yet")
	})
	for svc, before := range map[string]string{"api": api.ID + "@" + api.State.StartedAt, "web": web.ID + "@" + web.State.StartedAt} {
		after := d.inspect(id, svc)
		require.Equal(t, before, after.ID+"@"+after.State.StartedAt, "%s: re-adopted, not restarted", svc)
		require.True(t, after.State.Running)
	}
	require.Equal(t, "Hello from the hello-template example.\n", httpGet(t, url+"/file?path=/etc/hello/banner.txt"), "the edit on disk reached the running stack")
	r, err := d.mc.JobByID(ctx, client.JobID(id))
	require.NoError(t, err)
	require.Equal(t, historyKinds(kinds), historyKinds(r), "a worker restart re-adopts; it does not restart the job")

	require.NoError(t, d.mc.StopJob(ctx, client.JobID(id), dockerRole, d.nodeID))
	h := d.awaitStopped(id)
	require.Equal(t, []managerpb.JobHistoryJobStopping_Reason{managerpb.JobHistoryJobStopping_JOB_STOPPED_USER_REQUESTED}, stoppingReasons(h))
	left := d.leftovers()
	require.Len(t, left, 1, "left %v", left)
	require.Contains(t, left[0], "recordings", "only the stack's named volume stays until the job is deleted")
}
