package e2e

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/norsk-oss/norsk-manager/test/testproc"
)

// binDir holds norsk-manager and norsk-ctl, built once by TestMain.
var binDir string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "norsk-e2e-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	build := exec.Command("go", "build", "-o", dir+string(os.PathSeparator), "../../cmd/norsk-manager", "../../cmd/norsk-ctl")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "build binaries:", err)
		os.Exit(1)
	}
	binDir = dir
	code := m.Run()
	os.RemoveAll(dir)
	testproc.RemoveBin()
	os.Exit(code)
}

// proc is a process under test: its output goes to a log file that is
// printed when the test fails.
type proc struct {
	t    *testing.T
	name string
	cmd  *exec.Cmd
	log  string
	done chan struct{}
	mu   sync.Mutex
	err  error
}

func start(t *testing.T, name string, args ...string) *proc {
	t.Helper()
	logPath := filepath.Join(t.TempDir(), name+".log")
	f, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(filepath.Join(binDir, args[0]), args[1:]...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.Env = append(os.Environ(), "PATH="+binDir+string(os.PathListSeparator)+os.Getenv("PATH"))
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	p := &proc{t: t, name: name, cmd: cmd, log: logPath, done: make(chan struct{})}
	go func() {
		err := cmd.Wait()
		f.Close()
		p.mu.Lock()
		p.err = err
		p.mu.Unlock()
		close(p.done)
	}()
	t.Cleanup(func() {
		p.kill()
		if t.Failed() {
			b, _ := os.ReadFile(logPath)
			t.Logf("---- %s log ----\n%s", name, b)
		}
	})
	return p
}

// kill sends SIGKILL and waits for the process to end.
func (p *proc) kill() {
	select {
	case <-p.done:
		return
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
}

// stop sends SIGTERM and waits up to 20 s for a clean exit.
func (p *proc) stop() {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(20 * time.Second):
		p.t.Errorf("%s did not exit on SIGTERM within 20s", p.name)
		p.kill()
	}
}

// exited waits for the process to exit on its own and returns its code.
func (p *proc) exited(timeout time.Duration) (int, bool) {
	select {
	case <-p.done:
		return p.cmd.ProcessState.ExitCode(), true
	case <-time.After(timeout):
		return 0, false
	}
}

func (p *proc) output() string {
	b, _ := os.ReadFile(p.log)
	return string(b)
}

// freePort returns a loopback port that was free a moment ago.
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func addr(port int) string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(port)) }

// manager is a norsk-manager process.
type manager struct {
	*proc
	dataDir string
	addr    string
}

func startManager(t *testing.T, dataDir string, port int, extra ...string) *manager {
	t.Helper()
	args := append([]string{"norsk-manager", "--data-dir", dataDir, "--api-addr", addr(port), "--log-level", "debug"}, extra...)
	m := &manager{proc: start(t, "manager", args...), dataDir: dataDir, addr: addr(port)}
	waitServing(t, m)
	return m
}

// waitServing polls grpc.health.v1 until the manager serves.
func waitServing(t *testing.T, m *manager) {
	t.Helper()
	conn, err := grpc.NewClient(m.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	h := healthpb.NewHealthClient(conn)
	eventually(t, 30*time.Second, "manager serving on "+m.addr, func() bool {
		if code, ok := m.exitedNow(); ok {
			t.Fatalf("manager exited with %d:\n%s", code, m.output())
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		r, err := h.Check(ctx, &healthpb.HealthCheckRequest{})
		return err == nil && r.GetStatus() == healthpb.HealthCheckResponse_SERVING
	})
}

func (p *proc) exitedNow() (int, bool) {
	select {
	case <-p.done:
		return p.cmd.ProcessState.ExitCode(), true
	default:
		return 0, false
	}
}

func startWorker(t *testing.T, token, managerAddr, stateDir string, port int) *proc {
	t.Helper()
	// Registered before start's own cleanup, so it runs after the worker
	// is killed: job processes outlive their worker by design, and a test
	// must not leave them behind.
	t.Cleanup(func() { killProcessesMentioning(stateDir) })
	args := []string{"norsk-ctl", "--mode=worker", "--listen", addr(port), "--state-dir", stateDir, "--log-level", "debug", "--stop-grace", "3s", "--dial-back-timeout", "3s"}
	if token != "" {
		args = append(args, "--token", token, "--manager-url", managerAddr)
	}
	return start(t, "worker", args...)
}

// ctl runs a norsk-ctl command and returns its output and exit code.
func ctl(t *testing.T, managerAddr string, args ...string) (string, int) {
	t.Helper()
	cmd := exec.Command(filepath.Join(binDir, "norsk-ctl"), append([]string{"--manager-url", managerAddr}, args...)...)
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

func eventually(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// pidAlive reports whether pid is a live process.
func pidAlive(pid int) bool { return syscall.Kill(pid, 0) == nil }

// readPID reads a pid file written by a test service.
func readPID(path string) (int, bool) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, false
	}
	pid, err := strconv.Atoi(string(bytes.TrimSpace(b)))
	return pid, err == nil && pid > 0
}

// killProcessesMentioning SIGKILLs every process whose command line
// contains marker (a test's own temporary directory), with its process
// group.
func killProcessesMentioning(marker string) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return
	}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err == nil && bytes.Contains(cmdline, []byte(marker)) {
			// Services run as process-group leaders (the worker's wrapper
			// shell): take the whole group.
			_ = syscall.Kill(-pid, syscall.SIGKILL)
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}
