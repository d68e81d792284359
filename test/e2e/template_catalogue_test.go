//go:build linux

package e2e

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/norsk-oss/norsk-manager/test/dockerenv"
	"github.com/norsk-oss/norsk-manager/test/testproc"
)

// TestE2E_ProductTemplate_WorkerCatalogue (issue 14 §1, the worker's
// half): a real Docker worker started with --template-dir over the
// example catalogue plus a version using a refused key. The worker starts,
// logs the refused version naming the file and the key path, and its
// hello carries the catalogue without it: the manager's ListNodes shows
// hello 1.0 in the node's resources.
func TestE2E_ProductTemplate_WorkerCatalogue(t *testing.T) {
	dockerenv.Client(t) // the Docker runtime needs an engine (skips without one)
	ctx := context.Background()
	catalogue := filepath.Join(t.TempDir(), "catalogue")
	copyTree(t, filepath.Join("..", "..", "examples", "hello-template", "catalogue"), catalogue)
	bad := filepath.Join(catalogue, "hello", "0.9")
	require.NoError(t, os.MkdirAll(bad, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(bad, "compose.yaml"),
		[]byte("services:\n  web:\n    image: example/probe:1\n    privileged: true\n"), 0o644))

	m := startManager(t, filepath.Join(t.TempDir(), "data"), testproc.FreePort(t))
	mc := connect(t, m.addr)
	nodeID, token, err := mc.RegisterClusterNode(ctx, "templates", nil)
	require.NoError(t, err)
	stateDir := filepath.Join(t.TempDir(), "worker")
	t.Cleanup(func() { testproc.KillProcessesMentioning(stateDir) })
	w := start(t, "worker", "norsk-ctl", "--mode=worker", "--runtime=docker", "--docker-network=host",
		"--template-dir", catalogue, "--manager-url", m.addr, "--listen", testproc.Addr(testproc.FreePort(t)),
		"--state-dir", stateDir, "--log-level", "debug", "--token", token)

	testproc.Eventually(t, 30*time.Second, "the node reports hello 1.0", func() bool {
		if !w.Running() {
			t.Fatalf("worker exited with %d:\n%s", w.Cmd.ProcessState.ExitCode(), w.Output())
		}
		nodes, err := mc.ListNodes(ctx)
		require.NoError(t, err)
		for _, n := range nodes {
			if n.GetMetadata().GetNodeId().GetNodeId() != string(nodeID) {
				continue
			}
			ts := n.GetResources().GetTemplates()
			if len(ts) == 0 {
				return false
			}
			require.Len(t, ts, 1, "templates %v", ts)
			require.Equal(t, "hello", ts[0].GetName())
			require.Equal(t, []string{"1.0"}, ts[0].GetVersions(), "the refused 0.9 is not offered")
			return true
		}
		return false
	})
	out := w.Output()
	require.Contains(t, out, "template version refused")
	require.Contains(t, out, "key=services.web.privileged")
	require.True(t, strings.Contains(out, filepath.Join("hello", "0.9", "compose.yaml")), "the refusal names the file:\n%s", out)
}

// copyTree copies the regular files under src into dst.
func copyTree(t *testing.T, src, dst string) {
	t.Helper()
	err := filepath.WalkDir(src, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, p)
		if err != nil {
			return err
		}
		if d.IsDir() {
			return os.MkdirAll(filepath.Join(dst, rel), 0o755)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dst, rel), b, 0o644)
	})
	require.NoError(t, err)
}
