// Package testproc starts and stops real norsk-manager and norsk-ctl
// processes for end-to-end and fault tests: binaries built once per test
// binary, free loopback ports, output captured to files (printed when a
// test fails), SIGKILL and SIGTERM, and HA clusters of managers.
//
// Everything listens on 127.0.0.1.
package testproc

import (
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

var (
	buildOnce sync.Once
	binDir    string
	buildErr  error
)

// Bin returns the directory holding norsk-manager and norsk-ctl, building
// them (go build) on the first call. Call it from TestMain or a test.
func Bin(t testing.TB) string {
	t.Helper()
	buildOnce.Do(func() {
		_, file, _, _ := runtime.Caller(0)
		root := filepath.Join(filepath.Dir(file), "..", "..")
		binDir, buildErr = os.MkdirTemp("", "norsk-testproc-bin-")
		if buildErr != nil {
			return
		}
		// Jobs run norsk-ctl (demo http) as the worker's job user, not
		// root: the directory must be searchable by everyone.
		if buildErr = os.Chmod(binDir, 0o755); buildErr != nil {
			return
		}
		cmd := exec.Command("go", "build", "-o", binDir+string(os.PathSeparator), "./cmd/norsk-manager", "./cmd/norsk-ctl")
		cmd.Dir = root
		out, err := cmd.CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binDir
}

// Proc is a process under test.
type Proc struct {
	t    testing.TB
	Name string
	Cmd  *exec.Cmd
	Log  string
	done chan struct{}
}

// Start runs bin (norsk-manager or norsk-ctl) with args. Its output goes
// to a log file printed if the test fails; it is SIGKILLed at cleanup.
func Start(t testing.TB, name, bin string, args ...string) *Proc {
	t.Helper()
	return StartWith(t, name, bin, nil, args...)
}

// StartWith is Start with a hook that may adjust the command before it
// starts (e.g. set SysProcAttr.Credential to run it as another user, or
// add to Env); nil is Start.
func StartWith(t testing.TB, name, bin string, setup func(*exec.Cmd), args ...string) *Proc {
	t.Helper()
	dir := Bin(t)
	logPath := filepath.Join(t.TempDir(), name+".log")
	f, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(filepath.Join(dir, bin), args...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.Env = append(os.Environ(), "PATH="+dir+string(os.PathListSeparator)+os.Getenv("PATH"))
	if setup != nil {
		setup(cmd)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	p := &Proc{t: t, Name: name, Cmd: cmd, Log: logPath, done: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		f.Close()
		close(p.done)
	}()
	t.Cleanup(func() {
		p.Kill()
		if t.Failed() {
			b, _ := os.ReadFile(logPath)
			t.Logf("---- %s log ----\n%s", name, tail(b, 200<<10))
		}
	})
	return p
}

func tail(b []byte, n int) []byte {
	if len(b) > n {
		return append([]byte("…\n"), b[len(b)-n:]...)
	}
	return b
}

// Kill sends SIGKILL and waits for the process to end.
func (p *Proc) Kill() {
	select {
	case <-p.done:
		return
	default:
	}
	_ = p.Cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
}

// Stop sends SIGTERM and waits up to 30 s (then SIGQUIT for a goroutine
// dump in the log, and SIGKILL, failing the test). A graceful stop must exit 0: any other code fails the test.
func (p *Proc) Stop() {
	if !p.Running() {
		return
	}
	_ = p.Cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
		if code := p.Cmd.ProcessState.ExitCode(); code != 0 {
			p.t.Errorf("%s exited with code %d after SIGTERM (a graceful stop must exit 0)", p.Name, code)
		}
	case <-time.After(30 * time.Second):
		p.t.Errorf("%s did not exit within 30 s of SIGTERM (its goroutines, dumped by SIGQUIT, end its log)", p.Name)
		// A hung stop is a bug to find: the Go runtime answers SIGQUIT
		// with every goroutine's stack on stderr (the log) and exits.
		_ = p.Cmd.Process.Signal(syscall.SIGQUIT)
		select {
		case <-p.done:
		case <-time.After(5 * time.Second):
		}
		p.Kill()
	}
}

// Exited waits up to timeout for the process to exit and returns its code.
func (p *Proc) Exited(timeout time.Duration) (int, bool) {
	select {
	case <-p.done:
		return p.Cmd.ProcessState.ExitCode(), true
	case <-time.After(timeout):
		return 0, false
	}
}

// Running reports whether the process has not exited.
func (p *Proc) Running() bool {
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// Output returns what the process printed so far.
func (p *Proc) Output() string {
	b, _ := os.ReadFile(p.Log)
	return string(b)
}

// handedOut holds every port FreePort returned in this process: the probe
// listener is closed before the port is used, so the kernel may offer the
// same port again to the next call (seen: a cluster whose m4 gossip port
// was m5's API port).
var handedOut struct {
	sync.Mutex
	ports map[int]bool
}

// Ports FreePort hands out lie below the kernel's default ephemeral range
// (net.ipv4.ip_local_port_range, 32768-60999): a port the kernel offers
// for listen(":0") is one it also offers as the source port of outgoing
// connections, so a port probed that way and closed can be taken by any
// connection of a concurrently running test package before the test binds
// it (seen in CI: "bind: address already in use" for a Raft address).
const freePortLo, freePortHi = 20000, 32767

// FreePort returns a loopback TCP port that was free a moment ago (also
// checked free for UDP, for gossip), outside the ephemeral range, and that
// no earlier call in this process returned.
func FreePort(t testing.TB) int {
	t.Helper()
	handedOut.Lock()
	defer handedOut.Unlock()
	if handedOut.ports == nil {
		handedOut.ports = map[int]bool{}
	}
	for range 200 {
		port := freePortLo + rand.IntN(freePortHi-freePortLo+1)
		if handedOut.ports[port] {
			continue
		}
		l, err := net.Listen("tcp", Addr(port))
		if err != nil {
			continue
		}
		u, err := net.ListenPacket("udp", Addr(port))
		l.Close()
		if err == nil {
			u.Close()
			handedOut.ports[port] = true
			return port
		}
	}
	t.Fatal("no free port")
	return 0
}

// Addr returns 127.0.0.1:port.
func Addr(port int) string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(port)) }

// Eventually polls cond every 50 ms until it holds, failing the test after
// timeout.
func Eventually(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Serving reports whether the gRPC health service at addr answers SERVING.
func Serving(addr string) bool { return ServingTLS(addr, nil) }

// ServingTLS is Serving over TLS with cfg (nil: plaintext), for a manager
// started with --tls-cert.
func ServingTLS(addr string, cfg *tls.Config) bool {
	creds := insecure.NewCredentials()
	if cfg != nil {
		creds = credentials.NewTLS(cfg)
	}
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(creds))
	if err != nil {
		return false
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	r, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
	return err == nil && r.GetStatus() == healthpb.HealthCheckResponse_SERVING
}

// KillProcessesMentioning SIGKILLs every process (with its process group)
// whose command line contains marker, e.g. a test's temporary directory:
// job processes outlive their worker by design.
func KillProcessesMentioning(marker string) {
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
			_ = syscall.Kill(-pid, syscall.SIGKILL)
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}

// PIDAlive reports whether pid is a live process.
func PIDAlive(pid int) bool { return syscall.Kill(pid, 0) == nil }
