package node

import (
	"testing"

	"github.com/norsk-oss/norsk-manager/proto/commonpb"
	"github.com/norsk-oss/norsk-manager/proto/errorpb"
	"github.com/norsk-oss/norsk-manager/proto/internalpb"
	"github.com/norsk-oss/norsk-manager/proto/workerpb"
)

func TestGrain_TemplateRefusal(t *testing.T) {
	withCatalogue := &internalpb.NodeRecord{Resources: &commonpb.NodeResources{Capacity: 1, Templates: []*commonpb.ProductTemplateOffer{
		{Name: "hello", Versions: []string{"1.0", "1.1"}}, {Name: "ingest", Versions: []string{"2"}}}}}
	job := func(name, version string) *workerpb.WorkerJob {
		return &workerpb.WorkerJob{ProductTemplate: &commonpb.ProductTemplateRef{Name: name, Version: version}}
	}
	cases := []struct {
		name string
		rec  *internalpb.NodeRecord
		job  *workerpb.WorkerJob
		want string // "" = accepted
	}{
		{"no template", withCatalogue, &workerpb.WorkerJob{}, ""},
		{"empty template", withCatalogue, job("", ""), ""},
		{"offered", withCatalogue, job("hello", "1.1"), ""},
		{"other version", withCatalogue, job("hello", "2.0"), "node n1 has no product template hello 2.0; it has: hello (1.0, 1.1), ingest (2)"},
		{"unknown name", withCatalogue, job("other", "1"), "node n1 has no product template other 1; it has: hello (1.0, 1.1), ingest (2)"},
		{"no catalogue", &internalpb.NodeRecord{Resources: &commonpb.NodeResources{Capacity: 1}}, job("hello", "1.0"),
			"node n1 has no product template hello 1.0; it has: none"},
		{"never reported resources", &internalpb.NodeRecord{}, job("hello", "1.0"), "node n1 has no product template hello 1.0; it has: none"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := &grain{id: "n1", rec: tc.rec}
			r := g.templateRefusal(tc.job)
			switch {
			case tc.want == "" && r != nil:
				t.Fatalf("refused: %v", r)
			case tc.want == "":
			case r.GetCode() != errorpb.Code_FAILED_PRECONDITION || r.GetMessage() != tc.want:
				t.Fatalf("refusal = %v %q; want FAILED_PRECONDITION %q", r.GetCode(), r.GetMessage(), tc.want)
			}
		})
	}
}
