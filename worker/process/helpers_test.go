//go:build linux

package process

import (
	"context"
	"log/slog"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/norsk-oss/norsk-manager/proto/commonpb"
	"github.com/norsk-oss/norsk-manager/proto/workerpb"
	"github.com/norsk-oss/norsk-manager/worker"
)

// waitTimeout bounds every wait in these tests.
const waitTimeout = 10 * time.Second

type collector = worker.Collector

func collect(t *testing.T, r *Runtime) *collector { return worker.Collect(t, r) }

func describe(evs []worker.Event) string { return worker.DescribeEvents(evs) }

// Event predicates.

func isKind(key worker.JobKey, k worker.EventKind) func(worker.Event) bool {
	return func(ev worker.Event) bool { return ev.Key == key && ev.Kind == k }
}

func isOutput(key worker.JobKey, svc, text string) func(worker.Event) bool {
	return func(ev worker.Event) bool {
		ce := ev.Info.GetContainerEvent()
		return ev.Key == key && ce != nil && ce.GetServiceName() == svc && strings.Contains(ce.GetText(), text)
	}
}

func isServiceStarted(key worker.JobKey, svc string) func(worker.Event) bool {
	return func(ev worker.Event) bool {
		return ev.Key == key && ev.Info.GetServiceStarted().GetServiceName() == svc
	}
}

func isRestarting(key worker.JobKey, svc string) func(worker.Event) bool {
	return func(ev worker.Event) bool {
		return ev.Key == key && ev.Info.GetServiceRestarting().GetServiceName() == svc
	}
}

func isStage(key worker.JobKey, stage commonpb.JobInfoComposeMessage_Stage) func(worker.Event) bool {
	return func(ev worker.Event) bool {
		cm := ev.Info.GetComposeMessage()
		return ev.Key == key && cm != nil && cm.GetStage() == stage
	}
}

// testConfig is DevConfig over dir with logs to t.
func testConfig(t *testing.T, dir string) Config {
	cfg := DevConfig()
	cfg.StateDir = dir
	cfg.Environ = os.Environ()
	cfg.Logger = testLogger(t)
	return cfg
}

func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// newTestRuntime returns a restored runtime over dir whose jobs are killed
// and which is shut down when the test ends.
func newTestRuntime(t *testing.T, dir string, mutate func(*Config)) (*Runtime, *collector) {
	t.Helper()
	cfg := testConfig(t, dir)
	if mutate != nil {
		mutate(&cfg)
	}
	r, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	c := collect(t, r)
	t.Cleanup(func() { killAll(t, r) })
	if err := r.Restore(context.Background()); err != nil {
		t.Fatal(err)
	}
	return r, c
}

// killAll stops every job at once and shuts r down.
func killAll(t *testing.T, r *Runtime) {
	for _, rj := range r.List() {
		if err := r.Stop(context.Background(), rj.Key(), 0); err != nil {
			t.Logf("cleanup: stop %s: %v", rj.Key(), err)
		}
	}
	r.Shutdown()
}

func testJob(id string, svcs ...*commonpb.Service) *workerpb.WorkerJob {
	return &workerpb.WorkerJob{JobId: &commonpb.JobId{JobId: id}, Role: "primary", Services: svcs}
}

func svc(name, command string) *commonpb.Service {
	return &commonpb.Service{Name: name, Command: command, Parameters: &commonpb.ServiceParameters{}}
}

func readPID(t *testing.T, path string) int {
	t.Helper()
	var pid int
	waitUntil(t, "pid file "+path, func() bool {
		data, err := os.ReadFile(path)
		if err != nil {
			return false
		}
		lines := strings.Fields(string(data))
		if len(lines) == 0 {
			return false
		}
		pid, err = strconv.Atoi(lines[len(lines)-1])
		return err == nil
	})
	return pid
}

// waitUntil polls cond until it holds or waitTimeout passes.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(waitTimeout)
	ticker := time.NewTicker(10 * time.Millisecond)
	defer ticker.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		<-ticker.C
	}
}

func workDir(r *Runtime, key worker.JobKey) string { return newJobPaths(r.jobsDir, key).work }

func alive(pid int) bool {
	state, _, err := readStat(pid)
	return err == nil && state != 'Z' && state != 'X'
}

func keyOf(id string) worker.JobKey { return worker.JobKey{JobID: worker.JobID(id), Role: "primary"} }

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// ephemeralPort asks the OS for a port free on host for network ("tcp" or
// "udp") now.
func ephemeralPort(network, host string) (uint32, error) {
	if network == "udp" {
		pc, err := net.ListenPacket("udp", net.JoinHostPort(host, "0"))
		if err != nil {
			return 0, err
		}
		defer pc.Close()
		return uint32(pc.LocalAddr().(*net.UDPAddr).Port), nil
	}
	l, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return uint32(l.Addr().(*net.TCPAddr).Port), nil
}
