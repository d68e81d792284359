package placement

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/norsk-oss/norsk-manager/persistence"
	"github.com/norsk-oss/norsk-manager/proto/commonpb"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
)

// startOffering marks node id STARTED with capacity units and catalogue,
// as its worker's hello does.
func (n *fakeNodes) startOffering(id string, capacity float64, catalogue ...*commonpb.ProductTemplateOffer) {
	rec := n.node(id)
	rec.State = managerpb.NodeLifecycle_NODE_LIFECYCLE_STARTED
	rec.Resources = &commonpb.NodeResources{Capacity: capacity, Templates: catalogue}
	n.f.put(persistence.NodeKey(id), rec)
}

func newTemplateTierFixture(t *testing.T) (*fixture, *fakeNodes) {
	f := newFixture(t)
	n := &fakeNodes{f: f}
	f.router.other = n.request
	mock := func(name string) *managerpb.PoolTier {
		return &managerpb.PoolTier{Name: name, MaxNodes: 4, LingerSeconds: 60,
			Provisioner: &managerpb.PoolTier_Mock{Mock: &managerpb.MockTierProvisioner{Offering: &managerpb.TierInstanceType{Capacity: 8}}}}
	}
	tmpl := mock("tmpl")
	tmpl.Templates = []*commonpb.ProductTemplateOffer{{Name: "hello", Versions: []string{"1.0"}}}
	f.putPool("elastic", 5, 600, mock("plain"), tmpl)
	return f, n
}

// TestEngine_ProductTemplate_DeclaringTier: in an elastic pool a template
// job gets one node from the tier that declares its template (not from
// the plain tier before it), is not placed on it before its worker's
// hello, and is placed on it once the hello offers the template.
func TestEngine_ProductTemplate_DeclaringTier(t *testing.T) {
	f, n := newTemplateTierFixture(t)
	f.putJob(templateJob("t", "hello", "1.0", "elastic"))
	f.pass()
	f.pass() // being created: room coming, no second create
	require.Equal(t, map[string]int{"elastic-tmpl-1": 1}, n.creates)
	require.Equal(t, []string{"t/primary"}, n.node("elastic-tmpl-1").GetProvisioned().GetForJobs())
	u, ok := f.eng.LastFailure("t", "primary")
	require.True(t, ok)
	require.Contains(t, u.Reason, "node elastic-tmpl-1 is being created for it")

	n.startOffering("elastic-tmpl-1", 8, &commonpb.ProductTemplateOffer{Name: "hello", Versions: []string{"1.0"}})
	f.pass()
	require.Equal(t, "elastic-tmpl-1", f.nodeOf("t", "primary"))
	require.Equal(t, map[string]int{"elastic-tmpl-1": 1}, n.creates)
}

// TestEngine_ProductTemplate_ImageLied: a node of the declaring tier whose
// hello lacks the template gets no template job; no second node is
// created for it, also by a new engine (leader change: the backoff is read
// from the node records); the idle node is released after its linger; an
// hour after the lying node's record the tier is tried again.
func TestEngine_ProductTemplate_ImageLied(t *testing.T) {
	f, n := newTemplateTierFixture(t)
	f.putJob(templateJob("t", "hello", "1.0", "elastic"))
	f.pass()
	require.Equal(t, map[string]int{"elastic-tmpl-1": 1}, n.creates)

	n.startOffering("elastic-tmpl-1", 8, &commonpb.ProductTemplateOffer{Name: "hello", Versions: []string{"0.9"}})
	f.pass()
	f.pass()
	require.Empty(t, f.nodeOf("t", "primary"))
	require.Equal(t, map[string]int{"elastic-tmpl-1": 1}, n.creates, "no node after node for a lying image")
	u, ok := f.eng.LastFailure("t", "primary")
	require.True(t, ok)
	require.Contains(t, u.Reason, "its node elastic-tmpl-1 said hello without product template hello 1.0")

	e2, err := New(f.eng.cfg)
	require.NoError(t, err)
	f.eng = e2
	f.pass()
	require.Equal(t, map[string]int{"elastic-tmpl-1": 1}, n.creates, "a new leader agrees")

	f.now = f.now.Add(61 * time.Second)
	f.pass()
	require.Equal(t, []string{"elastic-tmpl-1"}, n.released, "the idle node is released after its linger")

	f.now = f.now.Add(time.Hour)
	f.pass()
	require.Equal(t, 1, n.creates["elastic-tmpl-2"], "after the backoff the tier is tried again")
}
