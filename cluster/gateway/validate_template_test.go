package gateway

import (
	"strings"
	"testing"

	"github.com/norsk-oss/norsk-manager/proto/commonpb"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
)

func TestValidateJob_ProductTemplate(t *testing.T) {
	tmpl := func(name, version string, params map[string]string) *managerpb.Job {
		return &managerpb.Job{ProductTemplate: &commonpb.ProductTemplateRef{Name: name, Version: version}, ProductTemplateParameters: params}
	}
	cases := []struct {
		name  string
		job   *managerpb.Job
		field string
	}{
		{"no template", &managerpb.Job{}, ""},
		{"empty ref is no template", tmpl("", "", nil), ""},
		{"name and version", tmpl("hello", "1.0", map[string]string{"GREETING": "hi there", "_x9": "", "PORT": "8080"}), ""},
		{"catalogue charset", tmpl("Hello_World-2", "2024.10.1-rc_1", nil), ""},
		{"longest name", tmpl(strings.Repeat("n", 64), "1", nil), ""},
		{"no name", tmpl("", "1.0", nil), "job.product_template.name"},
		{"no version", tmpl("hello", "", nil), "job.product_template.version"},
		{"name with slash", tmpl("a/b", "1", nil), "job.product_template.name"},
		{"name dot-dot", tmpl("..", "1", nil), "job.product_template.name"},
		{"name too long", tmpl(strings.Repeat("n", 65), "1", nil), "job.product_template.name"},
		{"version with space", tmpl("hello", "1 0", nil), "job.product_template.version"},
		{"version not ascii", tmpl("hello", "1.0é", nil), "job.product_template.version"},
		{"parameter starts with a digit", tmpl("hello", "1", map[string]string{"9A": "x"}), `job.product_template_parameters["9A"]`},
		{"parameter with dash", tmpl("hello", "1", map[string]string{"MY-VAR": "x"}), `job.product_template_parameters["MY-VAR"]`},
		{"parameter empty name", tmpl("hello", "1", map[string]string{"": "x"}), `job.product_template_parameters[""]`},
		{"parameter name too long", tmpl("hello", "1", map[string]string{strings.Repeat("A", 257): "x"}),
			`job.product_template_parameters["` + strings.Repeat("A", 257) + `"]`},
		{"parameter value with NUL", tmpl("hello", "1", map[string]string{"A": "x\x00y"}), `job.product_template_parameters["A"]`},
		{"parameter value too long", tmpl("hello", "1", map[string]string{"A": strings.Repeat("v", 32<<10+1)}), `job.product_template_parameters["A"]`},
		{"parameter value not UTF-8", tmpl("hello", "1", map[string]string{"A": "\xff"}), `job.product_template_parameters["A"]`},
		{"launch configs stay opaque", &managerpb.Job{ProductTemplate: &commonpb.ProductTemplateRef{Name: "hello", Version: "1"},
			LaunchConfigJson: strPtr("{not json"), TemplateLaunchDefaultsJson: strPtr("")}, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) { requireInvalidField(t, validateJob(tc.job), tc.field) })
	}
}

func TestValidateBundle_ProductTemplate(t *testing.T) {
	b := &managerpb.Bundle{BundleId: &managerpb.BundleId{BundleId: "b"},
		Jobs: []*managerpb.BundleJobSpec{{JobName: "a", Job: &managerpb.Job{ProductTemplate: &commonpb.ProductTemplateRef{Name: "hello", Version: "../x"}}}}}
	requireInvalidField(t, validateBundle(b), "bundle.jobs[0].job.product_template.version")
}
