package main

import (
	"strings"
	"testing"

	"github.com/norsk-oss/norsk-manager/proto/commonpb"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
)

// TestWriteJobDetails_ProductTemplate: "job get" of a template job names
// the template and version and says its services are the template's,
// rather than "(none)".
func TestWriteJobDetails_ProductTemplate(t *testing.T) {
	resp := &managerpb.JobByIdResponse{Job: &managerpb.JobWithHistory{Job: &managerpb.Job{
		JobId:                     &commonpb.JobId{JobId: "j"},
		ProductTemplate:           &commonpb.ProductTemplateRef{Name: "hello", Version: "1.0"},
		ProductTemplateParameters: map[string]string{"A": "1", "B": "2"},
	}}}
	var b strings.Builder
	if err := writeJobDetails(&b, resp); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"Template:     hello 1.0, 2 parameters (the worker runs its compose stack)\n",
		"Services:\n  (none: the template's)\n",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("job get printed:\n%s\nwant %q", b.String(), want)
		}
	}
}
