package ha

// TestBundles_SurviveManagerKills and its helpers. Helper names start
// with bd so that they never collide with the package's other helpers.

import (
	"context"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/norsk-oss/norsk-manager/client"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
	"github.com/norsk-oss/norsk-manager/test/testproc"
)

// bdAckTimeout bounds the retries of one bundle command across a
// manager's death (election, grain moved to its new owner, reviver).
const bdAckTimeout = 2 * time.Minute

// TestBundles_SurviveManagerKills: bundles (docs/design/bundles.md) on a
// three-manager cluster whose managers are SIGKILLed under bundle
// commands. Three bundles of job specs with a resilience policy (one spec
// start_mode "manual") are created through a client of all managers; each
// manager, read on its own, shows every derived job with its stamped tags
// and the bundle converged. Then, each time restarting the killed manager
// and checking convergence on every manager:
//
//  1. UpdateBundle of ha-upd (one spec removed, one added, the others'
//     templates changed: every derived job is updated or created) and
//     DeleteBundle of ha-del1 are sent and the Raft leader is SIGKILLed
//     at once;
//  2. UpdateBundle of ha-upd again (every template changed, the removed
//     spec back: created afresh after its removal) and the manager hosting its grain — the one that logs the
//     committed generation — is SIGKILLed as soon as it logs it, with the
//     round of job calls in flight;
//  3. DeleteBundle of ha-del2 and its grain's manager is SIGKILLed as
//     soon as it logs DELETING, with the saga in flight.
//
// After each kill the work must finish on the two survivors (the bundle
// grain resumed by its new owner) before the killed manager is restarted;
// rounds 2 and 3 aim at the grain's work in flight, and at least one of
// them must have interrupted it (the survivors show the bundle
// unconverged right after the kill; the log says for each).
//
// The calls are retried on Unavailable, DeadlineExceeded and Aborted with
// the same content, as a client would: a repeated update writes nothing
// (so the generations count exactly the updates), a repeated delete after
// the saga ended answers NotFound (success). In the end every manager
// shows ha-upd converged at generation 3 with exactly the derived jobs of
// its last definition, the deleted bundles and their jobs gone, and an
// event stream following all managers has delivered every log event
// exactly once, bundle_deleted once for each deleted bundle.
func TestBundles_SurviveManagerKills(t *testing.T) {
	skipShort(t)
	start := time.Now()
	c := testproc.NewCluster(t, 3)
	c.StartAll()
	leader := awaitFormed(t, c.Managers)
	cl := haConnect(t, c.URLs(), callTimeout)
	ev := &testproc.EventLog{}
	ev.Follow(t, haConnect(t, c.URLs(), callTimeout), formTimeout)
	t.Logf("cluster formed, leader %s (%s)", leader.Name, time.Since(start).Round(time.Millisecond))

	upd := bdBundle("ha-upd", 1, "enc", "pkg:manual", "mon")
	del1 := bdBundle("ha-del1", 1, "enc", "pkg:manual", "mon")
	del2 := bdBundle("ha-del2", 1, "enc", "pkg:manual", "mon")
	for _, b := range []*managerpb.Bundle{upd, del1, del2} {
		attempts, err := bdCreate(cl, b)
		require.NoError(t, err, "CreateBundle %s (answers %v)", bdID(b), attempts)
	}
	// CreateBundle answers once the derived jobs exist and the record says
	// so: every manager shows it at once (the read barrier, no polling).
	for _, m := range c.Managers {
		mc := haConnect(t, m.APIAddr, callTimeout)
		for _, b := range []*managerpb.Bundle{upd, del1, del2} {
			require.NoError(t, bdConverged(mc, b, 1), "%s right after CreateBundle", m.Name)
		}
	}
	t.Logf("3 bundles of 6 derived jobs each created and converged on every manager (%s)", time.Since(start).Round(time.Millisecond))

	// Round 1: the leader dies under an update and a delete.
	upd2 := bdBundle("ha-upd", 2, "enc", "pkg:manual", "rec")
	leader = awaitFormed(t, c.Managers)
	r1 := bdAsync(t, func() ([]codes.Code, error) { return bdUpdate(cl, upd2) }, func() ([]codes.Code, error) { return bdDelete(cl, bdID(del1)) })
	leader.Kill()
	t.Logf("round 1: sent UpdateBundle(ha-upd, gen 2) and DeleteBundle(ha-del1), SIGKILLed the leader %s", leader.Name)
	for i, res := range r1() {
		require.NoError(t, res.err, "round 1 call %d (answers %v)", i, res.attempts)
		t.Logf("round 1 call %d acknowledged (answers %v)", i, res.attempts)
	}
	round1 := func(mc *client.NorskManager) error {
		if err := bdConverged(mc, upd2, 2); err != nil {
			return err
		}
		return bdGone(mc, bdID(del1))
	}
	// The work finishes without the dead manager, then shows on it too.
	bdAwaitEvery(t, others(c.Managers, leader), "round 1 converged without "+leader.Name, round1)
	leader.Start()
	awaitFormed(t, c.Managers)
	bdAwaitEvery(t, c.Managers, "round 1 converged", round1)
	t.Logf("round 1 converged on the survivors, then on every manager (%s)", time.Since(start).Round(time.Millisecond))

	// Round 2: the grain's manager dies right after it committed an update
	// (the round of job calls in flight).
	upd3 := bdBundle("ha-upd", 3, "enc", "pkg:manual", "rec", "mon")
	r2 := bdAsync(t, func() ([]codes.Code, error) { return bdUpdate(cl, upd3) })
	host := bdAwaitLog(t, c, `msg="bundle updated"`, "ha-upd", "generation=3")
	host.Kill()
	progress, interrupted2 := bdProgress(t, c, host, "ha-upd")
	t.Logf("round 2: SIGKILLed %s, which hosts ha-upd's grain, as it logged generation 3; the survivors show %s", host.Name, progress)
	for _, res := range r2() {
		require.NoError(t, res.err, "round 2 UpdateBundle (answers %v)", res.attempts)
		t.Logf("round 2 UpdateBundle acknowledged (answers %v)", res.attempts)
	}
	round2 := func(mc *client.NorskManager) error { return bdConverged(mc, upd3, 3) }
	bdAwaitEvery(t, others(c.Managers, host), "round 2 converged without "+host.Name, round2)
	host.Start()
	awaitFormed(t, c.Managers)
	bdAwaitEvery(t, c.Managers, "round 2 converged", round2)
	t.Logf("round 2 converged on the survivors, then on every manager (%s)", time.Since(start).Round(time.Millisecond))

	// Round 3: the grain's manager dies right after it committed DELETING
	// (the saga in flight).
	r3 := bdAsync(t, func() ([]codes.Code, error) { return bdDelete(cl, bdID(del2)) })
	host = bdAwaitLog(t, c, `msg="bundle deleting"`, "ha-del2")
	host.Kill()
	progress, interrupted3 := bdProgress(t, c, host, "ha-del2")
	t.Logf("round 3: SIGKILLed %s, which hosts ha-del2's grain, as it logged DELETING; the survivors show %s", host.Name, progress)
	for _, res := range r3() {
		require.NoError(t, res.err, "round 3 DeleteBundle (answers %v)", res.attempts)
		t.Logf("round 3 DeleteBundle acknowledged (answers %v)", res.attempts)
	}
	bdAwaitEvery(t, others(c.Managers, host), "ha-del2 gone without "+host.Name, func(mc *client.NorskManager) error { return bdGone(mc, bdID(del2)) })
	t.Logf("round 3: the saga ended on the survivors (%s)", time.Since(start).Round(time.Millisecond))
	// The kill is within milliseconds of the commit, and a round takes
	// several Raft appends: at least one kill must have left work that
	// the survivors then finished, else this test proved no resumption.
	require.True(t, interrupted2 || interrupted3, "neither kill interrupted the bundle's work")
	host.Start()
	awaitFormed(t, c.Managers)

	// Every manager, on its own: the updated bundle as last defined, the
	// deleted ones and their jobs gone, only ha-upd listed.
	bdAwaitEvery(t, c.Managers, "the final state", func(mc *client.NorskManager) error {
		if err := bdConverged(mc, upd3, 3); err != nil {
			return err
		}
		for _, id := range []string{bdID(del1), bdID(del2)} {
			if err := bdGone(mc, id); err != nil {
				return err
			}
		}
		list, err := mc.ListBundles(context.Background())
		if err != nil {
			return err
		}
		var ids []string
		for _, b := range list.GetBundles() {
			ids = append(ids, b.GetBundle().GetBundleId().GetBundleId())
		}
		if !slices.Equal(ids, []string{"ha-upd"}) {
			return fmt.Errorf("ListBundles lists %v, want [ha-upd]", ids)
		}
		return nil
	})
	t.Logf("final state on every manager (%s)", time.Since(start).Round(time.Millisecond))

	// The event stream: everything exactly once across the three kills;
	// bundle_deleted once per deleted bundle, none for ha-upd; the last
	// definition of ha-upd announced.
	testproc.Await(t, formTimeout, "bundle_deleted of ha-del1 and ha-del2 on the event stream", func() error {
		if n := bdDeletedEvents(ev); n["ha-del1"] == 0 || n["ha-del2"] == 0 {
			return fmt.Errorf("bundle_deleted so far: %v", n)
		}
		return nil
	})
	testproc.Await(t, formTimeout, "bundle_updated of ha-upd's last definition on the event stream", func() error {
		if !ev.Has(func(e *managerpb.EventStreamEvent) bool { return proto.Equal(e.GetBundleUpdated().GetBundle(), upd3) }) {
			return fmt.Errorf("not seen")
		}
		return nil
	})
	require.NoError(t, ev.CheckExactlyOnce())
	require.Equal(t, map[string]int{"ha-del1": 1, "ha-del2": 1}, bdDeletedEvents(ev), "bundle_deleted events by bundle")
	t.Logf("event stream: %d events, log events exactly once; done in %s", ev.Len(), time.Since(start).Round(time.Millisecond))
}

// bdBundle returns bundle id with a resilience policy (two replicas) and
// one job spec per name; "name:manual" makes the spec start_mode manual.
// The templates carry version v in their description, so that every
// derived job changes from one version to the next.
func bdBundle(id string, v int, specs ...string) *managerpb.Bundle {
	b := &managerpb.Bundle{
		BundleId:         &managerpb.BundleId{BundleId: id},
		Pool:             "ha",
		ResiliencePolicy: &managerpb.ResiliencePolicy{SameNode: managerpb.AntiAffinity_ANTI_AFFINITY_FORBID},
	}
	for _, s := range specs {
		name, mode, _ := strings.Cut(s, ":")
		b.Jobs = append(b.Jobs, &managerpb.BundleJobSpec{JobName: name, StartMode: mode, Job: &managerpb.Job{
			Description: fmt.Sprintf("ha bundle job %s of %s v%d", name, id, v),
			Tags:        map[string]string{"suite": "ha", "app": name},
		}})
	}
	return b
}

func bdID(b *managerpb.Bundle) string { return b.GetBundleId().GetBundleId() }

// bdRetry calls call until it succeeds, as a client retries a call whose
// outcome is unknown or that was not applied (retryableCreate: Unavailable,
// DeadlineExceeded, Aborted), with a backoff, for up to bdAckTimeout. On a
// retry, an answer with code ackOnRetry (unless OK) also means an earlier
// attempt took effect. It returns the codes of the attempts made.
func bdRetry(call func(ctx context.Context) error, ackOnRetry codes.Code) ([]codes.Code, error) {
	deadline := time.Now().Add(bdAckTimeout)
	delay := 50 * time.Millisecond
	var answers []codes.Code
	for attempt := 1; ; attempt++ {
		err := call(context.Background())
		code := status.Code(err)
		answers = append(answers, code)
		switch {
		case err == nil:
			return answers, nil
		case attempt > 1 && ackOnRetry != codes.OK && code == ackOnRetry:
			return answers, nil
		case !retryableCreate(code):
			return answers, err
		case time.Now().After(deadline):
			return answers, fmt.Errorf("not acknowledged within %s: %w", bdAckTimeout, err)
		}
		time.Sleep(delay) // the client's backoff between retries
		delay = min(2*delay, time.Second)
	}
}

// bdCreate creates b until acknowledged. AlreadyExists on a retry means an
// earlier attempt committed; the test checks the bundle's content after.
func bdCreate(cl *client.NorskManager, b *managerpb.Bundle) ([]codes.Code, error) {
	return bdRetry(func(ctx context.Context) error {
		id, err := cl.CreateBundle(ctx, b)
		if err == nil && string(id) != bdID(b) {
			return fmt.Errorf("CreateBundle answered id %q, want %q", id, bdID(b))
		}
		return err
	}, codes.AlreadyExists)
}

// bdUpdate updates to b until acknowledged: an update with the content the
// bundle already has writes nothing and answers once the jobs reflect it.
func bdUpdate(cl *client.NorskManager, b *managerpb.Bundle) ([]codes.Code, error) {
	return bdRetry(func(ctx context.Context) error { return cl.UpdateBundle(ctx, b) }, codes.OK)
}

// bdDelete deletes bundle id until acknowledged: a repeated delete of a
// DELETING bundle is OK, and NotFound on a retry means an earlier attempt
// committed and the saga has already ended.
func bdDelete(cl *client.NorskManager, id string) ([]codes.Code, error) {
	return bdRetry(func(ctx context.Context) error { return cl.DeleteBundle(ctx, client.BundleID(id)) }, codes.NotFound)
}

type bdResult struct {
	attempts []codes.Code // the answers, in order
	err      error
}

// bdAsync runs the calls concurrently; the returned function waits for
// them and returns their results in order. The test's cleanup waits for
// them too, should the test end first.
func bdAsync(t *testing.T, calls ...func() ([]codes.Code, error)) func() []bdResult {
	out := make([]bdResult, len(calls))
	done := make(chan struct{})
	go func() {
		defer close(done)
		ch := make(chan struct{}, len(calls))
		for i, call := range calls {
			go func() {
				out[i].attempts, out[i].err = call()
				ch <- struct{}{}
			}()
		}
		for range calls {
			<-ch
		}
	}()
	t.Cleanup(func() { <-done })
	return func() []bdResult {
		<-done
		return out
	}
}

// bdAwaitLog waits until a running manager's log (its current process)
// has a line with msg about bundle id containing every one of also, and
// returns that manager: the bundle grain's host when it logged the line.
// It reads only what the logs gained, every 5 ms (Await's 50 ms would
// often let the grain finish the work the test means to interrupt).
func bdAwaitLog(t *testing.T, c *testproc.Cluster, msg, id string, also ...string) *testproc.Manager {
	t.Helper()
	type tail struct {
		off  int64
		part string // an unfinished last line
	}
	tails := map[*testproc.Proc]*tail{}
	match := func(line string) bool {
		line += " "
		if !strings.Contains(line, msg) || !strings.Contains(line, " bundle_id="+id+" ") {
			return false
		}
		return !slices.ContainsFunc(also, func(s string) bool { return !strings.Contains(line, " "+s+" ") })
	}
	deadline := time.Now().Add(bdAckTimeout)
	for time.Now().Before(deadline) {
		for _, m := range c.Running() {
			p := m.Proc()
			tl := tails[p]
			if tl == nil {
				tl = &tail{}
				tails[p] = tl
			}
			f, err := os.Open(p.Log)
			if err != nil {
				t.Fatal(err)
			}
			b, err := io.ReadAll(io.NewSectionReader(f, tl.off, 1<<40))
			f.Close()
			if err != nil {
				t.Fatal(err)
			}
			tl.off += int64(len(b))
			lines := strings.Split(tl.part+string(b), "\n")
			tl.part = lines[len(lines)-1]
			if slices.ContainsFunc(lines[:len(lines)-1], match) {
				return m
			}
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("timed out after %s waiting for a manager to log %s for %s %v", bdAckTimeout, msg, id, also)
	return nil
}

// bdProgress says how far bundle id's work got, as the managers other
// than dead read it right after dead was killed, and whether work was
// left (the bundle not converged): then the kill interrupted it, and
// another manager must finish it.
func bdProgress(t *testing.T, c *testproc.Cluster, dead *testproc.Manager, id string) (string, bool) {
	t.Helper()
	var urls []string
	for _, m := range others(c.Managers, dead) {
		urls = append(urls, m.APIAddr)
	}
	mc := haConnect(t, strings.Join(urls, ","), callTimeout)
	var out string
	var left bool
	testproc.Await(t, formTimeout, "GetBundle "+id+" on the survivors", func() error {
		info, err := mc.GetBundle(context.Background(), client.BundleID(id))
		switch {
		case status.Code(err) == codes.NotFound:
			out = "the bundle gone (the saga had ended)"
			return nil
		case err != nil:
			return err
		}
		unsynced, removing := 0, 0
		for _, js := range info.GetJobs() {
			if js.GetRemoving() {
				removing++
			} else if !js.GetSynced() {
				unsynced++
			}
		}
		out = fmt.Sprintf("generation %d, state %s, converged %v, %d jobs unsynced, %d being removed",
			info.GetGeneration(), info.GetBundle().GetState(), info.GetConverged(), unsynced, removing)
		left = !info.GetConverged()
		return nil
	})
	return out, left
}

// bdAwaitEvery waits until check holds on every manager, each asked
// through a client of its own.
func bdAwaitEvery(t *testing.T, ms []*testproc.Manager, what string, check func(*client.NorskManager) error) {
	t.Helper()
	for _, m := range ms {
		mc := haConnect(t, m.APIAddr, callTimeout)
		testproc.Await(t, bdAckTimeout, m.Name+": "+what, func() error {
			if err := check(mc); err != nil {
				return fmt.Errorf("%s: %w", m.Name, err)
			}
			return nil
		})
	}
}

// bdDerived is one derived job a bundle should have.
type bdDerived struct {
	id      string
	tags    map[string]string
	descr   string
	dormant bool
}

// bdExpected derives, independently of the manager's code, the derived
// jobs of b as docs/design/bundles.md defines them: replica 0 of every
// spec, then replica 1 of each (b has a resilience policy), ids
// "<bundle>.<replica>.<job>", the template's tags plus bundleId,
// replicaIndex, jobName and dormant=true for manual specs.
func bdExpected(b *managerpb.Bundle) []bdDerived {
	var out []bdDerived
	for r := range 2 {
		for _, s := range b.GetJobs() {
			tags := maps.Clone(s.GetJob().GetTags())
			tags["bundleId"] = bdID(b)
			tags["replicaIndex"] = strconv.Itoa(r)
			tags["jobName"] = s.GetJobName()
			dormant := s.GetStartMode() == "manual"
			if dormant {
				tags["dormant"] = "true"
			}
			out = append(out, bdDerived{id: fmt.Sprintf("%s.%d.%s", bdID(b), r, s.GetJobName()), tags: tags,
				descr: s.GetJob().GetDescription(), dormant: dormant})
		}
	}
	return out
}

// bdConverged checks, as the manager behind mc alone answers, that bundle
// b is stored as sent at generation gen, converged, listing exactly its
// derived jobs (synced, none being removed, none failing), and that
// exactly those jobs carry its bundleId tag, each with the stamped tags,
// its template's description and auto_placement.
func bdConverged(mc *client.NorskManager, b *managerpb.Bundle, gen uint64) error {
	ctx := context.Background()
	id := bdID(b)
	info, err := mc.GetBundle(ctx, client.BundleID(id))
	if err != nil {
		return fmt.Errorf("GetBundle %s: %w", id, err)
	}
	want := bdExpected(b)
	var listed []string
	for _, js := range info.GetJobs() {
		listed = append(listed, js.GetJobId().GetJobId())
		if !js.GetSynced() || js.GetRemoving() || js.GetLastError() != "" {
			return fmt.Errorf("GetBundle %s: job %s synced=%v removing=%v last_error=%q", id, js.GetJobId().GetJobId(), js.GetSynced(), js.GetRemoving(), js.GetLastError())
		}
	}
	var wantIDs []string
	for i, d := range want {
		wantIDs = append(wantIDs, d.id)
		if i < len(info.GetJobs()) && info.GetJobs()[i].GetDormant() != d.dormant {
			return fmt.Errorf("GetBundle %s: job %s dormant=%v, want %v", id, d.id, info.GetJobs()[i].GetDormant(), d.dormant)
		}
	}
	switch {
	case !slices.Equal(listed, wantIDs):
		return fmt.Errorf("GetBundle %s lists jobs %v, want %v", id, listed, wantIDs)
	case !info.GetConverged():
		return fmt.Errorf("GetBundle %s: not converged (generation %d)", id, info.GetGeneration())
	case info.GetGeneration() != gen:
		return fmt.Errorf("GetBundle %s: generation %d, want %d", id, info.GetGeneration(), gen)
	case !proto.Equal(info.GetBundle(), b):
		return fmt.Errorf("GetBundle %s: bundle %v, want %v", id, info.GetBundle(), b)
	}
	found, err := bdTagged(mc, id)
	if err != nil {
		return err
	}
	sort.Strings(wantIDs)
	if !slices.Equal(found, wantIDs) {
		return fmt.Errorf("JobSearch bundleId=%s finds %v, want %v", id, found, wantIDs)
	}
	for _, d := range want {
		r, err := mc.JobByID(ctx, client.JobID(d.id))
		if err != nil {
			return fmt.Errorf("JobById %s: %w", d.id, err)
		}
		j := r.GetJob().GetJob()
		switch {
		case !maps.Equal(j.GetTags(), d.tags):
			return fmt.Errorf("JobById %s: tags %v, want %v", d.id, j.GetTags(), d.tags)
		case j.GetDescription() != d.descr:
			return fmt.Errorf("JobById %s: description %q, want %q", d.id, j.GetDescription(), d.descr)
		case j.GetAutoPlacement() == nil:
			return fmt.Errorf("JobById %s: no auto_placement", d.id)
		case j.GetState() == managerpb.Job_POST:
			return fmt.Errorf("JobById %s: completed", d.id)
		}
	}
	return nil
}

// bdGone checks that bundle id is gone (GetBundle NotFound) and that no
// job carries its bundleId tag.
func bdGone(mc *client.NorskManager, id string) error {
	if _, err := mc.GetBundle(context.Background(), client.BundleID(id)); status.Code(err) != codes.NotFound {
		return fmt.Errorf("GetBundle %s: %v, want NotFound", id, err)
	}
	found, err := bdTagged(mc, id)
	if err != nil {
		return err
	}
	if len(found) > 0 {
		return fmt.Errorf("JobSearch bundleId=%s still finds %v", id, found)
	}
	return nil
}

// bdTagged returns the ids of the jobs tagged bundleId=id, sorted.
func bdTagged(mc *client.NorskManager, id string) ([]string, error) {
	jobs, err := mc.JobSearch(context.Background(), client.TagEq("bundleId", id))
	if err != nil {
		return nil, fmt.Errorf("JobSearch bundleId=%s: %w", id, err)
	}
	var ids []string
	for _, j := range jobs {
		ids = append(ids, j.GetJob().GetJobId().GetJobId())
	}
	sort.Strings(ids)
	return ids, nil
}

// bdDeletedEvents counts the bundle_deleted events by bundle id.
func bdDeletedEvents(ev *testproc.EventLog) map[string]int {
	out := map[string]int{}
	for _, e := range ev.Snapshot() {
		if d := e.GetBundleDeleted(); d != nil {
			out[d.GetBundleId().GetBundleId()]++
		}
	}
	return out
}
