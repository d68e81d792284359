package main

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/norsk-oss/norsk-manager/client/clienttest"
)

// ctlTestNow is the clock of the fake manager and of norsk-ctl in tests.
var ctlTestNow = time.Date(2026, 5, 4, 12, 0, 0, 0, time.UTC)

// ctlResult is the outcome of one norsk-ctl run.
type ctlResult struct {
	stdout, stderr string
	code           int
}

// newTestFake serves a fake manager with the test clock.
func newTestFake(t *testing.T) (*clienttest.Manager, string) {
	t.Helper()
	fake := clienttest.NewManager(func() time.Time { return ctlTestNow })
	return fake, clienttest.Serve(t, fake, "127.0.0.1:0").Addr
}

// testCtx is a context carrying the test clock.
func testCtx() context.Context {
	return context.WithValue(context.Background(), ctlNowKey{}, func() time.Time { return ctlTestNow })
}

// runCtl runs norsk-ctl with args (and stdin) as main would, returning its
// output and exit code.
func runCtl(t *testing.T, ctx context.Context, stdin string, args ...string) ctlResult {
	t.Helper()
	var out, errOut bytes.Buffer
	return runCtlTo(t, ctx, stdin, &out, &errOut, args...)
}

// runCtlTo is runCtl writing to the given writers.
func runCtlTo(t *testing.T, ctx context.Context, stdin string, out, errOut interface {
	Write([]byte) (int, error)
	String() string
}, args ...string) ctlResult {
	t.Helper()
	root := newRootCommand()
	root.SetOut(out)
	root.SetErr(errOut)
	root.SetIn(strings.NewReader(stdin))
	root.SetArgs(args)
	err := root.ExecuteContext(ctx)
	code := 0
	if err != nil {
		code = 1
		if ee, ok := errors.AsType[*exitError](err); ok {
			code = ee.code
		} else {
			_, _ = errOut.Write([]byte("norsk-ctl: " + err.Error() + "\n"))
		}
	}
	return ctlResult{stdout: out.String(), stderr: errOut.String(), code: code}
}

// mustRun runs norsk-ctl against addr and fails the test unless it exits 0.
func mustRun(t *testing.T, addr string, args ...string) string {
	t.Helper()
	r := runCtl(t, testCtx(), "", append([]string{"--manager-url", addr}, args...)...)
	if r.code != 0 {
		t.Fatalf("norsk-ctl %s: exit %d\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), r.code, r.stdout, r.stderr)
	}
	return r.stdout
}

// notifyBuffer is a concurrency-safe buffer that signals every write.
type notifyBuffer struct {
	mu       sync.Mutex
	buf      bytes.Buffer
	writeCh  chan struct{}
	initOnce sync.Once
}

func (b *notifyBuffer) ch() chan struct{} {
	b.initOnce.Do(func() { b.writeCh = make(chan struct{}, 1) })
	return b.writeCh
}

func (b *notifyBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	n, err := b.buf.Write(p)
	b.mu.Unlock()
	select {
	case b.ch() <- struct{}{}:
	default:
	}
	return n, err
}

func (b *notifyBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// waitFor waits until the buffer holds want, failing after 10 s.
func (b *notifyBuffer) waitFor(t *testing.T, want string) string {
	t.Helper()
	timeout := time.NewTimer(10 * time.Second)
	defer timeout.Stop()
	for {
		if s := b.String(); strings.Contains(s, want) {
			return s
		}
		select {
		case <-b.ch():
		case <-timeout.C:
			t.Fatalf("timed out waiting for %q in:\n%s", want, b.String())
		}
	}
}
