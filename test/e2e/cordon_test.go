package e2e

import (
	"context"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/norsk-oss/norsk-manager/test/testproc"
)

// TestE2E_CordonDrain_SurviveManagerKill: a node with a real worker is
// drained through norsk-ctl, and the manager process is SIGKILLed right
// after the acknowledgement: started again on its data directory, it
// shows the node draining with the reason, and its worker back. Cordon
// (the drain stops) and uncordon each hold across a kill as well, and a
// repeated cordon is accepted.
func TestE2E_CordonDrain_SurviveManagerKill(t *testing.T) {
	ctx := context.Background()
	port := testproc.FreePort(t)
	m := startManager(t, filepath.Join(t.TempDir(), "data"), port)
	mc := connect(t, m.addr)
	nodeID, token, err := mc.RegisterClusterNode(ctx, "rack-1", nil)
	require.NoError(t, err)
	id := string(nodeID)
	stateDir := filepath.Join(t.TempDir(), "worker")
	t.Cleanup(func() { testproc.KillProcessesMentioning(stateDir) })
	start(t, "worker", "norsk-ctl", "--mode=worker", "--manager-url", m.addr, "--listen", testproc.Addr(testproc.FreePort(t)),
		"--state-dir", stateDir, "--token", token, "--dial-back-timeout", "3s")
	testproc.Eventually(t, 20*time.Second, "worker online", func() bool { return nodeConnected(t, mc, id) })

	run := func(args ...string) string {
		t.Helper()
		out, code := ctl(t, m.addr, args...)
		require.Equal(t, 0, code, "norsk-ctl %s:\n%s", strings.Join(args, " "), out)
		return out
	}
	killAndRestart := func() {
		t.Helper()
		m.Kill()
		m = startManager(t, m.dataDir, port)
	}
	steps := []struct {
		args    []string
		printed string
		state   string
		get     *regexp.Regexp
	}{
		{[]string{"node", "drain", id, "--reason", "kernel update"}, "draining", "started,draining",
			regexp.MustCompile(`(?m)^Scheduling: draining \S+ ago by 127\.0\.0\.1:\d+: kernel update$`)},
		{[]string{"node", "cordon", id}, "cordoned", "started,cordoned",
			regexp.MustCompile(`(?m)^Scheduling: cordoned \S+ ago by 127\.0\.0\.1:\d+$`)},
		{[]string{"node", "cordon", id, "--reason", "repeat"}, "cordoned", "started,cordoned",
			regexp.MustCompile(`(?m)^Scheduling: cordoned \S+ ago by 127\.0\.0\.1:\d+$`)},
		{[]string{"node", "uncordon", id}, "uncordoned", "started",
			regexp.MustCompile(`(?m)^Scheduling: eligible since \S+ ago by 127\.0\.0\.1:\d+$`)},
	}
	row := func(state string) *regexp.Regexp {
		return regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(id) + `\s+cluster\s+` + regexp.QuoteMeta(state) + `\s+yes\s`)
	}
	for _, s := range steps {
		require.Contains(t, run(s.args...), "node "+id+" "+s.printed)
		killAndRestart()
		testproc.Eventually(t, 30*time.Second, "worker back after the restart", func() bool { return nodeConnected(t, mc, id) })
		require.Regexp(t, row(s.state), run("node", "list"), "after %v and a SIGKILL", s.args)
		require.Regexp(t, s.get, run("node", "get", id), "after %v and a SIGKILL", s.args)
	}
}
