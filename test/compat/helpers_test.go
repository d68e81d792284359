package compat_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// npmInstall guards the one `npm ci` of a test run.
var npmInstall struct {
	once sync.Once
	err  error
}

// requireNodeModules skips the test if node or npm is not installed, and
// otherwise makes sure node_modules holds what package-lock.json pins,
// running `npm ci` once if it is missing or older than the lockfile.
func requireNodeModules(t *testing.T) {
	t.Helper()
	for _, tool := range []string{"node", "npm"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s is not installed (%v): the compatibility tests against @norskvideo/norsk-api@1.0.384 need node >= 20 and npm", tool, err)
		}
	}
	npmInstall.once.Do(func() {
		if nodeModulesFresh() {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, "npm", "ci", "--ignore-scripts", "--no-audit", "--no-fund")
		cmd.WaitDelay = 5 * time.Second
		if out, err := cmd.CombinedOutput(); err != nil {
			npmInstall.err = fmt.Errorf("npm ci in test/compat: %w\n%s", err, out)
		}
	})
	if npmInstall.err != nil {
		t.Fatal(npmInstall.err)
	}
}

// nodeModulesFresh reports whether npm has installed node_modules since
// package-lock.json last changed (npm writes node_modules/.package-lock.json
// on every install).
func nodeModulesFresh() bool {
	lock, err := os.Stat("package-lock.json")
	if err != nil {
		return false
	}
	installed, err := os.Stat(filepath.Join("node_modules", ".package-lock.json"))
	return err == nil && !installed.ModTime().Before(lock.ModTime())
}

// runNode runs `node args...` in this directory and returns its combined
// output; err is non-nil if it exits non-zero or is killed after timeout.
func runNode(timeout time.Duration, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "node", args...)
	cmd.WaitDelay = 5 * time.Second
	out, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		err = fmt.Errorf("killed after %s: %w", timeout, err)
	}
	return string(out), err
}

// exitCode returns the exit status in err from runNode, or -1.
func exitCode(err error) int {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode()
	}
	return -1
}

// logLines logs every line of out, prefixed.
func logLines(t *testing.T, prefix, out string) {
	t.Helper()
	for _, line := range strings.Split(strings.TrimRight(out, "\n"), "\n") {
		t.Logf("%s%s", prefix, line)
	}
}

// buildBinaries builds cmd/norsk-manager and cmd/norsk-ctl into a temporary
// directory (with -race if the tests run with it) and returns their paths.
func buildBinaries(t *testing.T) (manager, ctl string) {
	t.Helper()
	dir := t.TempDir()
	args := []string{"build", "-o", dir + string(filepath.Separator)}
	if raceEnabled {
		args = append(args, "-race")
	}
	args = append(args, "github.com/norsk-oss/norsk-manager/cmd/norsk-manager", "github.com/norsk-oss/norsk-manager/cmd/norsk-ctl")
	if out, err := exec.Command("go", args...).CombinedOutput(); err != nil {
		t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return filepath.Join(dir, "norsk-manager"), filepath.Join(dir, "norsk-ctl")
}

// freeAddr returns a 127.0.0.1 address whose port was free a moment ago.
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen on 127.0.0.1:0: %v", err)
	}
	defer l.Close()
	return l.Addr().String()
}

// process is a started binary whose output goes to a log file.
type process struct {
	name string
	log  string
	// exited is closed once the process has exited; err is set before.
	exited chan struct{}
	err    error
}

// output returns what the process has written so far.
func (p *process) output() string {
	b, err := os.ReadFile(p.log)
	if err != nil {
		return fmt.Sprintf("(cannot read %s: %v)", p.log, err)
	}
	return string(b)
}

// exitedError returns a description of the process's exit with its output
// if it has exited, or nil.
func (p *process) exitedError() error {
	select {
	case <-p.exited:
		return fmt.Errorf("%s exited early (%v); its output:\n%s", p.name, p.err, p.output())
	default:
		return nil
	}
}

// startProcess starts bin with args. t.Cleanup kills it (SIGKILL), waits
// for it, fails the test if the race detector reported a race in it, and
// logs its output if the test failed.
func startProcess(t *testing.T, name, bin string, args ...string) *process {
	t.Helper()
	p := &process{name: name, log: filepath.Join(t.TempDir(), name+".log"), exited: make(chan struct{})}
	f, err := os.Create(p.log)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = f, f
	err = cmd.Start()
	f.Close() // the child has its own descriptor
	if err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	go func() {
		p.err = cmd.Wait()
		close(p.exited)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-p.exited
		out := p.output()
		switch {
		case strings.Contains(out, "WARNING: DATA RACE"):
			t.Errorf("the race detector found a data race in %s (%s):\n%s", name, strings.Join(cmd.Args, " "), out)
		case t.Failed():
			t.Logf("--- output of %s (%s):\n%s", name, strings.Join(cmd.Args, " "), out)
		}
	})
	return p
}

// waitFor polls cond every 20 ms until it reports done, failing the test
// after timeout with what and cond's last explanation. Any of watched
// exiting fails the test at once.
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() (done bool, why string), watched ...*process) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		done, why := cond()
		if done {
			return
		}
		for _, p := range watched {
			if err := p.exitedError(); err != nil {
				t.Fatalf("waiting for %s: %v", what, err)
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s: %s", timeout, what, why)
		}
		time.Sleep(20 * time.Millisecond) // polling interval, not synchronisation
	}
}
