//go:build linux

package docker

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/norsk-oss/norsk-manager/proto/commonpb"
	"github.com/norsk-oss/norsk-manager/proto/workerpb"
	"github.com/norsk-oss/norsk-manager/worker"
	"github.com/norsk-oss/norsk-manager/worker/template"
)

// Real-engine tests of product templates: a catalogue written to a
// temporary directory, loaded as --template-dir loads it, its stack run
// from the probe image.

// helloCompose is a two-service template: web waits for api's
// healthcheck, which passes WARMUP after api started.
const helloCompose = `services:
  api:
    image: ${IMAGE}
    command: ["serve", "--listen", "0.0.0.0:8080", "--healthy-after", "${WARMUP:-1s}"]
    healthcheck:
      test: ["CMD", "/probe", "health", "http://127.0.0.1:8080/healthz"]
      interval: 100ms
      timeout: 2s
      retries: 100
    ports: ["8080"]
    restart: on-failure
  web:
    image: ${IMAGE}
    command: ["serve", "--listen", "0.0.0.0:8080"]
    environment:
      GREETING: ${GREETING}
      FROM_DOTENV: ${FROM_DOTENV}
      STREAM: ${STREAM:?set STREAM in the job's parameters}
    ports: ["8080"]
    depends_on:
      api: {condition: service_healthy}
    volumes: ["data:/data"]
    configs:
      - source: banner
        target: /etc/hello/banner.txt
    restart: unless-stopped
volumes:
  data:
configs:
  banner:
    file: ./banner.txt
`

// writeCatalogue writes template hello 1.0 (helloCompose) into a new
// catalogue directory and returns the directory and the version's.
func writeCatalogue(t *testing.T) (dir, version string) {
	t.Helper()
	dir = t.TempDir()
	version = filepath.Join(dir, "hello", "1.0")
	files := map[string]string{
		template.ComposeFile:  helloCompose,
		template.EnvFile:      "GREETING=from .env\nFROM_DOTENV=default from .env\n",
		template.MetadataFile: `{"launchDefaults": {"a": 1, "b": {"c": 2}}}`,
		"banner.txt":          "banner as started\n",
	}
	if err := os.MkdirAll(version, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(version, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir, version
}

func loadCatalogue(t *testing.T, dir string) *template.Catalogue {
	t.Helper()
	c, err := template.LoadCatalogue(context.Background(), dir, worker.TestLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	if r := c.Refused(); len(r) != 0 {
		t.Fatalf("catalogue refused %v", r[0])
	}
	return c
}

// templateJob is job id running template name version with params.
func templateJob(id, name, version string, params map[string]string) *workerpb.WorkerJob {
	j := mkJob(id)
	j.ProductTemplate = &commonpb.ProductTemplateRef{Name: name, Version: version}
	j.ProductTemplateParameters = params
	return j
}

func strPtr(s string) *string { return &s }

// A template job on a host-networking worker: its stack runs on its own
// network (web resolves api), web starts only once api is healthy,
// parameters win over .env defaults, the fused launch config is a file
// and an environment variable in both services, the compose config is
// mounted; a restarted worker without the catalogue re-adopts the
// containers unchanged (same ids, same StartedAt) and a config edited on
// disk meanwhile does not reach the stack.
func TestRuntime_Template_RunsAndIsReadopted(t *testing.T) {
	dir, version := writeCatalogue(t)
	cat := loadCatalogue(t, dir)
	e := newEnv(t, func(c *Config) { c.Templates = cat })
	def := templateJob("tmpl", "hello", "1.0", map[string]string{"IMAGE": e.image, "GREETING": "from the job", "STREAM": "studio-1"})
	def.TemplateLaunchDefaultsJson = strPtr(`{"b": {"d": 3}}`)
	def.LaunchConfigJson = strPtr(`{"a": 9}`)
	key := worker.KeyOf(def)

	ports, err := e.r.Start(context.Background(), def)
	if err != nil {
		t.Fatal(err)
	}
	e.c.Wait(t, "job_started", isKind(key, worker.EventStarted))
	api, web := e.inspectService(key, "api"), e.inspectService(key, "web")
	apiStart, _ := time.Parse(time.RFC3339Nano, api.State.StartedAt)
	webStart, _ := time.Parse(time.RFC3339Nano, web.State.StartedAt)
	if webStart.Before(apiStart.Add(time.Second)) {
		t.Errorf("web started at %s, api at %s: web did not wait for api's healthcheck (healthy 1s after its start)", webStart, apiStart)
	}
	if api.State.Health == nil || api.State.Health.Status != "healthy" {
		t.Errorf("api health %+v, want healthy", api.State.Health)
	}

	const wantLaunch = `{"a":9,"b":{"c":2,"d":3}}`
	for _, svc := range []string{"api", "web"} {
		if got := get(t, svcURL(ports, svc, "/file?path="+template.LaunchConfigPath)); got != wantLaunch {
			t.Errorf("%s: %s holds %s, want %s", svc, template.LaunchConfigPath, got, wantLaunch)
		}
		if got := get(t, svcURL(ports, svc, "/env?name="+template.LaunchConfigEnv)); got != wantLaunch {
			t.Errorf("%s: %s=%s, want %s", svc, template.LaunchConfigEnv, got, wantLaunch)
		}
	}
	for name, want := range map[string]string{"GREETING": "from the job", "FROM_DOTENV": "default from .env", "STREAM": "studio-1", "NORSK_JOB_ID": "tmpl",
		"NORSK_PORT_8080": "8080"} { // the stack's network, not the worker's host networking: the container port
		if got := get(t, svcURL(ports, "web", "/env?name="+name)); got != want {
			t.Errorf("web: %s=%q, want %q", name, got, want)
		}
	}
	if got := get(t, svcURL(ports, "web", "/file?path=/etc/hello/banner.txt")); got != "banner as started\n" {
		t.Errorf("config banner: %q", got)
	}
	if got := get(t, svcURL(ports, "web", "/resolve?host=api")); strings.TrimSpace(got) == "" {
		t.Error("web does not resolve api on the stack's network")
	}
	if l := web.Config.Labels; l[LabelTemplate] != "hello" || l[LabelTemplateVersion] != "1.0" || l[LabelJob] != "tmpl" {
		t.Errorf("labels %v", l)
	}
	if web.HostConfig.RestartPolicy.Name != "no" || len(web.NetworkSettings.Networks) != 1 {
		t.Errorf("web: restart policy %q (want no: the supervisor restarts), networks %v", web.HostConfig.RestartPolicy.Name, web.NetworkSettings.Networks)
	}

	// The worker restarts without any catalogue, after the template was
	// edited on disk: the stack is re-adopted from its record alone.
	if err := os.WriteFile(filepath.Join(version, "banner.txt"), []byte("edited later\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	e.r.Shutdown()
	e.start(nil)
	if got := e.r.List(); len(got) != 1 || got[0].Key() != key {
		t.Fatalf("List after restart = %v, want the template job", got)
	}
	for svc, before := range map[string]string{"api": api.ID + "@" + api.State.StartedAt, "web": web.ID + "@" + web.State.StartedAt} {
		after := e.inspectService(key, svc)
		if got := after.ID + "@" + after.State.StartedAt; got != before {
			t.Errorf("%s restarted by the re-adoption: %s → %s", svc, before, got)
		}
	}
	if got := get(t, svcURL(ports, "web", "/file?path=/etc/hello/banner.txt")); got != "banner as started\n" {
		t.Errorf("config after the template was edited: %q, want the content it started with", got)
	}
	if got := get(t, svcURL(ports, "api", "/env?name="+template.LaunchConfigEnv)); got != wantLaunch {
		t.Errorf("launch config after restart: %s", got)
	}

	if err := e.r.Stop(context.Background(), key, time.Second); err != nil {
		t.Fatal(err)
	}
	e.c.Wait(t, "job_stopped", isKind(key, worker.EventStopped))
	if left := e.leftovers(); len(left) != 1 || !strings.HasPrefix(left[0], "volume "+volumeName(e.r.ID(), key, "data")) {
		t.Fatalf("left %v, want only the stack volume", left)
	}
	if err := e.r.DeleteJobData(context.Background(), key.JobID); err != nil {
		t.Fatal(err)
	}
}

// A template job that cannot start fails at once with job_failed naming
// the cause, and creates nothing: no container, network, volume or job
// directory.
func TestRuntime_Template_Refused(t *testing.T) {
	dir, _ := writeCatalogue(t)
	cat := loadCatalogue(t, dir)
	cases := []struct {
		name      string
		templates *template.Catalogue
		def       func(image string) *workerpb.WorkerJob
		wantIs    error
		want      []string // substrings of the error
	}{
		{"missing required variable", cat, func(img string) *workerpb.WorkerJob {
			return templateJob("no-stream", "hello", "1.0", map[string]string{"IMAGE": img})
		}, worker.ErrInvalidJob, []string{"requires variable STREAM", "set STREAM in the job's parameters"}},
		{"unknown version", cat, func(img string) *workerpb.WorkerJob {
			return templateJob("v2", "hello", "2.0", map[string]string{"IMAGE": img, "STREAM": "s"})
		}, worker.ErrTemplateUnavailable, []string{`no version "2.0" of template "hello"`, "this worker has: hello (1.0)"}},
		{"unknown template", cat, func(img string) *workerpb.WorkerJob {
			return templateJob("other", "live", "1", nil)
		}, worker.ErrTemplateUnavailable, []string{`no template "live"`, "this worker has: hello (1.0)"}},
		{"no template dir", nil, func(img string) *workerpb.WorkerJob {
			return templateJob("none", "hello", "1.0", nil)
		}, worker.ErrTemplateUnavailable, []string{`no template "hello"`, "no --template-dir"}},
		{"launch config too large for its variable", cat, func(img string) *workerpb.WorkerJob {
			j := templateJob("big", "hello", "1.0", map[string]string{"IMAGE": img, "STREAM": "s"})
			j.LaunchConfigJson = strPtr(`{"x": "` + strings.Repeat("a", 200<<10) + `"}`)
			return j
		}, worker.ErrInvalidJob, []string{"the fused launch config", "as NORSK_LAUNCH_CONFIG it must be shorter than"}},
		{"template and services", cat, func(img string) *workerpb.WorkerJob {
			j := templateJob("both", "hello", "1.0", map[string]string{"IMAGE": img, "STREAM": "s"})
			j.Services = []*commonpb.Service{{Name: "extra"}}
			return j
		}, worker.ErrInvalidJob, []string{"product_template and services are both set"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, func(c *Config) { c.Templates = tc.templates })
			def := tc.def(e.image)
			key := worker.KeyOf(def)
			_, err := e.r.Start(context.Background(), def)
			if !errors.Is(err, tc.wantIs) {
				t.Fatalf("Start = %v, want %v", err, tc.wantIs)
			}
			ev := e.c.Wait(t, "job_failed", isKind(key, worker.EventFailed))
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) || !strings.Contains(ev.Reason, w) {
					t.Errorf("error %q / job_failed reason %q: want %q", err, ev.Reason, w)
				}
			}
			if left := e.leftovers(); len(left) != 0 {
				t.Errorf("left %v", left)
			}
			if entries, _ := os.ReadDir(filepath.Join(e.dir, "jobs")); len(entries) != 0 {
				t.Errorf("job directories left: %v", entries)
			}
			if got := e.r.List(); len(got) != 0 {
				t.Errorf("List = %v", got)
			}
		})
	}
}
