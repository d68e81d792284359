package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/norsk-oss/norsk-manager/proto/managerpb"
)

// env is what the scenarios share: the settings, a scratch directory and
// the binaries built from this checkout.
type env struct {
	*settings
	scratch string // removed by close unless --keep
	modRoot string
	binDir  string // built binaries, once built
}

func newEnv(ctx context.Context, s *settings) (*env, error) {
	root, err := moduleRoot(ctx)
	if err != nil {
		return nil, err
	}
	scratch, err := os.MkdirTemp(s.workDir, "norsk-bench-")
	if err != nil {
		return nil, fmt.Errorf("create scratch dir under %s: %w", s.workDir, err)
	}
	// A worker running as root runs the jobs as its job user (nobody),
	// which must reach the binaries and the --job-dir next to each state
	// dir.
	if err := os.Chmod(scratch, 0o755); err != nil {
		return nil, fmt.Errorf("open scratch dir %s: %w", scratch, err)
	}
	return &env{settings: s, scratch: scratch, modRoot: root}, nil
}

func (e *env) close() {
	if e.keep {
		fmt.Fprintf(os.Stderr, "bench: kept scratch dir %s\n", e.scratch)
		return
	}
	if err := os.RemoveAll(e.scratch); err != nil {
		fmt.Fprintf(os.Stderr, "bench: remove %s: %v\n", e.scratch, err)
	}
}

// dir returns a fresh directory under the scratch dir, writable by
// everyone (mode 1777, like /tmp): the jobs of a worker running as root
// run as its job user and write their pid files here.
func (e *env) dir(name string) string {
	p, err := os.MkdirTemp(e.scratch, name+"-")
	if err == nil {
		err = os.Chmod(p, 0o1777)
	}
	if err != nil {
		panic(err) // the scratch dir is ours; failing here means the disk is gone
	}
	return p
}

func moduleRoot(ctx context.Context) (string, error) {
	out, err := exec.CommandContext(ctx, "go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w", err)
	}
	mod := strings.TrimSpace(string(out))
	if mod == "" || mod == os.DevNull {
		return "", errors.New("not inside the norsk-manager module: run go run ./test/bench from the repo")
	}
	return filepath.Dir(mod), nil
}

// codeLine names the code measured: the commit and the paths that differ
// from it (other than the bench and its doc).
func codeLine(ctx context.Context, root string) string {
	rev, err := exec.CommandContext(ctx, "git", "-C", root, "rev-parse", "--short", "HEAD").Output()
	if err != nil {
		return "not a git checkout (" + root + ")"
	}
	st, err := exec.CommandContext(ctx, "git", "-C", root, "status", "--porcelain").Output()
	if err != nil {
		return "commit " + strings.TrimSpace(string(rev))
	}
	var dirty []string
	for _, line := range strings.Split(string(st), "\n") {
		if len(line) < 4 {
			continue
		}
		p := line[3:]
		if !strings.HasPrefix(p, "test/bench/") && p != "test/" && p != "docs/benchmarks.md" {
			dirty = append(dirty, p)
		}
	}
	line := "commit " + strings.TrimSpace(string(rev))
	if len(dirty) > 0 {
		line += fmt.Sprintf(" with uncommitted changes in %d path(s): %s", len(dirty), strings.Join(dirty, ", "))
	}
	return line
}

// binaries builds norsk-manager and norsk-ctl once and returns their dir.
func (e *env) binaries(ctx context.Context) (string, error) {
	if e.binDir != "" {
		return e.binDir, nil
	}
	dir := filepath.Join(e.scratch, "bin")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", dir+string(os.PathSeparator), "./cmd/norsk-manager", "./cmd/norsk-ctl")
	cmd.Dir = e.modRoot
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("go build ./cmd/norsk-manager ./cmd/norsk-ctl: %w\n%s", err, stderr.String())
	}
	e.binDir = dir
	return dir, nil
}

// freePort returns a TCP port on 127.0.0.1 that was free a moment ago.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// child is a process started by the bench; its output goes to a log file.
type child struct {
	name string
	cmd  *exec.Cmd
	log  string
	done chan struct{} // closed when the process has exited
	err  error         // exit status, valid once done is closed
}

func startChild(name, logPath, bin string, args ...string) (*child, error) {
	f, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = f, f
	// Die with the bench, even if it is killed.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		f.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	c := &child{name: name, cmd: cmd, log: logPath, done: make(chan struct{})}
	go func() {
		c.err = cmd.Wait()
		f.Close()
		close(c.done)
	}()
	return c, nil
}

// stop sends SIGTERM and waits up to 15 s, then kills.
func (c *child) stop() error {
	select {
	case <-c.done:
		return fmt.Errorf("%s had already exited: %v (log %s)", c.name, c.err, c.log)
	default:
	}
	_ = c.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-c.done:
		return nil
	case <-time.After(15 * time.Second):
		_ = c.cmd.Process.Kill()
		<-c.done
		return fmt.Errorf("%s did not stop within 15 s of SIGTERM; killed", c.name)
	}
}

// tail returns the end of the child's log, for error messages.
func (c *child) tail() string {
	b, _ := os.ReadFile(c.log)
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return string(b)
}

// manager is a norsk-manager process.
type manager struct {
	*child
	addr    string
	dataDir string
}

// startManager runs norsk-manager on dataDir with default durability
// (fsync on) and waits until its API answers. With a profile path it runs
// the same agent in a bench process that writes a CPU profile there when
// stopped. extra flags are given to norsk-manager (not to the profiled
// bench process).
func (e *env) startManager(ctx context.Context, dataDir string, profile string, extra ...string) (*manager, error) {
	m, err := e.launchManager(ctx, dataDir, profile, nil, extra)
	if err != nil {
		return nil, err
	}
	if err := waitAPI(ctx, m.child, m.addr); err != nil {
		_ = m.stop()
		return nil, err
	}
	return m, nil
}

// launchManager starts a manager as startManager does, without waiting for
// its API: extra goes to norsk-manager, serveExtra to the profiled bench
// process (the flags of runServe).
func (e *env) launchManager(ctx context.Context, dataDir, profile string, serveExtra, extra []string) (*manager, error) {
	bin, err := e.binaries(ctx)
	if err != nil {
		return nil, err
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	name, exe := "norsk-manager", filepath.Join(bin, "norsk-manager")
	args := append([]string{"--data-dir", dataDir, "--api-addr", addr, "--log-level", "warn"}, extra...)
	if e.noSync {
		args = append(args, "--unsafe-no-fsync")
	}
	if profile != "" {
		if exe, err = os.Executable(); err != nil {
			return nil, err
		}
		name, args = "bench "+serveCommand, append([]string{serveCommand, "--data-dir", dataDir, "--api-addr", addr, "--cpu-profile", profile,
			fmt.Sprintf("--no-sync=%t", e.noSync), fmt.Sprintf("--no-placement-engine=%t", e.noEngine)}, serveExtra...)
	}
	c, err := startChild(name, dataDir+".log", exe, args...)
	if err != nil {
		return nil, err
	}
	return &manager{child: c, addr: addr, dataDir: dataDir}, nil
}

// waitAPI waits until Version answers on addr (30 s at most).
func waitAPI(ctx context.Context, c *child, addr string) error {
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	api := managerpb.NewManagerClient(conn)
	deadline := time.Now().Add(30 * time.Second)
	for {
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		_, err := api.Version(cctx, &emptypb.Empty{})
		cancel()
		if err == nil {
			return nil
		}
		select {
		case <-c.done:
			return fmt.Errorf("%s exited before serving: %v\n%s", c.name, c.err, c.tail())
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s did not answer on %s within 30 s: %w\n%s", c.name, addr, err, c.tail())
		}
	}
}

// dial opens one gRPC connection (the bench's "one connection per client").
func dial(addr string) (*grpc.ClientConn, managerpb.ManagerClient, error) {
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, nil, err
	}
	conn.Connect()
	return conn, managerpb.NewManagerClient(conn), nil
}
