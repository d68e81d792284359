package ha

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/norsk-oss/norsk-manager/client"
	"github.com/norsk-oss/norsk-manager/proto/commonpb"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
	"github.com/norsk-oss/norsk-manager/test/testproc"
)

// Timing budgets. The machine running these tests may have two cores
// shared with other test processes: every wait is generous, and a test
// fails only when the cluster is stuck, not when it is slow.
const (
	formTimeout = 60 * time.Second // a cluster forms, a manager (re)joins
	callTimeout = 15 * time.Second // per-call timeout of the test clients
)

// skipShort skips t under -short: these tests run real clusters.
func skipShort(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("HA fault test: starts real manager clusters")
	}
}

// haConnect connects a client to url (one manager or several, comma
// separated) with a per-call timeout and a reconnect backoff short enough
// for a restarted manager to be used again within a second or two; extra
// dial options come last and so override. Closed when the test ends.
func haConnect(t testing.TB, url string, timeout time.Duration, extra ...grpc.DialOption) *client.NorskManager {
	t.Helper()
	opts := append([]grpc.DialOption{grpc.WithConnectParams(grpc.ConnectParams{
		Backoff:           backoff.Config{BaseDelay: 50 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: time.Second},
		MinConnectTimeout: 2 * time.Second,
	})}, extra...)
	cl, err := client.Connect(context.Background(), client.Settings{URL: url, Timeout: timeout, DialOptions: opts})
	require.NoError(t, err)
	t.Cleanup(func() { cl.Close() })
	return cl
}

// haJob is the job the tests create: its tags make it recognisable and
// its content checkable after an AlreadyExists.
func haJob(id, load string) *managerpb.Job {
	return &managerpb.Job{
		JobId:       &commonpb.JobId{JobId: id},
		Description: "ha fault test job " + id,
		Tags:        map[string]string{"suite": "ha", "load": load, "id": id},
	}
}

// sameJobContent reports whether got carries what haJob put into want.
func sameJobContent(got, want *managerpb.Job) bool {
	return got.GetDescription() == want.GetDescription() && maps.Equal(got.GetTags(), want.GetTags())
}

// clusterView checks what m says about the cluster: exactly the managers
// named in want, each alive in gossip, readable and a Raft voter, one of
// them the leader as m sees it (raft_state "leader" on exactly that one),
// all in the same term. It returns the leader's name.
func clusterView(m *testproc.Manager, want []string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := m.Members(ctx)
	if err != nil {
		return "", fmt.Errorf("%s: ClusterMembers: %w", m.Name, err)
	}
	var names, leaders []string
	terms := map[uint64]bool{}
	for _, mem := range resp.GetMembers() {
		names = append(names, mem.GetName())
		switch {
		case mem.GetError() != "":
			return "", fmt.Errorf("%s sees %s: %s", m.Name, mem.GetName(), mem.GetError())
		case mem.GetGossipState() != "alive":
			return "", fmt.Errorf("%s sees %s in gossip state %q", m.Name, mem.GetName(), mem.GetGossipState())
		case !mem.GetVoter():
			return "", fmt.Errorf("%s sees %s as a non-voter", m.Name, mem.GetName())
		}
		if mem.GetRaftState() == "leader" {
			leaders = append(leaders, mem.GetName())
		}
		terms[mem.GetTerm()] = true
	}
	sort.Strings(names)
	switch {
	case !slices.Equal(names, want):
		return "", fmt.Errorf("%s lists members %v, want %v", m.Name, names, want)
	case resp.GetLeader() == "":
		return "", fmt.Errorf("%s knows no leader", m.Name)
	case len(leaders) != 1 || leaders[0] != resp.GetLeader():
		return "", fmt.Errorf("%s says the leader is %q but members in raft state leader are %v", m.Name, resp.GetLeader(), leaders)
	case len(terms) != 1:
		return "", fmt.Errorf("%s sees members in different terms %v", m.Name, slices.Collect(maps.Keys(terms)))
	}
	return resp.GetLeader(), nil
}

// awaitFormed waits until every manager in ms serves and agrees on the
// cluster: the members are exactly ms, all voters, with one leader that
// every one of them names. It returns the leader.
func awaitFormed(t *testing.T, ms []*testproc.Manager) *testproc.Manager {
	t.Helper()
	var want []string
	byName := map[string]*testproc.Manager{}
	for _, m := range ms {
		want = append(want, m.Name)
		byName[m.Name] = m
	}
	sort.Strings(want)
	var leader string
	testproc.Await(t, formTimeout, fmt.Sprintf("cluster %v formed and agreed", want), func() error {
		leader = ""
		for _, m := range ms {
			if !m.Proc().Running() {
				return fmt.Errorf("%s exited", m.Name)
			}
			if !testproc.Serving(m.APIAddr) {
				return fmt.Errorf("%s is not serving", m.Name)
			}
			l, err := clusterView(m, want)
			if err != nil {
				return err
			}
			if leader != "" && l != leader {
				return fmt.Errorf("managers disagree on the leader: %q and %q", leader, l)
			}
			leader = l
		}
		return nil
	})
	return byName[leader]
}

// others returns ms without x.
func others(ms []*testproc.Manager, x *testproc.Manager) []*testproc.Manager {
	var out []*testproc.Manager
	for _, m := range ms {
		if m != x {
			out = append(out, m)
		}
	}
	return out
}

// jobCountsOn returns, as manager m alone answers JobSearch, how many
// times each job id whose id starts with prefix is listed.
func jobCountsOn(m *testproc.Manager, cl *client.NorskManager, prefix string) (map[string]int, error) {
	jobs, err := cl.JobSearch(context.Background(), client.IDRe("^"+prefix))
	if err != nil {
		return nil, fmt.Errorf("JobSearch on %s: %w", m.Name, err)
	}
	counts := map[string]int{}
	for _, j := range jobs {
		counts[j.GetJob().GetJobId().GetJobId()]++
	}
	return counts, nil
}

// requireJobsOnEvery checks every running manager on its own (a client of
// that manager only): JobSearch lists each acknowledged job exactly once
// and nothing else of the load except jobs whose create had an unknown
// outcome; JobById finds each acknowledged job with its content.
func requireJobsOnEvery(t *testing.T, ms []*testproc.Manager, prefix string, acked map[string]*managerpb.Job, unknown map[string]bool) {
	t.Helper()
	for _, m := range ms {
		cl := haConnect(t, m.APIAddr, 30*time.Second)
		counts, err := jobCountsOn(m, cl, prefix)
		require.NoError(t, err)
		var missing, dup, stray []string
		for id := range acked {
			if counts[id] == 0 {
				missing = append(missing, id)
			}
		}
		for id, n := range counts {
			if n > 1 {
				dup = append(dup, fmt.Sprintf("%s×%d", id, n))
			}
			if acked[id] == nil && !unknown[id] {
				stray = append(stray, id)
			}
		}
		sort.Strings(missing)
		sort.Strings(dup)
		require.Empty(t, missing, "%s: acknowledged jobs missing from JobSearch", m.Name)
		require.Empty(t, dup, "%s: jobs listed more than once", m.Name)
		require.Empty(t, stray, "%s: jobs nobody tried to create", m.Name)

		ids := slices.Sorted(maps.Keys(acked))
		errs := parallel(8, len(ids), func(i int) error {
			r, err := cl.JobByID(context.Background(), client.JobID(ids[i]))
			if err != nil {
				return fmt.Errorf("JobById %s: %w", ids[i], err)
			}
			if !sameJobContent(r.GetJob().GetJob(), acked[ids[i]]) {
				return fmt.Errorf("JobById %s: content %v differs from what was created", ids[i], r.GetJob().GetJob())
			}
			return nil
		})
		require.Empty(t, errs, "%s: JobById of acknowledged jobs", m.Name)
		t.Logf("%s: %d acknowledged jobs present exactly once (%d listed, %d with an unknown outcome)", m.Name, len(acked), len(counts), len(unknown))
	}
}

// parallel runs fn(0..n-1) on workers goroutines and returns the errors
// (at most 10).
func parallel(workers, n int, fn func(i int) error) []error {
	var next atomic.Int64
	var mu sync.Mutex
	var errs []error
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				if err := fn(i); err != nil {
					mu.Lock()
					if len(errs) < 10 {
						errs = append(errs, err)
					}
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	return errs
}

// retryableCreate reports whether a failed CreateJob may be retried with
// the same job id and content, because its outcome is unknown or nothing
// was applied:
//
//   - Unavailable: no manager reachable, the reached manager has no leader,
//     a grain did not answer in time (gateway: "safe to retry"), or a Raft
//     append lost its leader before it was known to commit.
//   - DeadlineExceeded: the call's own deadline passed during an election
//     or while a grain moved to its new owner; the outcome is unknown.
//   - Aborted: fencing (docs/design/ha.md) — two activations of the job's
//     grain during a topology change and the stale one lost; nothing of it
//     was applied.
//
// A retry whose earlier attempt did commit is answered AlreadyExists (the
// gateway gives each call a fresh request id, so the grain cannot tell a
// retry from a second create); createLoad counts that as acknowledged once
// JobById shows the job with the content it sent.
func retryableCreate(c codes.Code) bool {
	switch c {
	case codes.Unavailable, codes.DeadlineExceeded, codes.Aborted:
		return true
	}
	return false
}

// createLoad issues CreateJob calls for fresh job ids (prefix-000001, …)
// from several goroutines through one client, and records the outcome of
// every job: acknowledged, unknown (sent, never acknowledged: it may or may
// not exist) or unexpected (a code no fault explains).
type createLoad struct {
	cl      *client.NorskManager
	prefix  string
	workers int
	// limit is how many jobs to create in all; 0: until run's ctx ends.
	limit int
	// retry retries a failed create (retryableCreate) with the same id and
	// content until it is acknowledged or ctx ends; without it each job is
	// tried once.
	retry bool

	next atomic.Int64
	mu   struct {
		sync.Mutex
		acked   map[string]*managerpb.Job
		unknown map[string]bool
		// failures counts failed attempts by code.
		failures map[codes.Code]int
		// existedOnRetry counts retries answered AlreadyExists with the
		// job as sent: an earlier attempt had committed.
		existedOnRetry int
		unexpected     []string
	}
}

func newCreateLoad(cl *client.NorskManager, prefix string, workers, limit int, retry bool) *createLoad {
	l := &createLoad{cl: cl, prefix: prefix, workers: workers, limit: limit, retry: retry}
	l.mu.acked, l.mu.unknown, l.mu.failures = map[string]*managerpb.Job{}, map[string]bool{}, map[codes.Code]int{}
	return l
}

// start runs the load in the background until it reaches its limit or
// ctx ends; the returned function waits for it to finish.
func (l *createLoad) start(ctx context.Context) (wait func()) {
	var wg sync.WaitGroup
	for range l.workers {
		wg.Go(func() { l.worker(ctx) })
	}
	return wg.Wait
}

func (l *createLoad) worker(ctx context.Context) {
	for ctx.Err() == nil {
		n := int(l.next.Add(1))
		if l.limit > 0 && n > l.limit {
			return
		}
		id := fmt.Sprintf("%s-%06d", l.prefix, n)
		job := haJob(id, l.prefix)
		l.mu.Lock()
		l.mu.unknown[id] = true
		l.mu.Unlock()
		if l.create(ctx, job) {
			l.mu.Lock()
			delete(l.mu.unknown, id)
			l.mu.acked[id] = job
			l.mu.Unlock()
		}
	}
}

// create sends job (again, if retrying) and reports whether it was
// acknowledged.
func (l *createLoad) create(ctx context.Context, job *managerpb.Job) bool {
	delay := 50 * time.Millisecond
	for attempt := 1; ; attempt++ {
		_, err := l.cl.CreateJob(ctx, job)
		if err == nil {
			return true
		}
		if ctx.Err() != nil {
			return false
		}
		code := status.Code(err)
		if code == codes.AlreadyExists && attempt > 1 {
			if ok, err := l.existsAsSent(ctx, job); ok {
				return true
			} else if err != nil {
				l.unexpected(err.Error())
				return false
			}
			code = codes.Unavailable // the read failed: try again
		} else {
			l.mu.Lock()
			l.mu.failures[code]++
			l.mu.Unlock()
		}
		if !retryableCreate(code) {
			l.unexpected(fmt.Sprintf("CreateJob %s (attempt %d): %v", job.GetJobId().GetJobId(), attempt, err))
			return false
		}
		if !l.retry {
			return false
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(delay):
		}
		delay = min(2*delay, time.Second)
	}
}

// existsAsSent reads job back after an AlreadyExists: true if it exists
// with the content sent; an error if it exists with other content; false
// and no error if the read failed (the caller retries).
func (l *createLoad) existsAsSent(ctx context.Context, job *managerpb.Job) (bool, error) {
	r, err := l.cl.JobByID(ctx, client.JobID(job.GetJobId().GetJobId()))
	if err != nil {
		return false, nil
	}
	if !sameJobContent(r.GetJob().GetJob(), job) {
		return false, fmt.Errorf("CreateJob %s: AlreadyExists on retry, but the stored job %v is not the one sent", job.GetJobId().GetJobId(), r.GetJob().GetJob())
	}
	l.mu.Lock()
	l.mu.existedOnRetry++
	l.mu.Unlock()
	return true, nil
}

func (l *createLoad) unexpected(msg string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.mu.unexpected = append(l.mu.unexpected, msg)
}

// ackedCount returns how many jobs have been acknowledged so far.
func (l *createLoad) ackedCount() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.mu.acked)
}

// awaitAcked waits until at least n jobs are acknowledged.
func (l *createLoad) awaitAcked(t *testing.T, n int, timeout time.Duration) {
	t.Helper()
	testproc.Await(t, timeout, fmt.Sprintf("%d acknowledged creates", n), func() error {
		if got := l.ackedCount(); got < n {
			return fmt.Errorf("%d acknowledged (failures so far: %s)", got, l.failureSummary())
		}
		return nil
	})
}

// result returns copies of the acknowledged jobs and of the ids with an
// unknown outcome.
func (l *createLoad) result() (map[string]*managerpb.Job, map[string]bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return maps.Clone(l.mu.acked), maps.Clone(l.mu.unknown)
}

// failureSummary lists the failed attempts by code, e.g.
// "Unavailable=3 DeadlineExceeded=1".
func (l *createLoad) failureSummary() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var parts []string
	for c, n := range l.mu.failures {
		parts = append(parts, fmt.Sprintf("%s=%d", c, n))
	}
	sort.Strings(parts)
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, " ")
}

// requireNoUnexpected fails the test if any create failed with a code no
// fault explains, and logs what happened.
func (l *createLoad) requireNoUnexpected(t *testing.T) {
	t.Helper()
	l.mu.Lock()
	unexpected := slices.Clone(l.mu.unexpected)
	acked, unknown, existed := len(l.mu.acked), len(l.mu.unknown), l.mu.existedOnRetry
	l.mu.Unlock()
	t.Logf("load %s: %d acknowledged (%d of them by AlreadyExists on a retry), %d unknown outcome; failed attempts: %s",
		l.prefix, acked, existed, unknown, l.failureSummary())
	require.Empty(t, unexpected, "creates that failed with an unexpected code")
}
