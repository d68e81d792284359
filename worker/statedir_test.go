//go:build linux || darwin || dragonfly || freebsd || netbsd || openbsd || solaris || illumos

package worker_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/norsk-oss/norsk-manager/worker"
)

func TestLockStateDir_SecondLockFails(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state")
	first, err := worker.LockStateDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(dir, "lock"))
	if err != nil || strings.TrimSpace(string(data)) != fmt.Sprint(os.Getpid()) {
		t.Errorf("lock file holds %q (%v), want this PID %d", data, err, os.Getpid())
	}
	fi, err := os.Stat(dir)
	if err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("state directory mode %v (%v), want 0700", fi.Mode().Perm(), err)
	}

	// A second lock, even in this process, is refused with the holder.
	_, err = worker.LockStateDir(dir)
	var inUse *worker.StateDirInUseError
	if !errors.Is(err, worker.ErrStateDirInUse) || !errors.As(err, &inUse) || inUse.Dir != dir || inUse.PID != os.Getpid() {
		t.Fatalf("second lock: err = %v; want a *StateDirInUseError for %s held by pid %d", err, dir, os.Getpid())
	}
	if want := fmt.Sprintf("in use by another worker (pid %d)", os.Getpid()); !strings.Contains(err.Error(), want) {
		t.Errorf("err = %q; want it to contain %q", err, want)
	}

	if err := first.Release(); err != nil {
		t.Fatal(err)
	}
	if err := first.Release(); err != nil {
		t.Errorf("second Release: %v", err)
	}
	again, err := worker.LockStateDir(dir)
	if err != nil {
		t.Fatalf("lock after Release: %v", err)
	}
	if err := again.Release(); err != nil {
		t.Fatal(err)
	}
}

// TestLockStateDir_ReleasedWhenHolderKilled: a worker killed with SIGKILL
// does not leave its state directory locked.
func TestLockStateDir_ReleasedWhenHolderKilled(t *testing.T) {
	dir := t.TempDir()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, "-test.run=^$")
	cmd.Env = append(os.Environ(), lockHelperEnv+"="+dir)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	defer stdin.Close()
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil || line != "locked\n" {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		t.Fatalf("helper printed %q (%v)", line, err)
	}

	_, err = worker.LockStateDir(dir)
	var inUse *worker.StateDirInUseError
	if !errors.As(err, &inUse) || inUse.PID != cmd.Process.Pid {
		t.Errorf("lock while the helper holds it: err = %v; want a *StateDirInUseError naming pid %d", err, cmd.Process.Pid)
	}

	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait() // "signal: killed"
	l, err := worker.LockStateDir(dir)
	if err != nil {
		t.Fatalf("lock after the holder was killed: %v", err)
	}
	if err := l.Release(); err != nil {
		t.Fatal(err)
	}
}

// TestAgent_StateDirInUse: a second agent over the state directory of a
// running one refuses to start, and starts once the first has stopped.
func TestAgent_StateDirInUse(t *testing.T) {
	dir := t.TempDir()
	rt := newRuntime(t, filepath.Join(dir, "process"))
	ctx1, cancel1 := context.WithCancel(context.Background())
	defer cancel1()
	a1 := newAgent(t, rt, func(c *worker.Config) { c.StateDir = dir })
	done1 := runAgent(ctx1, a1)
	<-a1.Ready()

	a2 := newAgent(t, rt, func(c *worker.Config) { c.StateDir = dir })
	err := a2.Run(context.Background())
	var inUse *worker.StateDirInUseError
	if !errors.Is(err, worker.ErrStateDirInUse) || !errors.As(err, &inUse) || inUse.Dir != dir || inUse.PID != os.Getpid() {
		t.Fatalf("second agent: Run = %v; want a *StateDirInUseError for %s held by pid %d", err, dir, os.Getpid())
	}
	if a2.Addr() != nil {
		t.Errorf("the refused agent listens on %v", a2.Addr())
	}

	cancel1()
	if err := <-done1; err != nil {
		t.Fatal(err)
	}
	a3 := newAgent(t, rt, func(c *worker.Config) { c.StateDir = dir })
	ctx3, cancel3 := context.WithCancel(context.Background())
	done3 := runAgent(ctx3, a3)
	<-a3.Ready()
	cancel3()
	if err := <-done3; err != nil {
		t.Fatalf("agent after the first stopped: %v", err)
	}
}
