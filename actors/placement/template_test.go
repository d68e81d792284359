package placement

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/norsk-oss/norsk-manager/persistence"
	"github.com/norsk-oss/norsk-manager/proto/commonpb"
	"github.com/norsk-oss/norsk-manager/proto/internalpb"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
)

// putTemplateNode writes a STARTED cluster node of 10 units whose worker
// reported the catalogue name → versions.
func (f *fixture) putTemplateNode(id string, catalogue ...*commonpb.ProductTemplateOffer) {
	f.put(persistence.NodeKey(id), &internalpb.NodeRecord{NodeId: id, Provider: managerpb.NodeProvider_NODE_PROVIDER_CLUSTER,
		State:     managerpb.NodeLifecycle_NODE_LIFECYCLE_STARTED,
		Metadata:  &commonpb.NodeMetadata{NodeId: &commonpb.NodeId{NodeId: id}},
		Resources: &commonpb.NodeResources{Capacity: 10, Templates: catalogue}})
}

// templateJob is an auto-placed job of 1 unit running template name at
// version, in pool (none when "").
func templateJob(id, name, version, pool string) *internalpb.JobRecord {
	var tags map[string]string
	if pool != "" {
		tags = map[string]string{persistence.PoolTag: pool}
	}
	rec := autoJob(id, 1, tags)
	rec.Job.Job.ProductTemplate = &commonpb.ProductTemplateRef{Name: name, Version: version}
	return rec
}

// TestEngine_ProductTemplate: a job with a product template is placed only
// on a node whose record offers its name at its version (what the worker's
// hello reported), and one no node offers waits with the filter's counts.
func TestEngine_ProductTemplate(t *testing.T) {
	f := newFixture(t)
	f.putTemplateNode("n1", &commonpb.ProductTemplateOffer{Name: "hello", Versions: []string{"1.0"}})
	f.putTemplateNode("n2", &commonpb.ProductTemplateOffer{Name: "hello", Versions: []string{"1.1"}},
		&commonpb.ProductTemplateOffer{Name: "ingest", Versions: []string{"2"}})
	f.putNode("n0", 10, "", nil) // a worker without a catalogue
	f.putJob(templateJob("j10", "hello", "1.0", ""))
	f.putJob(templateJob("j11", "hello", "1.1", ""))
	f.putJob(templateJob("ingest", "ingest", "2", ""))
	f.putJob(templateJob("j20", "hello", "2.0", ""))
	f.putJob(autoJob("plain", 1, nil))
	f.pass()
	require.Equal(t, "n1", f.nodeOf("j10", "primary"))
	require.Equal(t, "n2", f.nodeOf("j11", "primary"))
	require.Equal(t, "n2", f.nodeOf("ingest", "primary"))
	require.NotEmpty(t, f.nodeOf("plain", "primary"), "a job without a template goes anywhere")
	require.Empty(t, f.nodeOf("j20", "primary"))
	u, ok := f.eng.LastFailure("j20", "primary")
	require.True(t, ok)
	require.Contains(t, u.Reason, "constraint product_template filtered 3 nodes (wants hello 2.0; hello in other versions 2, no hello 1)")
}

// TestEngine_ProductTemplate_NoNodeCreated: a pooled template job no node
// offers gets no node created for it, pass after pass, and says why; once
// a node whose worker offers the template is there, it is placed on it.
func TestEngine_ProductTemplate_NoNodeCreated(t *testing.T) {
	f, n := newProvisionFixture(t)
	f.putJob(templateJob("t", "hello", "1.0", "elastic"))
	f.putJob(autoJob("plain", 2, map[string]string{persistence.PoolTag: "elastic"}))
	for range 3 {
		f.pass()
	}
	require.Equal(t, map[string]int{"elastic-mock-1": 1}, n.creates, "one node, for the plain job only")
	require.Equal(t, []string{"plain/primary"}, n.node("elastic-mock-1").GetProvisioned().GetForJobs())
	u, ok := f.eng.LastFailure("t", "primary")
	require.True(t, ok)
	require.Contains(t, u.Reason, "no tier of pool elastic declares product template hello 1.0 (PoolTier.templates)")

	n.start("elastic-mock-1", 8) // its worker offers no templates
	f.pass()
	f.pass()
	require.Equal(t, "elastic-mock-1", f.nodeOf("plain", "primary"))
	require.Empty(t, f.nodeOf("t", "primary"))
	require.Equal(t, map[string]int{"elastic-mock-1": 1}, n.creates, "still no node for the template job")

	f.putTemplateNode("slot-1", &commonpb.ProductTemplateOffer{Name: "hello", Versions: []string{"1.0", "1.1"}})
	f.pass()
	require.Equal(t, "slot-1", f.nodeOf("t", "primary"))
}
