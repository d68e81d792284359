package worker_test

import (
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/norsk-oss/norsk-manager/proto/commonpb"
	"github.com/norsk-oss/norsk-manager/worker"
)

// The template catalogue (--template-dir, in Config.Resources.templates)
// travels in the registration and in every hello, so that the manager
// places template jobs only where the template is (issue 14 §1).
func TestAgent_Resources_TemplatesInHello(t *testing.T) {
	res := &commonpb.NodeResources{Capacity: 1, Templates: []*commonpb.ProductTemplateOffer{
		{Name: "hello", Versions: []string{"1.0", "1.1"}}, {Name: "live", Versions: []string{"2"}},
	}}
	a, m, _ := registeredAgent(t, func(c *worker.Config) { c.Resources = res })
	if got := m.waitRequests(t, 1)[0].GetResources().GetTemplates(); !equalOffers(got, res.GetTemplates()) {
		t.Errorf("registration templates = %v, want %v", got, res.GetTemplates())
	}
	s := dialSession(t, a.Addr().String(), "node-1", "n1")
	defer s.cancel()
	if got := s.hello(t).GetResources().GetTemplates(); !equalOffers(got, res.GetTemplates()) {
		t.Errorf("hello templates = %v, want %v", got, res.GetTemplates())
	}
}

func equalOffers(a, b []*commonpb.ProductTemplateOffer) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !proto.Equal(a[i], b[i]) {
			return false
		}
	}
	return true
}
