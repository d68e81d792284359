package gateway

import (
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/norsk-oss/norsk-manager/proto/commonpb"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
)

// TestValidatePool_TierTemplates: PoolTier.templates follows the rules of
// a worker's reported catalogue, the error names the element
// (pool.tiers[1].templates[0].name), and a tier without a provisioner may
// not declare one. A valid catalogue is stored as sent.
func TestValidatePool_TierTemplates(t *testing.T) {
	offer := func(name string, versions ...string) *commonpb.ProductTemplateOffer {
		return &commonpb.ProductTemplateOffer{Name: name, Versions: versions}
	}
	many := make([]string, 65)
	for i := range many {
		many[i] = "v" + strings.Repeat("1", i+1)[:min(i+1, 60)]
	}
	cases := []struct {
		name      string
		templates []*commonpb.ProductTemplateOffer
		noProv    bool
		field     string // "" = valid
	}{
		{"valid", []*commonpb.ProductTemplateOffer{offer("hello", "1.0", "1.1"), offer("ingest", "2")}, false, ""},
		{"none", nil, false, ""},
		{"bad name", []*commonpb.ProductTemplateOffer{offer("hel lo", "1.0")}, false, "pool.tiers[1].templates[0].name"},
		{"dot name", []*commonpb.ProductTemplateOffer{offer("..", "1.0")}, false, "pool.tiers[1].templates[0].name"},
		{"name twice", []*commonpb.ProductTemplateOffer{offer("hello", "1.0"), offer("hello", "2.0")}, false, "pool.tiers[1].templates[1].name"},
		{"no versions", []*commonpb.ProductTemplateOffer{offer("hello")}, false, "pool.tiers[1].templates[0].versions"},
		{"too many versions", []*commonpb.ProductTemplateOffer{offer("hello", many...)}, false, "pool.tiers[1].templates[0].versions"},
		{"bad version", []*commonpb.ProductTemplateOffer{offer("hello", "1.0", "1/1")}, false, "pool.tiers[1].templates[0].versions[1]"},
		{"version twice", []*commonpb.ProductTemplateOffer{offer("hello", "1.0", "1.0")}, false, "pool.tiers[1].templates[0].versions[1]"},
		{"without a provisioner", []*commonpb.ProductTemplateOffer{offer("hello", "1.0")}, true, "pool.tiers[1].templates"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tier := &managerpb.PoolTier{Name: "cloud", Templates: tc.templates,
				Provisioner: &managerpb.PoolTier_Mock{Mock: &managerpb.MockTierProvisioner{Offering: &managerpb.TierInstanceType{Capacity: 8}}}}
			if tc.noProv {
				tier.Provisioner = nil
			}
			in := &managerpb.Pool{Name: "p", Tiers: []*managerpb.PoolTier{{Name: "fixed", NodeSelector: map[string]string{"rack": "a"}}, tier}}
			before := proto.Clone(in)
			out, err := validatePool(in)
			if !proto.Equal(before, in) {
				t.Fatal("validatePool modified its input")
			}
			if tc.field == "" {
				if err != nil {
					t.Fatalf("unexpected error: %v", err)
				}
				if got := out.GetTiers()[1].GetTemplates(); len(got) != len(tc.templates) ||
					(len(got) > 0 && !proto.Equal(got[0], tc.templates[0])) {
					t.Fatalf("templates stored %v, want %v", got, tc.templates)
				}
				return
			}
			msg := status.Convert(err).Message()
			if status.Code(err) != codes.InvalidArgument || !strings.HasPrefix(msg, tc.field+":") {
				t.Fatalf("got %v, want InvalidArgument naming %s", err, tc.field)
			}
		})
	}
}
