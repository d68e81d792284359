package ops

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/norsk-oss/norsk-manager/client"
	"github.com/norsk-oss/norsk-manager/proto/commonpb"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
	"github.com/norsk-oss/norsk-manager/test/testproc"
)

// single is a norsk-manager started without cluster flags.
type single struct {
	*testproc.Proc
	dir, addr string
}

// startSingle starts a single manager on dir at addr and waits until it
// serves.
func startSingle(t *testing.T, name, dir, addr string) *single {
	t.Helper()
	p := testproc.Start(t, name, "norsk-manager", "--data-dir", dir, "--api-addr", addr, "--log-level", "debug")
	testproc.Eventually(t, 30*time.Second, name+" serving on "+addr, func() bool {
		if !p.Running() {
			t.Fatalf("%s exited:\n%s", name, p.Output())
		}
		return testproc.Serving(addr)
	})
	return &single{Proc: p, dir: dir, addr: addr}
}

// run runs bin with args to its end (at most two minutes) and returns its
// output and exit code.
func run(t *testing.T, name, bin string, args ...string) (string, int) {
	t.Helper()
	p := testproc.Start(t, name, bin, args...)
	code, ok := p.Exited(2 * time.Minute)
	if !ok {
		t.Fatalf("%s %s did not finish within two minutes:\n%s", bin, strings.Join(args, " "), p.Output())
	}
	return p.Output(), code
}

// mustRun is run that fails the test unless the command exits 0.
func mustRun(t *testing.T, name, bin string, args ...string) string {
	t.Helper()
	out, code := run(t, name, bin, args...)
	if code != 0 {
		t.Fatalf("%s %s: exit %d:\n%s", bin, strings.Join(args, " "), code, out)
	}
	return out
}

var appliedRe = regexp.MustCompile(`applied index +(\d+)`)

// saveSnapshot runs "norsk-ctl operator snapshot save" against the
// manager at addr and returns the file and the snapshot's applied index.
func saveSnapshot(t *testing.T, addr string) (string, uint64) {
	t.Helper()
	file := filepath.Join(t.TempDir(), "backup.nmb")
	out := mustRun(t, "snapshot-save", "norsk-ctl", "--manager-url", addr, "operator", "snapshot", "save", file)
	m := appliedRe.FindStringSubmatch(out)
	if m == nil || !strings.Contains(out, "from manager     "+addr) {
		t.Fatalf("snapshot save output:\n%s", out)
	}
	idx, _ := strconv.ParseUint(m[1], 10, 64)
	t.Logf("snapshot of %s at applied index %d:\n%s", addr, idx, out)
	return file, idx
}

// writer creates jobs "<prefix>-<n>" one after another through a client
// until halted, recording every attempt and which were acknowledged.
type writer struct {
	prefix string
	cl     *client.NorskManager
	stopCh chan struct{}
	doneCh chan struct{}
	mu     struct {
		sync.Mutex
		attempts []string
		acked    map[string]bool
		err      error // a failure that is not an unknown outcome
	}
}

// startWriters starts n writers on cl; they are halted at the end of the
// test at the latest.
func startWriters(t *testing.T, cl *client.NorskManager, n int) []*writer {
	ws := make([]*writer, n)
	for i := range ws {
		w := &writer{prefix: fmt.Sprintf("load%d", i), cl: cl, stopCh: make(chan struct{}), doneCh: make(chan struct{})}
		w.mu.acked = map[string]bool{}
		ws[i] = w
		go w.loop()
		t.Cleanup(w.halt)
	}
	return ws
}

func (w *writer) loop() {
	defer close(w.doneCh)
	for n := 0; ; n++ {
		select {
		case <-w.stopCh:
			return
		default:
		}
		id := fmt.Sprintf("%s-%05d", w.prefix, n)
		w.mu.Lock()
		w.mu.attempts = append(w.mu.attempts, id)
		w.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, err := w.cl.CreateJob(ctx, &managerpb.Job{JobId: &commonpb.JobId{JobId: id}, Tags: map[string]string{"load": w.prefix}})
		cancel()
		w.mu.Lock()
		switch c := status.Code(err); {
		case err == nil:
			w.mu.acked[id] = true
		case c == codes.Unavailable || c == codes.DeadlineExceeded:
			// Unknown outcome: it may or may not exist.
		default:
			w.mu.err = fmt.Errorf("CreateJob(%s): %w", id, err)
			w.mu.Unlock()
			return
		}
		w.mu.Unlock()
	}
}

// halt stops the writer and waits for its last call. Idempotent.
func (w *writer) halt() {
	select {
	case <-w.stopCh:
	default:
		close(w.stopCh)
	}
	<-w.doneCh
}

// ackedIDs returns the acknowledged ids so far, in creation order.
func (w *writer) ackedIDs() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []string
	for _, id := range w.mu.attempts {
		if w.mu.acked[id] {
			out = append(out, id)
		}
	}
	return out
}

func totalAcked(ws []*writer) int {
	n := 0
	for _, w := range ws {
		n += len(w.ackedIDs())
	}
	return n
}

// awaitAcked waits until the writers acknowledged n more jobs than now.
func awaitAcked(t *testing.T, ws []*writer, n int) {
	t.Helper()
	want := totalAcked(ws) + n
	testproc.Await(t, 60*time.Second, fmt.Sprintf("%d jobs acknowledged", want), func() error {
		for _, w := range ws {
			w.mu.Lock()
			err := w.mu.err
			w.mu.Unlock()
			if err != nil {
				t.Fatalf("writer %s: %v", w.prefix, err)
			}
		}
		if got := totalAcked(ws); got < want {
			return fmt.Errorf("%d acknowledged", got)
		}
		return nil
	})
}

// checkRestored checks through cl what a store restored from a snapshot
// holds of the writers' jobs: every job acknowledged before the snapshot
// was asked for (before[i] for writer i) exists, and each writer's jobs
// that exist are a prefix of what it attempted (one consistent read view:
// never a later job without an earlier acknowledged one). It returns how
// many of the writers' jobs exist.
func checkRestored(t *testing.T, cl *client.NorskManager, ws []*writer, before [][]string) int {
	t.Helper()
	total := 0
	for i, w := range ws {
		w.mu.Lock()
		attempts := slices.Clone(w.mu.attempts)
		acked := make(map[string]bool, len(w.mu.acked))
		for k, v := range w.mu.acked {
			acked[k] = v
		}
		w.mu.Unlock()
		missing := ""
		for _, id := range attempts {
			exists := jobExists(t, cl, id)
			switch {
			case exists && missing != "":
				t.Errorf("%s exists but the acknowledged %s before it does not: not one consistent state", id, missing)
			case exists:
				total++
			case acked[id] && missing == "":
				missing = id
			}
		}
		for _, id := range before[i] {
			if !jobExists(t, cl, id) {
				t.Errorf("%s was acknowledged before the snapshot was asked for, but the restored manager does not have it", id)
			}
		}
	}
	return total
}

func jobExists(t *testing.T, cl *client.NorskManager, id string) bool {
	t.Helper()
	var exists bool
	testproc.Await(t, 30*time.Second, "JobByID("+id+")", func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, err := cl.JobByID(ctx, client.JobID(id))
		switch status.Code(err) {
		case codes.OK:
			exists = true
			return nil
		case codes.NotFound:
			exists = false
			return nil
		case codes.Unavailable, codes.DeadlineExceeded:
			return err
		}
		t.Fatalf("JobByID(%s): %v", id, err)
		return nil
	})
	return exists
}

func ackedBefore(ws []*writer) [][]string {
	out := make([][]string, len(ws))
	for i, w := range ws {
		out[i] = w.ackedIDs()
	}
	return out
}

// managerClient connects to addr only.
func managerClient(t *testing.T, addr string) *client.NorskManager {
	t.Helper()
	cl, err := client.Connect(context.Background(), client.Settings{URL: addr, Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.Close() })
	return cl
}

// rawEvents opens an event stream on addr with req.
func rawEvents(t *testing.T, addr string, req *managerpb.EventStreamRequest) (grpc.ServerStreamingClient[managerpb.EventStreamEvent], context.CancelFunc) {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	stream, err := managerpb.NewManagerClient(conn).EventStream(ctx, req)
	if err != nil {
		cancel()
		conn.Close()
		t.Fatalf("EventStream on %s: %v", addr, err)
	}
	return stream, func() { cancel(); conn.Close() }
}

// eventHead returns the log index of a fresh stream's snapshot on addr:
// the manager's event head.
func eventHead(t *testing.T, addr string) uint64 {
	t.Helper()
	stream, done := rawEvents(t, addr, &managerpb.EventStreamRequest{})
	defer done()
	for {
		ev, err := stream.Recv()
		if err != nil {
			t.Fatalf("event stream on %s: %v", addr, err)
		}
		if ev.GetInitialDataComplete() != nil {
			return ev.GetLogIndex()
		}
	}
}

// requireResetOnResume checks that a stream on addr resuming after index
// n starts with a stream_reset saying the state was restored or
// recovered.
func requireResetOnResume(t *testing.T, addr string, n uint64) {
	t.Helper()
	stream, done := rawEvents(t, addr, &managerpb.EventStreamRequest{ResumeFromIndex: proto.Uint64(n)})
	defer done()
	ev, err := stream.Recv()
	if err != nil {
		t.Fatalf("resume from %d on %s: %v", n, addr, err)
	}
	r := ev.GetStreamReset()
	if r == nil || r.GetRequestedIndex() != n || !strings.Contains(r.GetReason(), "restored from a backup or recovered") {
		t.Fatalf("resume from %d on %s: first event %v, want a stream_reset for a restored state", n, addr, ev)
	}
}

// hasReset reports whether the event log recorded a stream_reset.
func hasReset(ev *testproc.EventLog) bool {
	return ev.Has(func(e *managerpb.EventStreamEvent) bool { return e.GetStreamReset() != nil })
}

// isGone reports whether err is the NotFound of a job that does not exist.
func isGone(err error) bool {
	var ce *client.CallError
	return errors.As(err, &ce) && status.Code(err) == codes.NotFound
}
