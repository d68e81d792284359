package template

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"

	"google.golang.org/protobuf/encoding/protojson"

	"github.com/norsk-oss/norsk-manager/proto/managerpb"
	"github.com/norsk-oss/norsk-manager/proto/workerpb"
)

// exampleDir is examples/hello-template from this package.
var exampleDir = filepath.Join("..", "..", "examples", "hello-template")

// TestExample_HelloTemplate loads the example's catalogue and resolves its
// job.json as the manager forwards it: hello 1.0 is offered, web waits for
// api's healthcheck, parameters override .env, the launch config tiers
// are fused.
func TestExample_HelloTemplate(t *testing.T) {
	c := mustLoad(t, filepath.Join(exampleDir, "catalogue"))
	if r := c.Refused(); len(r) != 0 {
		t.Fatalf("refused: %v", r[0])
	}
	if o := c.Offers(); len(o) != 1 || o[0].GetName() != "hello" || !slices.Equal(o[0].GetVersions(), []string{"1.0"}) {
		t.Fatalf("offers %v, want hello (1.0)", o)
	}
	raw, err := os.ReadFile(filepath.Join(exampleDir, "job.json"))
	if err != nil {
		t.Fatal(err)
	}
	var j managerpb.Job
	if err := protojson.Unmarshal(raw, &j); err != nil {
		t.Fatalf("job.json: %v", err)
	}
	wj := &workerpb.WorkerJob{
		JobId: j.GetJobId(), Role: "primary",
		ProductTemplate:            j.GetProductTemplate(),
		ProductTemplateParameters:  j.GetProductTemplateParameters(),
		LaunchConfigJson:           j.LaunchConfigJson,
		TemplateLaunchDefaultsJson: j.TemplateLaunchDefaultsJson,
	}
	st, err := c.Resolve(context.Background(), wj)
	if err != nil {
		t.Fatal(err)
	}
	wantLaunch := `{"log":{"level":"debug"},"output":{"bitrate":6000000,"codec":"h265"}}`
	if string(st.LaunchConfig) != wantLaunch {
		t.Errorf("launch config %s, want %s", st.LaunchConfig, wantLaunch)
	}
	if len(st.Services) != 2 || st.Services[0].Name != "api" || st.Services[1].Name != "web" {
		t.Fatalf("services %+v, want api and web", st.Services)
	}
	api, web := st.Services[0], st.Services[1]
	if api.Healthcheck == nil || api.Healthcheck.Test[0] != "CMD" || api.Healthcheck.Test[1] != "/probe" {
		t.Errorf("api healthcheck %+v: want the exec form (the image has no shell)", api.Healthcheck)
	}
	if !slices.Equal(web.DependsOn, []Dependency{{Service: "api", Condition: ConditionHealthy}}) {
		t.Errorf("web depends_on %v, want api healthy", web.DependsOn)
	}
	for _, want := range []string{"GREETING=hello, operator", "GREETING_LOUD=hello, operator!", "API_URL=http://api:8081"} {
		if !slices.Contains(web.Environment, want) {
			t.Errorf("web environment %v lacks %s", web.Environment, want)
		}
	}
	if !slices.Contains(api.Environment, "STREAM_NAME=studio-1") {
		t.Errorf("api environment %v lacks the job's STREAM_NAME", api.Environment)
	}
	if web.Image != "norsk-example/probe:dev" || len(web.Ports) != 1 || web.Ports[0].HostPort != 18082 {
		t.Errorf("web image %q ports %+v", web.Image, web.Ports)
	}
	if len(web.Configs) != 1 || !strings.HasSuffix(web.Configs[0].Source, "banner.txt") || web.Configs[0].Target != "/etc/hello/banner.txt" {
		t.Errorf("web configs %+v", web.Configs)
	}

	// Without STREAM_NAME (template.json requires it) the job fails naming it.
	delete(wj.ProductTemplateParameters, "STREAM_NAME")
	if _, err := c.Resolve(context.Background(), wj); err == nil || !strings.Contains(err.Error(), "STREAM_NAME") {
		t.Errorf("without STREAM_NAME: err %v, want one naming it", err)
	}
}

// Resolve is safe for concurrent use: jobs start in parallel on a worker.
func TestResolve_Concurrent(t *testing.T) {
	c := mustLoad(t, filepath.Join(exampleDir, "catalogue"))
	j := job("hello", "1.0", map[string]string{"STREAM_NAME": "s"})
	want, err := c.Resolve(context.Background(), j)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for range 8 {
		wg.Go(func() {
			got, err := c.Resolve(context.Background(), j)
			if err == nil && !reflect.DeepEqual(got, want) {
				err = fmt.Errorf("stack differs: %+v", got)
			}
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
}
