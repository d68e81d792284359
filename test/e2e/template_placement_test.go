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
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/norsk-oss/norsk-manager/proto/managerpb"
	"github.com/norsk-oss/norsk-manager/test/dockerenv"
	"github.com/norsk-oss/norsk-manager/test/testproc"
)

// TestE2E_ProductTemplate_PlacementPicksNodeWithTemplate (issue 14 §3):
// one manager and two real Docker workers, one whose catalogue offers
// hello 2.0 only (B, online first) and one offering hello 1.0 (A, joining
// later). An auto-placed job of hello 1.0 waits while only B is there —
// GetPlacement counts B under the product_template filter — and runs on A
// once A joins (both services running, the job_placed decision counting
// B as not fitting). A StartJob by hand of another hello 1.0 job on B is
// FailedPrecondition naming the template and what B has, and nothing ran
// on B. norsk-ctl node list shows each node's catalogue.
func TestE2E_ProductTemplate_PlacementPicksNodeWithTemplate(t *testing.T) {
	ctx := context.Background()
	example := filepath.Join("..", "..", "examples", "hello-template", "catalogue")
	only2 := filepath.Join(t.TempDir(), "catalogue-b")
	copyTree(t, filepath.Join(example, "hello", "1.0"), filepath.Join(only2, "hello", "2.0"))
	b := newDockerCluster(t, "--template-dir", only2)

	auto := exampleTemplateJob(t, b, "tpl-auto")
	auto.AutoPlacement = &managerpb.AutoPlacement{Requirements: &managerpb.JobRequirements{RequiredCapacity: 0.5}}
	_, err := b.mc.CreateJob(ctx, auto)
	require.NoError(t, err)
	const waits = "constraint product_template filtered 1 node (wants hello 1.0; hello in other versions 1)"
	testproc.Await(t, 30*time.Second, "GetPlacement explains why the job waits", func() error {
		p, err := b.mc.GetPlacement(ctx, "tpl-auto")
		require.NoError(t, err)
		for _, r := range p.GetRoles() {
			require.Empty(t, r.GetNodeId(), "placed on a node without hello 1.0")
			if reason := r.GetLastAttempt().GetReason(); strings.Contains(reason, waits) {
				fs := r.GetLastAttempt().GetFilters()
				require.Len(t, fs, 1, "filters %v", fs)
				require.Equal(t, "product_template", fs[0].GetFilter())
				require.EqualValues(t, 1, fs[0].GetNodesRemoved())
				require.EqualValues(t, 1, r.GetLastAttempt().GetNodesEvaluated())
				return nil
			} else if reason != "" {
				return fmt.Errorf("last attempt: %s", reason)
			}
		}
		return fmt.Errorf("no attempt yet: %v", p)
	})

	only1 := filepath.Join(t.TempDir(), "catalogue-a")
	copyTree(t, example, only1)
	a := b.addWorker("docker-worker-a", "--template-dir", only1)
	a.awaitRunning("tpl-auto")
	p, err := b.mc.GetPlacement(ctx, "tpl-auto")
	require.NoError(t, err)
	require.Len(t, p.GetRoles(), 1, "placement %v", p)
	require.Equal(t, string(a.nodeID), p.GetRoles()[0].GetNodeId(), "placed on the node with hello 1.0")
	for _, svc := range []string{"api", "web"} {
		require.True(t, a.inspect("tpl-auto", svc).State.Running, "%s not running on the node with hello 1.0", svc)
	}
	var decision string
	for _, e := range b.ev.Snapshot() {
		if jp := e.GetJobPlaced(); jp.GetJobId().GetJobId() == "tpl-auto" {
			decision = jp.GetDecision()
		}
	}
	t.Logf("job_placed decision: %s", decision)
	require.Contains(t, decision, fmt.Sprintf("on node %s (1 of 2 nodes fit)", a.nodeID), "the job_placed decision")

	manual := exampleTemplateJob(t, b, "tpl-manual")
	_, err = b.mc.CreateJob(ctx, manual)
	require.NoError(t, err)
	err = b.mc.StartJob(ctx, "tpl-manual", dockerRole, b.nodeID)
	require.Equal(t, codes.FailedPrecondition, status.Code(err), "StartJob on the node without hello 1.0: %v", err)
	require.Contains(t, err.Error(), fmt.Sprintf("node %s has no product template hello 1.0; it has: hello (2.0)", b.nodeID))
	r, err := b.mc.JobByID(ctx, "tpl-manual")
	require.NoError(t, err)
	require.Empty(t, r.GetInstances(), "a refused start records no instance")
	require.Empty(t, b.leftovers(), "something ran on the node without hello 1.0")

	out, code := ctl(t, b.m.addr, "node", "list")
	require.Equal(t, 0, code, out)
	t.Logf("norsk-ctl node list:\n%s", out)
	require.Equal(t, "hello(1.0)", tableCell(t, out, string(a.nodeID), "TEMPLATES"), out)
	require.Equal(t, "hello(2.0)", tableCell(t, out, string(b.nodeID), "TEMPLATES"), out)
}

// exampleTemplateJob is the example hello 1.0 job
// (examples/hello-template/job.json) as job id, with the probe image, a
// free port for web and a short warm-up of api.
func exampleTemplateJob(t *testing.T, d *dockerCluster, id string) *managerpb.Job {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("..", "..", "examples", "hello-template", "job.json"))
	require.NoError(t, err)
	job := &managerpb.Job{}
	require.NoError(t, protojson.Unmarshal(raw, job))
	job.JobId.JobId = id
	job.ProductTemplateParameters["PROBE_IMAGE"] = d.image
	job.ProductTemplateParameters["WEB_PORT"] = fmt.Sprint(testproc.FreePort(t))
	job.ProductTemplateParameters["API_WARMUP"] = "1s"
	return job
}

// tableCell returns the cell of column header in the row of a norsk-ctl
// table (tabwriter output: columns start where their header does) whose
// first cell is key, trimmed. It fails t if there is no such row or column.
func tableCell(t *testing.T, table, key, header string) string {
	t.Helper()
	lines := strings.Split(strings.TrimRight(table, "\n"), "\n")
	head := lines[0]
	from := strings.Index(head, " "+header+" ")
	require.GreaterOrEqual(t, from, 0, "no column %s in\n%s", header, table)
	from++
	to := strings.IndexFunc(head[from+len(header):], func(r rune) bool { return r != ' ' })
	require.GreaterOrEqual(t, to, 0, "column %s is the last", header)
	to += from + len(header)
	for _, l := range lines[1:] {
		if f := strings.Fields(l); len(f) > 0 && f[0] == key {
			require.GreaterOrEqual(t, len(l), to, "row %q is short", l)
			return strings.TrimSpace(l[from:to])
		}
	}
	t.Fatalf("no row %s in\n%s", key, table)
	return ""
}

// addWorker starts a further Docker worker on d's manager — its own
// cluster slot (named slot), state directory and listen port, with
// workerArgs added to newDockerCluster's flags — and returns a
// dockerCluster for it sharing d's manager, client, event log and image:
// its startWorker, inspect and leftovers act on the new worker. The new
// worker is killed, and what it left on the engine removed, at cleanup.
func (d *dockerCluster) addWorker(slot string, workerArgs ...string) *dockerCluster {
	t := d.t
	t.Helper()
	w := &dockerCluster{t: t, cli: d.cli, image: d.image, m: d.m, mc: d.mc, ev: d.ev,
		stateDir: filepath.Join(t.TempDir(), slot), wport: testproc.FreePort(t), wargs: workerArgs}
	var err error
	w.nodeID, w.token, err = d.mc.RegisterClusterNode(context.Background(), slot, nil)
	require.NoError(t, err)
	w.startWorker()
	testproc.Await(t, 20*time.Second, "the runtime id of worker "+slot, func() error {
		if !w.w.Running() {
			t.Fatalf("worker %s exited with %d:\n%s", slot, w.w.Cmd.ProcessState.ExitCode(), w.w.Output())
		}
		b, err := os.ReadFile(filepath.Join(w.stateDir, "docker", "runtime-id"))
		if err != nil {
			return err
		}
		if w.rid = strings.TrimSpace(string(b)); len(w.rid) != 16 {
			return fmt.Errorf("runtime-id holds %q", w.rid)
		}
		return nil
	})
	dockerenv.Cleanup(t, d.cli, labelWorker, w.rid)
	t.Cleanup(func() { w.w.Kill() }) // before the removal: see newDockerCluster
	w.awaitWorkerOnline()
	return w
}
