//go:build linux

package process

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/norsk-oss/norsk-manager/proto/commonpb"
	"github.com/norsk-oss/norsk-manager/worker"
)

// A job with product_template on the process runtime fails at once with
// ErrTemplateUnavailable instead of running its services (or nothing) as
// if it had none.
func TestRuntime_Start_ProductTemplateUnavailable(t *testing.T) {
	r, c := newTestRuntime(t, t.TempDir(), nil)
	job := testJob("tmpl", svc("a", "exec sleep 30"))
	job.ProductTemplate = &commonpb.ProductTemplateRef{Name: "hello", Version: "1.0"}
	_, err := r.Start(context.Background(), job)
	if !errors.Is(err, worker.ErrTemplateUnavailable) || !strings.Contains(err.Error(), `no template "hello" (version "1.0")`) {
		t.Fatalf("Start = %v, want ErrTemplateUnavailable naming hello 1.0", err)
	}
	ev := c.Wait(t, "job_failed", func(ev worker.Event) bool { return ev.Kind == worker.EventFailed })
	if !strings.Contains(ev.Reason, "--runtime=docker --template-dir") {
		t.Errorf("job_failed reason %q does not say what runs templates", ev.Reason)
	}
	if len(r.List()) != 0 {
		t.Errorf("List = %v", r.List())
	}
}
