//go:build linux

package process

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

func spawnSleeper(t *testing.T) *proc {
	t.Helper()
	dir := t.TempDir()
	p, err := spawn("/bin/sh", "exec sleep 30", dir, os.Environ(),
		filepath.Join(dir, "out"), filepath.Join(dir, "err"), filepath.Join(dir, "exit"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if p.startTicks == 0 {
		t.Fatal("no start time recorded")
	}
	return p
}

// waitAndCollect waits for p to exit and returns its status.
func waitAndCollect(t *testing.T, p *proc) exitStatus {
	t.Helper()
	done := make(chan struct{})
	stop := make(chan struct{})
	defer close(stop)
	timer := time.AfterFunc(waitTimeout, func() { close(done) })
	defer timer.Stop()
	if !p.waitExit(stop, done, -1, 10*time.Millisecond) {
		t.Fatal("process did not exit in time")
	}
	return p.collect()
}

func TestProc_WaitExit_WithoutPidfd(t *testing.T) {
	p := spawnSleeper(t)
	p.closePidfd() // as on a kernel without pidfd
	p.waitStarted(p.done, waitTimeout)
	if err := p.signalGroup(sigTerm); err != nil {
		t.Fatal(err)
	}
	if got := waitAndCollect(t, p).String(); got != "killed by signal SIGTERM" {
		t.Errorf("status %q", got)
	}
}

func TestProc_WaitExit_Pidfd(t *testing.T) {
	p := spawnSleeper(t)
	if p.pidfd < 0 {
		t.Skip("pidfd_open is not available")
	}
	if err := p.signalGroup(sigKill); err != nil {
		t.Fatal(err)
	}
	if got := waitAndCollect(t, p).String(); got != "killed by signal SIGKILL" {
		t.Errorf("status %q", got)
	}
}

func TestProc_Adopt_RejectsReusedPID(t *testing.T) {
	p := spawnSleeper(t)
	defer func() {
		_ = p.signalGroup(sigKill)
		waitAndCollect(t, p)
	}()
	if _, ok := adopt(p.pid, p.startTicks+1, p.exitFile); ok {
		t.Error("adopted a process whose start time differs from the record")
	}
	q, ok := adopt(p.pid, p.startTicks, p.exitFile)
	if !ok {
		t.Fatal("did not adopt the live process")
	}
	q.closePidfd()
	if _, ok := adopt(0, 0, p.exitFile); ok {
		t.Error("adopted pid 0")
	}
}
