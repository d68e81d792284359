package placement

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/norsk-oss/norsk-manager/actors"
	"github.com/norsk-oss/norsk-manager/actors/job"
	"github.com/norsk-oss/norsk-manager/persistence"
	"github.com/norsk-oss/norsk-manager/proto/errorpb"
	"github.com/norsk-oss/norsk-manager/proto/internalpb"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
)

// fakePreempt is the job grain's PreemptJob on a fake record: StopJob's
// checks, the instance STOPPING with history reason JOB_STOPPED_PREEMPTED,
// and job.ApplyPreemption (the grain's own rule for the record and event).
func fakePreempt(rec *internalpb.JobRecord, c *internalpb.PreemptJob, at *timestamppb.Timestamp) (*managerpb.EventStreamEvent, *internalpb.Reply) {
	i := slices.IndexFunc(rec.GetInstances(), func(in *internalpb.Instance) bool { return in.GetRole() == c.GetRole() })
	if i < 0 || rec.Instances[i].GetNodeId() != c.GetNodeId() {
		return nil, actors.Fail(errorpb.Code_FAILED_PRECONDITION, "role %q: no instance on node %q", c.GetRole(), c.GetNodeId())
	}
	in := rec.Instances[i]
	if id := c.GetInstanceId(); id != "" && in.GetInstanceId() != id {
		return nil, actors.Fail(errorpb.Code_FAILED_PRECONDITION, "role %q: a stale preemption of instance %q", c.GetRole(), id)
	}
	in.Status = internalpb.InstanceStatus_INSTANCE_STOPPING
	rec.Job.HistoryEntry = append(rec.Job.HistoryEntry, &managerpb.JobHistoryEntry{HistoryEntry: &managerpb.JobHistoryEntry_JobStopping{
		JobStopping: &managerpb.JobHistoryJobStopping{Timestamp: at, Role: in.GetRole(), NodeMetadata: in.GetNodeMetadata(),
			Reason: managerpb.JobHistoryJobStopping_JOB_STOPPED_PREEMPTED}}})
	return job.ApplyPreemption(rec, c, at), nil
}

func updatedEvent(rec *internalpb.JobRecord) *managerpb.EventStreamEvent {
	return &managerpb.EventStreamEvent{Event: &managerpb.EventStreamEvent_JobUpdated{JobUpdated: &managerpb.JobUpdated{JobWithHistory: rec.GetJob()}}}
}

// bandJob is an auto-placed job of band in pool (none: "") requiring
// capacity units, created at the fixture's now.
func (f *fixture) bandJob(id string, capacity float64, band managerpb.PriorityBand, pool string) *internalpb.JobRecord {
	var tags map[string]string
	if pool != "" {
		tags = map[string]string{persistence.PoolTag: pool}
	}
	rec := autoJob(id, capacity, tags)
	rec.Job.Job.AutoPlacement.Requirements.PriorityBand = band
	rec.Job.HistoryEntry = []*managerpb.JobHistoryEntry{{HistoryEntry: &managerpb.JobHistoryEntry_JobCreated{
		JobCreated: &managerpb.JobHistoryJobCreated{Timestamp: timestamppb.New(f.now)}}}}
	f.putJob(rec)
	return rec
}

const (
	low      = managerpb.PriorityBand_PRIORITY_BAND_LOW
	standard = managerpb.PriorityBand_PRIORITY_BAND_STANDARD
	high     = managerpb.PriorityBand_PRIORITY_BAND_HIGH
)

// putPriorityPool writes pool name (one catch-all tier) with the
// priority settings of p.
func (f *fixture) putPriorityPool(name string, p *managerpb.Pool) {
	p.Name = name
	p.Tiers = []*managerpb.PoolTier{{Name: "any"}}
	f.put(persistence.PlacementPoolKey(name), &internalpb.PoolRecord{Pool: p})
}

// endStopping ends every STOPPING instance as the job grain does once the
// worker confirms: a job_stopped entry (the stopping entry is there).
func (f *fixture) endStopping() {
	f.t.Helper()
	var jobs []*internalpb.JobRecord
	require.NoError(f.t, f.store.View(func(r *persistence.Reader) error {
		return r.Jobs(func(j *internalpb.JobRecord) error { jobs = append(jobs, j); return nil })
	}))
	for _, j := range jobs {
		changed := false
		j.Instances = slices.DeleteFunc(j.Instances, func(in *internalpb.Instance) bool {
			if in.GetStatus() != internalpb.InstanceStatus_INSTANCE_STOPPING {
				return false
			}
			j.Job.HistoryEntry = append(j.Job.HistoryEntry, &managerpb.JobHistoryEntry{HistoryEntry: &managerpb.JobHistoryEntry_JobStopped{
				JobStopped: &managerpb.JobHistoryJobStopped{Timestamp: timestamppb.New(f.now), Role: in.GetRole(), NodeMetadata: in.GetNodeMetadata()}}})
			changed = true
			return true
		})
		if changed {
			f.putJob(j)
		}
	}
}

func (r *fakeRouter) preemptCount() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, c := range r.preempts {
		n += c
	}
	return n
}

// TestEngine_Preempt_StopsLowForHigh: a node full of LOW and STANDARD
// jobs; a HIGH job arrives: the one LOW instance whose room is enough is
// stopped (job_preempted names the HIGH job, the history says PREEMPTED),
// nothing else takes the room while it stops, the HIGH job is placed
// there once the stop is confirmed, the LOW job is not placed back onto
// it (no loop), and it runs again when a second node joins.
func TestEngine_Preempt_StopsLowForHigh(t *testing.T) {
	f := newFixture(t)
	f.putNode("n1", 10, "", nil)
	f.bandJob("l1", 3, low, "")
	f.bandJob("l2", 5, low, "")
	f.bandJob("s1", 2, standard, "")
	f.pass()
	for _, id := range []string{"l1", "l2", "s1"} {
		require.Equal(t, "n1", f.nodeOf(id, "primary"), id)
	}
	h0 := f.head()
	f.bandJob("h", 5, high, "")
	f.pass()

	require.Equal(t, 1, f.router.preemptCount(), "one victim: l2 alone frees 5 units")
	require.Equal(t, internalpb.InstanceStatus_INSTANCE_STOPPING, f.job("l2").GetInstances()[0].GetStatus())
	require.Equal(t, internalpb.InstanceStatus_INSTANCE_RUNNING, f.job("l1").GetInstances()[0].GetStatus())
	require.Equal(t, internalpb.InstanceStatus_INSTANCE_RUNNING, f.job("s1").GetInstances()[0].GetStatus())
	evs := events[*managerpb.EventStreamEvent_JobPreempted](f, h0)
	require.Len(t, evs, 1)
	p := evs[0].JobPreempted
	require.Equal(t, "l2", p.GetJobId().GetJobId())
	require.Equal(t, "h", p.GetForJobId().GetJobId())
	require.Equal(t, "n1", p.GetNodeId().GetNodeId())
	require.Contains(t, p.GetReason(), "fits no node")
	require.Contains(t, p.GetReason(), "l2/primary")
	require.Equal(t, managerpb.JobHistoryJobStopping_JOB_STOPPED_PREEMPTED, lastStopReason(f.job("l2"), "primary"))

	// While l2 stops: no second preemption, h not placed.
	f.pass()
	require.Equal(t, 1, f.router.preemptCount())
	require.Equal(t, "", f.nodeOf("h", "primary"))

	// The stop confirmed: h is placed on the freed room, l2 finds none and
	// never preempts (it is LOW); a pass later nothing has moved.
	f.endStopping()
	f.pass()
	require.Equal(t, "n1", f.nodeOf("h", "primary"))
	require.Equal(t, "", f.nodeOf("l2", "primary"))
	f.pass()
	require.Equal(t, 1, f.router.preemptCount())
	require.Equal(t, 1, f.router.startCount("h", "primary"))

	// Capacity returns: l2 runs again.
	f.putNode("n2", 10, "", nil)
	f.pass()
	require.Equal(t, "n2", f.nodeOf("l2", "primary"))
}

// TestEngine_Preempt_HoldsRoom: with two victims, the room the first one
// frees is held for the HIGH job while the second stops: a STANDARD job
// arriving meanwhile does not take it, and the HIGH job gets the node.
func TestEngine_Preempt_HoldsRoom(t *testing.T) {
	f := newFixture(t)
	f.putNode("n1", 6, "", nil)
	f.bandJob("l1", 3, low, "")
	f.bandJob("l2", 3, low, "")
	f.pass()
	f.bandJob("h", 6, high, "")
	f.pass()
	require.Equal(t, 2, f.router.preemptCount())

	// l1's stop is confirmed, l2's is not; s arrives and would fit l1's room.
	rec := f.job("l1")
	rec.Instances = nil
	f.putJob(rec)
	f.bandJob("s", 3, standard, "")
	f.pass()
	require.Equal(t, "", f.nodeOf("s", "primary"), "the room is held for h")
	require.Equal(t, "", f.nodeOf("l1", "primary"), "the room is held for h")
	require.Equal(t, 2, f.router.preemptCount(), "no second preemption while one is in progress")

	// A new leader (no memory) holds it too: the records say l2 stops for h.
	f.eng = newEngineOn(t, f)
	f.pass()
	require.Equal(t, "", f.nodeOf("s", "primary"))

	f.endStopping()
	f.pass()
	require.Equal(t, "n1", f.nodeOf("h", "primary"))
	require.Equal(t, "", f.nodeOf("s", "primary"))
}

// newEngineOn is a fresh engine (a new leader's) on f's store and router.
func newEngineOn(t *testing.T, f *fixture) *Engine {
	cfg := DefaultConfig()
	cfg.Store, cfg.Router, cfg.Clock = f.store, f.router, func() time.Time { return f.now }
	e, err := New(cfg)
	require.NoError(t, err)
	return e
}

// TestEngine_Preempt_Never: a HIGH job never stops a STANDARD or HIGH job,
// nor a LOW one when its pool disables preemption or when stopping every
// LOW job would not make room; it waits.
func TestEngine_Preempt_Never(t *testing.T) {
	cases := []struct {
		name string
		// pool is the HIGH job's.
		pool  string
		setup func(f *fixture)
	}{
		{"standard and high only", "", func(f *fixture) {
			f.bandJob("s", 5, standard, "")
			f.bandJob("h0", 5, high, "")
		}},
		{"preemption disabled", "live", func(f *fixture) {
			f.putPriorityPool("live", &managerpb.Pool{PreemptionDisabled: true})
			f.bandJob("l", 10, low, "live")
		}},
		{"stopping every low job is not enough", "", func(f *fixture) {
			f.bandJob("l", 4, low, "")
			f.bandJob("s", 6, standard, "")
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			f.putNode("n1", 10, "", nil)
			tc.setup(f)
			f.pass()
			f.bandJob("h", 5, high, tc.pool)
			f.pass()
			f.pass()
			require.Equal(t, 0, f.router.preemptCount())
			require.Equal(t, "", f.nodeOf("h", "primary"))
			for _, c := range f.router.cmds {
				require.Nil(t, c.GetStop(), "no stop sent")
			}
		})
	}
}

// fakeProvisioning says a node is coming for every job by at.
type fakeProvisioning struct{ at time.Time }

func (p fakeProvisioning) NodeComing(string, string) (time.Time, bool) { return p.at, !p.at.IsZero() }

// TestEngine_Preempt_WaitsForProvisioner: a HIGH job whose pool waits 60 s
// for a provisioner does not preempt while a node is coming within that
// time, and preempts once the wait (counted from the record) is over, or
// at once when the node would come too late.
func TestEngine_Preempt_WaitsForProvisioner(t *testing.T) {
	for _, tc := range []struct {
		name     string
		comingIn time.Duration
		// preemptAfter is when the HIGH job preempts (from its creation).
		preemptAfter time.Duration
	}{
		{"coming in time", 30 * time.Second, 61 * time.Second},
		{"coming too late", 90 * time.Second, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			t0 := f.now
			f.eng.cfg.Provisioning = fakeProvisioning{at: t0.Add(tc.comingIn)}
			f.putPriorityPool("live", &managerpb.Pool{HighPriorityProvisionWaitSeconds: 60})
			f.putNode("n1", 10, "", nil)
			f.bandJob("l", 10, low, "live")
			f.pass()
			f.bandJob("h", 5, high, "live")
			f.pass()
			if tc.preemptAfter == 0 {
				require.Equal(t, 1, f.router.preemptCount())
				return
			}
			require.Equal(t, 0, f.router.preemptCount())
			f.now = t0.Add(tc.preemptAfter - 2*time.Second)
			f.pass()
			require.Equal(t, 0, f.router.preemptCount())
			f.now = t0.Add(tc.preemptAfter)
			f.pass()
			require.Equal(t, 1, f.router.preemptCount())
		})
	}
}

// TestEngine_BronzeDrop: a LOW job with nowhere to go is given up once it
// has had no instance for its pool's low_priority_max_wait_seconds,
// counted from the record (a new leader drops it at the same time), with
// a reason naming the wait, why it fits nowhere and the job that
// preempted it; a STANDARD job and a pool without the setting never are.
func TestEngine_BronzeDrop(t *testing.T) {
	f := newFixture(t)
	t0 := f.now
	f.putPriorityPool("live", &managerpb.Pool{LowPriorityMaxWaitSeconds: 60})
	f.putPriorityPool("keep", &managerpb.Pool{})
	f.putNode("n1", 10, "", nil)
	f.bandJob("l", 10, low, "live")
	f.pass()
	require.Equal(t, "n1", f.nodeOf("l", "primary"))
	f.now = t0.Add(10 * time.Second)
	f.bandJob("h", 10, high, "live")
	f.bandJob("l-keep", 1, low, "keep")
	f.bandJob("s", 1, standard, "live")
	f.pass() // h preempts l
	require.Equal(t, 1, f.router.preemptCount())
	f.now = t0.Add(20 * time.Second)
	f.endStopping() // l unplaced since t0+20s
	f.pass()
	require.Equal(t, "n1", f.nodeOf("h", "primary"))

	f.now = t0.Add(79 * time.Second)
	f.pass()
	require.Nil(t, f.job("l").GetJob().GetJob().GetTerminalState())

	// A new leader, never having seen l unplaced, drops it on time.
	f.eng = newEngineOn(t, f)
	f.now = t0.Add(81 * time.Second)
	f.pass()
	ts := f.job("l").GetJob().GetJob().GetTerminalState()
	require.NotNil(t, ts)
	reason := ts.GetFailureReason()
	require.True(t, strings.HasPrefix(reason, "bronze drop: "), reason)
	require.Contains(t, reason, "had no instance for 1m1s (pool live allows 1m0s)")
	require.Contains(t, reason, "fits no node")
	require.Contains(t, reason, "preempted by job h role primary on node n1")
	// The job grain's UpdateJob raises job_updated (the e2e test sees it).
	require.Equal(t, 1, countUpdates(f, "l"))
	for _, id := range []string{"l-keep", "s"} {
		require.Nil(t, f.job(id).GetJob().GetJob().GetTerminalState(), id)
	}
	// Dropped, it is never placed again, even with room.
	f.putNode("n2", 10, "", nil)
	f.pass()
	require.Equal(t, "", f.nodeOf("l", "primary"))
}

// TestUnplacedSince: the newest of creation, update, the role's stops and
// a start time, from the record alone; the recorded failure when the
// history holds none.
func TestUnplacedSince(t *testing.T) {
	at := func(s int) *timestamppb.Timestamp { return timestamppb.New(time.Unix(1000+int64(s), 0)) }
	created := &managerpb.JobHistoryEntry{HistoryEntry: &managerpb.JobHistoryEntry_JobCreated{JobCreated: &managerpb.JobHistoryJobCreated{Timestamp: at(0)}}}
	updated := &managerpb.JobHistoryEntry{HistoryEntry: &managerpb.JobHistoryEntry_JobUpdated{JobUpdated: &managerpb.JobHistoryJobUpdated{Timestamp: at(5)}}}
	stopped := func(role string, s int) *managerpb.JobHistoryEntry {
		return &managerpb.JobHistoryEntry{HistoryEntry: &managerpb.JobHistoryEntry_JobStopped{JobStopped: &managerpb.JobHistoryJobStopped{Timestamp: at(s), Role: role}}}
	}
	for _, tc := range []struct {
		name    string
		history []*managerpb.JobHistoryEntry
		start   *timestamppb.Timestamp
		failure *internalpb.PlacementFailureRecord
		want    *timestamppb.Timestamp
	}{
		{"created", []*managerpb.JobHistoryEntry{created}, nil, nil, at(0)},
		{"updated", []*managerpb.JobHistoryEntry{created, updated}, nil, nil, at(5)},
		{"own stop", []*managerpb.JobHistoryEntry{created, stopped("primary", 9)}, nil, nil, at(9)},
		{"another role's stop", []*managerpb.JobHistoryEntry{created, stopped("backup", 9)}, nil, nil, at(0)},
		{"start time later", []*managerpb.JobHistoryEntry{created}, at(20), nil, at(20)},
		{"history trimmed: the recorded failure", nil, nil,
			&internalpb.PlacementFailureRecord{Role: "primary", Attempt: &managerpb.PlacementAttempt{Since: at(3)}}, at(3)},
		{"nothing known", nil, nil, nil, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := &internalpb.JobRecord{Job: &managerpb.JobWithHistory{Job: &managerpb.Job{StartDateTime: tc.start}, HistoryEntry: tc.history}}
			if tc.failure != nil {
				rec.PlacementFailures = []*internalpb.PlacementFailureRecord{tc.failure}
			}
			got, ok := unplacedSince(rec, "primary")
			if tc.want == nil {
				require.False(t, ok)
				return
			}
			require.True(t, ok)
			require.Equal(t, tc.want.AsTime(), got)
		})
	}
}

// countUpdates is how many UpdateJob commands the engine sent for job id.
func countUpdates(f *fixture, id string) int {
	f.router.mu.Lock()
	defer f.router.mu.Unlock()
	n := 0
	for _, c := range f.router.cmds {
		if c.GetJobId() == id && c.GetUpdate() != nil {
			n++
		}
	}
	return n
}

// TestMetrics_PreemptedAndBronzeDrop: each LOW instance stopped for a HIGH
// job counts preempted once; a drop counts bronze_drop once, however many
// passes see it due.
func TestMetrics_PreemptedAndBronzeDrop(t *testing.T) {
	f := newFixture(t)
	reg := prometheus.NewRegistry()
	m, err := NewMetrics(reg)
	require.NoError(t, err)
	f.eng.cfg.Metrics = m
	t0 := f.now
	f.putPriorityPool("bulk", &managerpb.Pool{LowPriorityMaxWaitSeconds: 30})
	f.putNode("n1", 2, "", nil)
	f.bandJob("l1", 1, low, "bulk")
	f.bandJob("l2", 1, low, "bulk")
	f.pass()
	f.bandJob("h", 2, high, "")
	f.pass()
	f.pass()
	require.Equal(t, 2.0, gathered(t, reg, "norsk_manager_placements_total", ResultPreempted))
	f.endStopping()
	f.pass()
	require.Equal(t, "n1", f.nodeOf("h", "primary"))
	f.now = t0.Add(31 * time.Second)
	f.pass()
	f.pass()
	require.Equal(t, 2.0, gathered(t, reg, "norsk_manager_placements_total", ResultBronzeDrop), "l1 and l2, once each")
	require.Equal(t, 2.0, gathered(t, reg, "norsk_manager_placements_total", ResultTerminal))
}

// TestEngine_Preempt_StaleRead: a pass that read the store before an
// accepted PreemptJob committed still sees the victim running; it treats
// the preemption as in progress and the victim as taken, so it neither
// preempts again nor stops a second LOW job.
func TestEngine_Preempt_StaleRead(t *testing.T) {
	f := newFixture(t)
	f.putNode("n1", 4, "", nil)
	f.bandJob("l1", 2, low, "")
	f.bandJob("l2", 2, low, "")
	f.pass()
	f.bandJob("h", 2, high, "")
	stale, err := readWorld(f.store, f.now)
	require.NoError(t, err)
	f.pass()
	require.Equal(t, 1, f.router.preemptCount())

	hk := key{"h", "primary"}
	node, ok := f.eng.preemptionInProgress(stale, hk)
	require.True(t, ok, "in progress though the stale read shows the victim running")
	require.Equal(t, "n1", node)
	var victim string
	for k := range f.router.preempts {
		victim = strings.TrimSuffix(k, "/primary")
	}
	for _, p := range f.eng.victimsOf(stale) {
		require.NotEqual(t, victim, string(p.Job), "the preempted job is not a victim again")
	}
	// A fresh read shows it stopping: the memory is forgotten.
	fresh, err := readWorld(f.store, f.now)
	require.NoError(t, err)
	f.eng.victimsOf(fresh)
	f.eng.preempt.mu.Lock()
	require.Empty(t, f.eng.preempt.answered)
	f.eng.preempt.mu.Unlock()
	_, ok = f.eng.preemptionInProgress(fresh, hk)
	require.True(t, ok, "the record says it now")
}

// TestEngine_Preempt_NamesTheInstance: the PreemptJob names the victim's
// instance id as the pass read it, so a preemption delivered late (a
// leader frozen meanwhile) cannot stop an instance started since under the
// same role on the same node: the grain refuses it as stale.
func TestEngine_Preempt_NamesTheInstance(t *testing.T) {
	f := newFixture(t)
	f.putNode("n1", 10, "", nil)
	f.bandJob("l1", 8, low, "")
	f.pass()
	require.Equal(t, "n1", f.nodeOf("l1", "primary"))
	rec := f.job("l1")
	rec.Instances[0].InstanceId = "l1-primary-a"
	f.putJob(rec)
	f.bandJob("h", 5, high, "")
	f.pass()
	require.Equal(t, 1, f.router.preemptCount())
	f.router.mu.Lock()
	var sent *internalpb.PreemptJob
	for _, c := range f.router.cmds {
		if p := c.GetPreempt(); p != nil {
			sent = p
		}
	}
	f.router.mu.Unlock()
	require.NotNil(t, sent)
	require.Equal(t, "l1-primary-a", sent.GetInstanceId())
}
