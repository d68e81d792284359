package placement

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/norsk-oss/norsk-manager/actors/bundle"
	"github.com/norsk-oss/norsk-manager/persistence"
	"github.com/norsk-oss/norsk-manager/proto/commonpb"
	"github.com/norsk-oss/norsk-manager/proto/internalpb"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
)

// TestEngine_Pass_CoLocateWaitsForGroupCreation: the bundle grain writes
// the bundle record, listing every derived job, before it creates the job
// records, so a pass can see one member of a co_locate_with group without
// the others. Placed alone, that member would pin the group to a node
// chosen for one job (here n1, the more allocated one, with room for one):
// the others would then fit nowhere for good ("capacity exhausted" behind
// the co_locate_with filter, seen in the e2e bundle scenario). The pass
// waits instead, and the next one, with every record written, places the
// group in one decision on a node with room for it.
func TestEngine_Pass_CoLocateWaitsForGroupCreation(t *testing.T) {
	f := newFixture(t)
	f.putNode("n1", 1.5, "z1", nil)
	f.putNode("n2", 4, "z1", nil)
	busy := autoJob("busy", 0.5, nil)
	busy.Instances = []*internalpb.Instance{{Role: "primary", NodeId: "n1", Status: internalpb.InstanceStatus_INSTANCE_RUNNING}}
	f.putJob(busy)
	svc := &managerpb.Job{Services: []*commonpb.Service{{Name: "s"}}}
	one := &managerpb.JobRequirements{RequiredCapacity: 1}
	b := &managerpb.Bundle{BundleId: &managerpb.BundleId{BundleId: "bd"}, Jobs: []*managerpb.BundleJobSpec{
		{JobName: "enc", Requirements: one, Job: svc},
		{JobName: "pkg", Requirements: one, Job: svc, CoLocateWith: []string{"enc"}},
	}}
	derived := func(name string) *internalpb.JobRecord {
		j := bundle.DerivedJob(b, bundleSpec(b, name), 0, false)
		j.State = managerpb.Job_ACTIVE
		return &internalpb.JobRecord{Job: &managerpb.JobWithHistory{Job: j}}
	}
	f.put(persistence.BundleKey("bd"), &internalpb.BundleRecord{Bundle: b, Generation: 1, Jobs: bundle.Expand(b, 1)})
	f.putJob(derived("pkg"))
	f.pass()
	require.Zero(t, f.router.startCount("bd.0.pkg", "primary"), "pkg waits for enc's record: placed alone it would pin the group")

	f.putJob(derived("enc"))
	f.pass()
	require.Equal(t, "n2", f.nodeOf("bd.0.enc", "primary"))
	require.Equal(t, "n2", f.nodeOf("bd.0.pkg", "primary"))
}
