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
	"google.golang.org/protobuf/proto"

	"github.com/norsk-oss/norsk-manager/client"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
	"github.com/norsk-oss/norsk-manager/test/testproc"
)

// TestE2E_DefinitionDrift (issue 13 §2): a web job runs on a real worker.
// An UpdateJob of nothing the worker runs (its description) leaves the
// instance current; one of its command leaves the process running (the
// default update strategy, in place) and JobById — through a manager
// SIGKILLed and restarted — says the instance runs the previous hash,
// as do `norsk-ctl job get` and a definition_drift event. StopJob then StartJob runs the new
// command (it writes a marker file the old one never wrote) and the
// drift is gone.
func TestE2E_DefinitionDrift(t *testing.T) {
	ctx := context.Background()
	s := newWebSetup(t)
	get := func() (*managerpb.Job, *managerpb.RunningJob) {
		t.Helper()
		r, err := s.mc.JobByID(ctx, "web")
		require.NoError(t, err)
		require.Len(t, r.GetInstances(), 1)
		return r.GetJob().GetJob(), r.GetInstances()[0]
	}
	update := func(change func(j *managerpb.Job)) int64 {
		t.Helper()
		j, _ := get()
		j = proto.Clone(j).(*managerpb.Job)
		change(j)
		h, err := s.mc.UpdateJob(ctx, j)
		require.NoError(t, err)
		return h
	}

	j, in := get()
	require.Equal(t, j.GetCurrentHash(), in.GetDefinitionHash(), "the start recorded the hash it ran")
	require.False(t, in.GetDefinitionStale())

	h1 := update(func(j *managerpb.Job) { j.Description = "renamed" })
	_, in = get()
	require.Equal(t, h1, in.GetDefinitionHash(), "a new description changes nothing the worker runs")
	require.False(t, in.GetDefinitionStale())

	marker := filepath.Join(t.TempDir(), "v2")
	h2 := update(func(j *managerpb.Job) {
		j.Services[0].Command = fmt.Sprintf("echo v2 > %s; %s", marker, j.Services[0].Command)
	})
	_, in = get()
	require.Equal(t, h1, in.GetDefinitionHash())
	require.True(t, in.GetDefinitionStale())
	s.jobStillRunning(t, "after the update (in place)")
	testproc.Eventually(t, 10*time.Second, "definition_drift on the event stream", func() bool {
		return s.ev.Has(func(ev *managerpb.EventStreamEvent) bool {
			d := ev.GetDefinitionDrift()
			return d.GetCurrentHash() == h2 && len(d.GetInstances()) == 1 &&
				strings.HasSuffix(d.GetMessage(), fmt.Sprintf("runs definition hash %d; current %d: restart or migrate to apply", h1, h2))
		})
	})

	// The drift is in the record: a SIGKILLed manager still reports it.
	s.m.Kill()
	s.m = startManager(t, s.managerDataDir, s.managerPort)
	s.mc = connect(t, s.m.addr)
	_, in = get()
	require.Equal(t, h1, in.GetDefinitionHash(), "after the manager's SIGKILL")
	require.True(t, in.GetDefinitionStale())

	out, code := ctl(t, s.m.addr, "job", "get", "web")
	require.Zero(t, code, out)
	want := fmt.Sprintf("primary on node %s: runs definition hash %d; current %d: restart or migrate to apply", s.nodeID, h1, h2)
	require.Contains(t, out, want)
	_, err := os.Stat(marker)
	require.True(t, os.IsNotExist(err), "the running process never ran the new command")

	require.NoError(t, s.mc.StopJob(ctx, "web", "primary", client.NodeID(s.nodeID)))
	testproc.Eventually(t, 30*time.Second, "the instance stopped", func() bool {
		r, err := s.mc.JobByID(ctx, "web")
		return err == nil && len(r.GetInstances()) == 0
	})
	require.NoError(t, s.mc.StartJob(ctx, "web", "primary", client.NodeID(s.nodeID)))
	testproc.Eventually(t, 30*time.Second, "the new command ran", func() bool {
		_, err := os.Stat(marker)
		return err == nil
	})
	_, in = get()
	require.Equal(t, h2, in.GetDefinitionHash(), "the restart runs the current definition")
	require.False(t, in.GetDefinitionStale())
	out, code = ctl(t, s.m.addr, "job", "get", "web")
	require.Zero(t, code, out)
	require.False(t, strings.Contains(out, "runs definition hash"), "no drift after the restart:\n%s", out)
}
