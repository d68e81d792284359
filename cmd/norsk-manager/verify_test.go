package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/norsk-oss/norsk-manager/persistence"
)

// storeDir makes a stopped single manager's data dir holding n jobs.
func storeDir(t *testing.T, n int) string {
	t.Helper()
	d := filepath.Join(t.TempDir(), "data")
	cfg := persistence.DefaultConfig(d)
	cfg.Mode, cfg.SyncWrites, cfg.GCInterval = persistence.ModeSingle, false, 0
	s, err := persistence.Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	l := persistence.NewLocalLog(s)
	for i := range n {
		id := strings.Repeat("j", 1+i%5) + string(rune('a'+i%26)) + string(rune('a'+i/26))
		if _, err := l.Append(context.Background(), persistence.JobKey(id), 0, persistence.Change{Record: nil, At: time.Now()}); err != nil {
			t.Fatal(err)
		}
	}
	l.Close()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	return d
}

// runCmd runs norsk-manager with args and returns stdout and the error.
// runStdout runs the daemon command with args and returns its standard
// output (standard error discarded).
func runStdout(args ...string) (string, error) {
	cmd := newCommand()
	var out bytes.Buffer
	cmd.SetArgs(args)
	cmd.SetOut(&out)
	cmd.SetErr(&bytes.Buffer{})
	err := cmd.ExecuteContext(context.Background())
	return out.String(), err
}

// exitCode is the code main exits with for err.
func exitCode(err error) int {
	var ue *usageError
	var ce interface{ ExitCode() int }
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ue):
		return 2
	case errors.As(err, &ce):
		return ce.ExitCode()
	}
	return 1
}

// TestVerifyCommand: verify exits 0 on a sound data dir and prints what it
// checked, 1 on damage naming the file and the way out, 3 when the data dir
// cannot be checked (in use, missing), 2 on bad usage.
func TestVerifyCommand(t *testing.T) {
	d := storeDir(t, 40)
	out, err := runStdout("verify", "--data-dir", d)
	if exitCode(err) != 0 {
		t.Fatalf("sound data dir: exit %d (%v)\n%s", exitCode(err), err, out)
	}
	for _, want := range []string{"data dir " + d, "mode single", "checksums verified", "40 job", "result: sound"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}

	s, err := persistence.Open(persistence.DefaultConfig(d))
	if err != nil {
		t.Fatal(err)
	}
	_, err = runStdout("verify", "--data-dir", d)
	if exitCode(err) != 3 || !strings.Contains(err.Error(), "in use by another manager") {
		t.Errorf("data dir in use: exit %d, %v", exitCode(err), err)
	}
	s.Close()

	ssts, _ := filepath.Glob(filepath.Join(d, "store", "*.sst"))
	if len(ssts) == 0 {
		t.Fatal("no table to damage")
	}
	f, err := os.OpenFile(ssts[0], os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(bytes.Repeat([]byte{0xa5}, 64), 10); err != nil {
		t.Fatal(err)
	}
	f.Close()
	out, err = runStdout("verify", "--data-dir", d)
	if exitCode(err) != 1 {
		t.Fatalf("damaged data dir: exit %d (%v)\n%s", exitCode(err), err, out)
	}
	if !strings.Contains(out, "DAMAGED") || !strings.Contains(out, ssts[0]) || !strings.Contains(err.Error(), "norsk-manager restore") {
		t.Errorf("damage report lacks the file or the advice:\n%s\n%v", out, err)
	}

	if _, err := runStdout("verify", "--data-dir", filepath.Join(t.TempDir(), "none")); exitCode(err) != 3 {
		t.Errorf("missing data dir: exit %d (%v)", exitCode(err), err)
	}
	if _, err := runStdout("verify", "extra"); exitCode(err) != 2 {
		t.Errorf("an argument: exit %d (%v)", exitCode(err), err)
	}
}
