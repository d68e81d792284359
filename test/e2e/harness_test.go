package e2e

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/norsk-oss/norsk-manager/test/testproc"
)

func TestMain(m *testing.M) {
	code := m.Run()
	testproc.RemoveBin()
	os.Exit(code)
}

// start runs args[0] (norsk-manager or norsk-ctl) with args[1:] through
// testproc.Start: its log is printed if the test fails, and it is
// SIGKILLed at cleanup.
func start(t *testing.T, name string, args ...string) *testproc.Proc {
	t.Helper()
	return testproc.Start(t, name, args[0], args[1:]...)
}

// manager is a norsk-manager process.
type manager struct {
	*testproc.Proc
	dataDir string
	addr    string
}

func startManager(t *testing.T, dataDir string, port int, extra ...string) *manager {
	t.Helper()
	args := append([]string{"norsk-manager", "--data-dir", dataDir, "--api-addr", testproc.Addr(port), "--log-level", "debug"}, extra...)
	m := &manager{Proc: start(t, "manager", args...), dataDir: dataDir, addr: testproc.Addr(port)}
	waitServing(t, m)
	return m
}

// waitServing polls grpc.health.v1 until the manager serves.
func waitServing(t *testing.T, m *manager) {
	t.Helper()
	testproc.Eventually(t, 30*time.Second, "manager serving on "+m.addr, func() bool {
		if !m.Running() {
			t.Fatalf("manager exited with %d:\n%s", m.Cmd.ProcessState.ExitCode(), m.Output())
		}
		return testproc.Serving(m.addr)
	})
}

func startWorker(t *testing.T, token, managerAddr, stateDir string, port int) *testproc.Proc {
	t.Helper()
	// Registered before start's own cleanup, so it runs after the worker
	// is killed: job processes outlive their worker by design, and a test
	// must not leave them behind.
	t.Cleanup(func() { testproc.KillProcessesMentioning(stateDir) })
	testproc.OpenTempDirs(t, filepath.Dir(stateDir)) // the job user reaches --job-dir
	args := []string{"norsk-ctl", "--mode=worker", "--listen", testproc.Addr(port), "--state-dir", stateDir, "--log-level", "debug", "--stop-grace", "3s", "--dial-back-timeout", "3s"}
	if token != "" {
		args = append(args, "--token", token, "--manager-url", managerAddr)
	}
	return start(t, "worker", args...)
}

// ctl runs a norsk-ctl command and returns its output and exit code.
func ctl(t *testing.T, managerAddr string, args ...string) (string, int) {
	t.Helper()
	cmd := exec.Command(filepath.Join(testproc.Bin(t), "norsk-ctl"), append([]string{"--manager-url", managerAddr}, args...)...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("norsk-ctl %v: %v", args, err)
	}
	return out.String(), code
}
