//go:build linux

package e2e

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
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

// strictCompose is a template whose one service requires STREAM, which
// strictEnv (its .env) does not set.
const (
	strictCompose = `services:
  encoder:
    image: ${PROBE_IMAGE}
    command: ["serve", "--listen", "0.0.0.0:8080"]
    environment:
      STREAM: ${STREAM:?set STREAM to the stream's name}
      GREETING: ${GREETING}
`
	strictEnv = "GREETING=hello from strict\n"
)

// TestE2E_ProductTemplate_FailuresReachTheOperator (issue 14 §3): what
// goes wrong with a template reaches the operator through the manager. A
// job of a template whose required variable nobody sets fails, norsk-ctl
// job get names the variable and the author's message, and nothing is
// left on the engine; so does one whose fixed host port is taken. One
// whose dependency exits before it is healthy fails naming both services,
// leaving only its named volume. A catalogue changed across a worker restart (hello
// 1.0 replaced by 1.1, same state directory) is what the node record and
// norsk-ctl node get show after the new hello, and a StartJob by hand of a
// hello 1.0 job is then refused naming hello (1.1).
func TestE2E_ProductTemplate_FailuresReachTheOperator(t *testing.T) {
	ctx := context.Background()
	catalogue := filepath.Join(t.TempDir(), "catalogue")
	copyTree(t, filepath.Join("..", "..", "examples", "hello-template", "catalogue"), catalogue)
	strict := filepath.Join(catalogue, "strict", "1.0")
	require.NoError(t, os.MkdirAll(strict, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(strict, "compose.yaml"), []byte(strictCompose), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(strict, ".env"), []byte(strictEnv), 0o644))
	d := newDockerCluster(t, "--template-dir", catalogue)
	require.Equal(t, "hello (1.0), strict (1.0)", nodeTemplates(t, d), "the catalogue of the first hello")

	// A required variable nobody sets.
	const id = "tpl-strict"
	d.startJob(&managerpb.Job{JobId: &commonpb.JobId{JobId: id},
		ProductTemplate:           &commonpb.ProductTemplateRef{Name: "strict", Version: "1.0"},
		ProductTemplateParameters: map[string]string{"PROBE_IMAGE": d.image}})
	reason, _ := d.awaitFailed(id)
	t.Logf("failure reason: %s", reason)
	require.Contains(t, reason, "STREAM")
	require.Contains(t, reason, "set STREAM to the stream's name", "the author's message")
	out, code := ctl(t, d.m.addr, "job", "get", id)
	require.Equal(t, 0, code, out)
	t.Logf("norsk-ctl job get %s:\n%s", id, out)
	failures := section(out, "Last failures:")
	require.Contains(t, failures, fmt.Sprintf("%s on node %s", dockerRole, d.nodeID), out)
	require.Contains(t, failures, "STREAM", out)
	require.Contains(t, failures, "set STREAM to the stream's name", out)
	require.Contains(t, section(out, "Instances:"), "(none running)", out)
	require.Empty(t, d.leftovers(), "a job refused for its variables leaves nothing on the engine")

	// The template's fixed host port held by another program: refused
	// before anything is created.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	taken := l.Addr().(*net.TCPAddr).Port
	busy := exampleTemplateJob(t, d, "tpl-busy")
	busy.ProductTemplateParameters["WEB_PORT"] = fmt.Sprint(taken)
	d.startJob(busy)
	reason, _ = d.awaitFailed("tpl-busy")
	t.Logf("failure reason: %s", reason)
	require.Contains(t, reason, fmt.Sprintf(`service "web" container port 8080: tcp port 127.0.0.1:%d is not free`, taken))
	require.Empty(t, d.leftovers(), "a job refused for its port leaves nothing on the engine")

	// api exits before it is healthy, with the stack half started: web
	// never starts, the containers and the network go, the named volume
	// stays for the job's next run (worker-docker-runtime.md §5).
	crash := exampleTemplateJob(t, d, "tpl-crash")
	crash.ProductTemplateParameters["API_PORT"] = "70000"
	d.startJob(crash)
	reason, _ = d.awaitFailed("tpl-crash")
	t.Logf("failure reason: %s", reason)
	require.Contains(t, reason, `service "web": dependency "api" exited with code 1 before it was healthy`)
	seq := d.infoSeq("tpl-crash")
	require.NoError(t, inOrder(seq, "service_started api", "container_event api: exited with code 1"))
	require.Zero(t, count(seq, "service_started web"), "%q", seq)
	out, code = ctl(t, d.m.addr, "job", "get", "tpl-crash")
	require.Equal(t, 0, code, out)
	require.Contains(t, section(out, "Last failures:"), `dependency "api" exited with code 1 before it was healthy`, out)
	left := d.leftovers()
	require.Len(t, left, 1, "left %q", left)
	require.True(t, strings.HasPrefix(left[0], "volume ") && strings.Contains(left[0], "tpl-crash-primary-recordings"), "left %q", left)

	// The catalogue changes across a graceful restart of the worker.
	d.w.Stop()
	require.NoError(t, os.Rename(filepath.Join(catalogue, "hello", "1.0"), filepath.Join(catalogue, "hello", "1.1")))
	d.startWorker()
	testproc.Await(t, 30*time.Second, "the node record holds the new hello's catalogue", func() error {
		if !d.w.Running() {
			t.Fatalf("worker exited with %d:\n%s", d.w.Cmd.ProcessState.ExitCode(), d.w.Output())
		}
		if got := nodeTemplates(t, d); got != "hello (1.1), strict (1.0)" {
			return fmt.Errorf("node get shows %q", got)
		}
		return nil
	})
	d.awaitWorkerOnline()

	old := exampleTemplateJob(t, d, "tpl-old")
	_, err = d.mc.CreateJob(ctx, old)
	require.NoError(t, err)
	err = d.mc.StartJob(ctx, "tpl-old", dockerRole, d.nodeID)
	require.Equal(t, codes.FailedPrecondition, status.Code(err), "StartJob of hello 1.0 after the worker dropped it: %v", err)
	require.Contains(t, err.Error(), fmt.Sprintf("node %s has no product template hello 1.0; it has: hello (1.1), strict (1.0)", d.nodeID))
	r, err := d.mc.JobByID(ctx, client.JobID("tpl-old"))
	require.NoError(t, err)
	require.Empty(t, r.GetInstances(), "a refused start records no instance")
	require.Equal(t, left, d.leftovers(), "a refused start runs nothing")
}

// nodeTemplates is the Templates line of norsk-ctl node get for d's node
// ("hello (1.0), strict (1.0)", "none").
func nodeTemplates(t *testing.T, d *dockerCluster) string {
	t.Helper()
	out, code := ctl(t, d.m.addr, "node", "get", string(d.nodeID))
	require.Equal(t, 0, code, out)
	for _, l := range strings.Split(out, "\n") {
		if v, ok := strings.CutPrefix(l, "Templates:"); ok {
			return strings.TrimSpace(v)
		}
	}
	t.Fatalf("no Templates line in norsk-ctl node get:\n%s", out)
	return ""
}

// section is the indented lines under title in norsk-ctl job get's
// output, "" if there is no such section.
func section(out, title string) string {
	_, rest, ok := strings.Cut(out, "\n"+title+"\n")
	if !ok {
		return ""
	}
	var b strings.Builder
	for _, l := range strings.Split(rest, "\n") {
		if !strings.HasPrefix(l, "  ") {
			break
		}
		b.WriteString(l + "\n")
	}
	return b.String()
}
