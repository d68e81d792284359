//go:build linux

package docker

import (
	"context"
	"reflect"
	"testing"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"

	"github.com/norsk-oss/norsk-manager/worker"
)

// TestRuntime_Template_RetriedStartMakesOneStack: a StartJob retried with
// the same instance id while the stack waits for a healthcheck (the
// manager's retry after a lost reply) joins the start under way: both
// calls return the same ports and the engine holds one container per
// service of one project.
func TestRuntime_Template_RetriedStartMakesOneStack(t *testing.T) {
	dir, _ := writeCatalogue(t)
	cat := loadCatalogue(t, dir)
	e := newEnv(t, func(c *Config) { c.Templates = cat })
	def := templateJob("retry", "hello", "1.0", map[string]string{"IMAGE": e.image, "STREAM": "s", "WARMUP": "2s"})
	def.InstanceId = "iid-1"
	key := worker.KeyOf(def)

	type result struct {
		ports worker.PortMappings
		err   error
	}
	first := make(chan result, 1)
	go func() {
		p, err := e.r.Start(context.Background(), def)
		first <- result{p, err}
	}()
	e.c.Wait(t, "web waits for api", isInfo(key, "", `service "web" waits for "api" to be healthy`))
	again, err := e.r.Start(context.Background(), def)
	if err != nil {
		t.Fatalf("retried Start: %v", err)
	}
	r1 := <-first
	if r1.err != nil {
		t.Fatalf("first Start: %v", r1.err)
	}
	if !reflect.DeepEqual(r1.ports, again) {
		t.Errorf("ports %v and %v; want the same stack's", r1.ports, again)
	}
	list, err := e.cli.ContainerList(context.Background(), container.ListOptions{All: true,
		Filters: filters.NewArgs(filters.Arg("label", LabelWorker+"="+e.r.ID()), filters.Arg("label", LabelJob+"=retry"))})
	if err != nil {
		t.Fatal(err)
	}
	projects := map[string]int{}
	for _, c := range list {
		projects[c.Labels[LabelProject]]++
	}
	if len(list) != 2 || len(projects) != 1 {
		t.Fatalf("%d containers in projects %v; want api and web of one project", len(list), projects)
	}
}
