package placement

import (
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/norsk-oss/norsk-manager/persistence"
	"github.com/norsk-oss/norsk-manager/proto/commonpb"
	"github.com/norsk-oss/norsk-manager/proto/internalpb"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
)

// coreJob is an auto-placed job needing 1 unit and cores whole cores.
func coreJob(id string, cores uint32) *internalpb.JobRecord {
	rec := autoJob(id, 1, nil)
	rec.Job.Job.AutoPlacement.Requirements.RequiredCores = &commonpb.OptionalInt{Value: cores}
	return rec
}

// putCoreNode writes a STARTED cluster node with 10 units offering cores.
func (f *fixture) putCoreNode(id string, cores ...uint32) {
	f.put(persistence.NodeKey(id), &internalpb.NodeRecord{NodeId: id, Provider: managerpb.NodeProvider_NODE_PROVIDER_CLUSTER,
		State:     managerpb.NodeLifecycle_NODE_LIFECYCLE_STARTED,
		Metadata:  &commonpb.NodeMetadata{NodeId: &commonpb.NodeId{NodeId: id}},
		Resources: &commonpb.NodeResources{Capacity: 10, Cores: cores}})
}

// cpusOf is the cpu list recorded on job id's instance of role.
func (f *fixture) cpusOf(id, role string) []uint32 {
	for _, in := range f.job(id).GetInstances() {
		if in.GetRole() == role {
			return in.GetCpuList()
		}
	}
	return nil
}

// startCPUs is the cpu list of the last StartJob sent for job id.
func (r *fakeRouter) startCPUs(id string) []uint32 {
	r.mu.Lock()
	defer r.mu.Unlock()
	for i := len(r.cmds) - 1; i >= 0; i-- {
		if c := r.cmds[i]; c.GetJobId() == id && c.GetStart() != nil {
			return c.GetStart().GetCpuList()
		}
	}
	return nil
}

// TestEngine_CoresAssignedWithoutOverlap: two jobs requiring 2 cores on a
// node offering 4 get disjoint sets, sent with their StartJob and recorded;
// a third finds the cores exhausted. A new engine (a new leader) reading
// the same records agrees that none is free; when an instance ends its
// cores go to the waiting job.
func TestEngine_CoresAssignedWithoutOverlap(t *testing.T) {
	f := newFixture(t)
	f.putCoreNode("n1", 4, 5, 6, 7) // --cores 4-7
	f.putJob(coreJob("a", 2))
	f.putJob(coreJob("b", 2))
	f.pass()
	a, b := f.cpusOf("a", "primary"), f.cpusOf("b", "primary")
	require.Len(t, a, 2)
	require.Len(t, b, 2)
	require.Equal(t, a, f.router.startCPUs("a"), "the StartJob carries the assignment")
	all := append(slices.Clone(a), b...)
	slices.Sort(all)
	require.Equal(t, []uint32{4, 5, 6, 7}, all, "disjoint, and only the offered ids")

	f.putJob(coreJob("c", 1))
	f.pass()
	require.Empty(t, f.nodeOf("c", "primary"))
	u, ok := f.eng.LastFailure("c", "primary")
	require.True(t, ok)
	require.Contains(t, u.Reason, "cores exhausted on 1 node")

	// A new leader's engine: the records alone say the cores are taken.
	f.eng = newEngine(t, f)
	f.pass()
	require.Empty(t, f.nodeOf("c", "primary"), "a new engine must not hand out pinned cores")

	// a completes: its instance ends and it is not placed again.
	f.endInstance(f.job("a"), "primary", managerpb.JobHistoryJobStopping_JOB_STOPPED_USER_REQUESTED, "")
	done := f.job("a")
	done.Job.Job.State = managerpb.Job_POST
	f.putJob(done)
	f.pass()
	require.Equal(t, "n1", f.nodeOf("c", "primary"))
	require.Equal(t, a[:1], f.cpusOf("c", "primary"), "the lowest freed core")
	require.NotContains(t, b, f.cpusOf("c", "primary")[0])
}

// TestEngine_ManualPinsAreTaken: cores a job started by hand is pinned to
// (its own norsk_cpu_list, recorded on the instance) are not handed out.
func TestEngine_ManualPinsAreTaken(t *testing.T) {
	f := newFixture(t)
	f.putCoreNode("n1", 0, 1, 2, 3)
	manual := autoJob("m", 0, nil)
	manual.Job.Job.AutoPlacement = nil
	manual.Instances = []*internalpb.Instance{{Role: "primary", NodeId: "n1", Status: internalpb.InstanceStatus_INSTANCE_RUNNING, CpuList: []uint32{0, 2}}}
	f.putJob(manual)
	f.putJob(coreJob("a", 2))
	f.pass()
	require.Equal(t, []uint32{1, 3}, f.cpusOf("a", "primary"))
}

// TestEngine_NoCoresReportedPlacesNoPinnedJob: a node whose worker offers
// no cores (an old worker) takes no job requiring cores, and the
// explanation says cores, not an unrelated filter.
func TestEngine_NoCoresReportedPlacesNoPinnedJob(t *testing.T) {
	f := newFixture(t)
	f.putNode("old", 10, "", nil)
	f.putJob(coreJob("a", 1))
	f.putJob(autoJob("b", 1, nil))
	f.pass()
	require.Empty(t, f.nodeOf("a", "primary"))
	require.Equal(t, "old", f.nodeOf("b", "primary"), "a job without required cores is placed unpinned")
	require.Empty(t, f.cpusOf("b", "primary"))
	u, _ := f.eng.LastFailure("a", "primary")
	require.Contains(t, u.Reason, "cores exhausted on 1 node")
}

func newEngine(t *testing.T, f *fixture) *Engine {
	t.Helper()
	cfg := f.eng.cfg
	e, err := New(cfg)
	require.NoError(t, err)
	return e
}
