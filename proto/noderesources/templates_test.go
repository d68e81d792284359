package noderesources

import (
	"fmt"
	"strings"
	"testing"

	"github.com/norsk-oss/norsk-manager/proto/commonpb"
)

func offer(name string, versions ...string) *commonpb.ProductTemplateOffer {
	return &commonpb.ProductTemplateOffer{Name: name, Versions: versions}
}

func TestValidate_Templates(t *testing.T) {
	many := make([]*commonpb.ProductTemplateOffer, MaxTemplates+1)
	for i := range many {
		many[i] = offer(fmt.Sprintf("t%d", i), "1")
	}
	versions := make([]string, MaxTemplateVersions+1)
	for i := range versions {
		versions[i] = fmt.Sprintf("1.%d", i)
	}
	cases := []struct {
		name   string
		ts     []*commonpb.ProductTemplateOffer
		key    string // "" = valid
		reason string
	}{
		{"none", nil, "", ""},
		{"two", []*commonpb.ProductTemplateOffer{offer("hello", "1.0", "1.1"), offer("ingest_v2-x", "2024.10")}, "", ""},
		{"longest name", []*commonpb.ProductTemplateOffer{offer(strings.Repeat("n", MaxTemplateNameLen), "1")}, "", ""},
		{"empty name", []*commonpb.ProductTemplateOffer{offer("hello", "1"), offer("", "1")}, "1", "must not be empty"},
		{"name with slash", []*commonpb.ProductTemplateOffer{offer("a/b", "1")}, "0", "only letters"},
		{"name dot-dot", []*commonpb.ProductTemplateOffer{offer("..", "1")}, "0", "not a template directory"},
		{"name too long", []*commonpb.ProductTemplateOffer{offer(strings.Repeat("n", MaxTemplateNameLen+1), "1")}, "0", "at most 64"},
		{"name twice", []*commonpb.ProductTemplateOffer{offer("hello", "1"), offer("hello", "2")}, "hello", "listed twice"},
		{"no versions", []*commonpb.ProductTemplateOffer{offer("hello")}, "hello", "no versions"},
		{"version with space", []*commonpb.ProductTemplateOffer{offer("hello", "1 0")}, "hello", "version \"1 0\""},
		{"version twice", []*commonpb.ProductTemplateOffer{offer("hello", "1.0", "1.0")}, "hello", "listed twice"},
		{"too many templates", many, "", "at most 128"},
		{"too many versions", []*commonpb.ProductTemplateOffer{offer("hello", versions...)}, "hello", "at most 64"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := Validate(&commonpb.NodeResources{Capacity: 1, Templates: tc.ts})
			if tc.reason == "" {
				if err != nil {
					t.Fatalf("Validate = %v, want nil", err)
				}
				return
			}
			fe, ok := err.(*FieldError)
			if !ok || fe.Field != "templates" || fe.Key != tc.key || !strings.Contains(fe.Reason, tc.reason) {
				t.Fatalf("Validate = %v; want templates[%s]: …%s…", err, tc.key, tc.reason)
			}
		})
	}
}

func TestOffersTemplate(t *testing.T) {
	r := &commonpb.NodeResources{Capacity: 1, Templates: []*commonpb.ProductTemplateOffer{offer("hello", "1.0", "1.1")}}
	cases := []struct {
		res           *commonpb.NodeResources
		name, version string
		want          bool
	}{
		{r, "hello", "1.0", true},
		{r, "hello", "1.1", true},
		{r, "hello", "2.0", false},
		{r, "Hello", "1.0", false},
		{r, "other", "1.0", false},
		{nil, "hello", "1.0", false},
	}
	for _, tc := range cases {
		if got := OffersTemplate(tc.res, tc.name, tc.version); got != tc.want {
			t.Errorf("OffersTemplate(%v, %s, %s) = %v; want %v", tc.res.GetTemplates(), tc.name, tc.version, got, tc.want)
		}
	}
}

func TestDescribeTemplates(t *testing.T) {
	if got := DescribeTemplates(nil); got != "none" {
		t.Fatalf("DescribeTemplates(nil) = %q", got)
	}
	got := DescribeTemplates([]*commonpb.ProductTemplateOffer{offer("hello", "1.0", "1.1"), offer("ingest", "2")})
	if want := "hello (1.0, 1.1), ingest (2)"; got != want {
		t.Fatalf("DescribeTemplates = %q; want %q", got, want)
	}
}
