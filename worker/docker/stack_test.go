//go:build linux

package docker

import (
	"context"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/norsk-oss/norsk-manager/proto/commonpb"
	"github.com/norsk-oss/norsk-manager/worker"
	"github.com/norsk-oss/norsk-manager/worker/internal/svcplan"
)

// stackService is a probe service of a stack (what the template glue
// fills from a compose file): restart ON_FAILURE with the defaults, one
// published port 8080 on 127.0.0.1.
func (e *testEnv) stackService(name string, cmd ...string) *serviceSpec {
	return &serviceSpec{
		Name: name, Image: e.image, Entrypoint: []string{"/probe"}, Cmd: cmd,
		Restart: commonpb.Service_ON_FAILURE, RestartCount: svcplan.DefaultRestartCount, RestartPeriod: svcplan.DefaultRestartPeriod,
		mappings: []*commonpb.PortMapping{ephemeral(8080)},
	}
}

// startStack starts specs (in start order) and stack as job id.
func (e *testEnv) startStack(id string, stack *stackSpec, specs ...*serviceSpec) (worker.JobKey, worker.PortMappings, error) {
	def := mkJob(id)
	ports, err := e.r.start(context.Background(), def, func() ([]*serviceSpec, *stackSpec, error) { return specs, stack, nil })
	return worker.KeyOf(def), ports, err
}

func svcURL(ports worker.PortMappings, svc, path string) string {
	return "http://" + strings.TrimPrefix(ports[svc].GetMappings()[0].GetUrl(), "tcp://") + path
}

// A stack's service that depends on another's healthcheck starts only
// once the other is healthy; bind mounts and compose configs are visible;
// two networks resolve their aliases (and only where attached); the
// template labels are set; networks go with the job.
func TestRuntime_Stack_HealthyDependsOnBindsNetworks(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.Network = NetworkJob })
	host := t.TempDir()
	if err := os.WriteFile(filepath.Join(host, "bind.txt"), []byte("from the host\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	conf := filepath.Join(t.TempDir(), "app.conf")
	if err := os.WriteFile(conf, []byte("config file\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	const healthyAfter = time.Second
	db := e.stackService("db", "serve", "--healthy-after", healthyAfter.String())
	db.Healthcheck = &healthcheck{Test: []string{"CMD", "/probe", "health", "http://127.0.0.1:8080/healthz"},
		Interval: 100 * time.Millisecond, Timeout: 2 * time.Second, Retries: 100}
	db.Networks = []networkAttach{{Name: "back", Aliases: []string{"database"}}}
	db.Volumes = []volumeMount{{Volume: "cache", Target: "/cache"}}
	web := e.stackService("web", "serve")
	web.DependsOn, web.Conditions = []string{"db"}, map[string]string{"db": "healthy"}
	web.Networks = []networkAttach{{Name: "front", Aliases: []string{"www"}}, {Name: "back"}}
	web.Binds = []bindMount{{Source: host, Target: "/mnt/host", ReadOnly: true}, {Source: conf, Target: "/etc/app.conf", ReadOnly: true}}
	web.Labels = map[string]string{LabelTemplate: "hello", LabelTemplateVersion: "1.0.0"}

	key, ports, err := e.startStack("stack", &stackSpec{Networks: []string{"front", "back"}, Volumes: []string{"cache"}}, db, web)
	if err != nil {
		t.Fatal(err)
	}
	e.c.Wait(t, "job_started", isKind(key, worker.EventStarted))
	e.c.Wait(t, "db healthy", isInfo(key, "db", "health: healthy"))

	dbInfo, webInfo := e.inspectService(key, "db"), e.inspectService(key, "web")
	dbStart, _ := time.Parse(time.RFC3339Nano, dbInfo.State.StartedAt)
	webStart, _ := time.Parse(time.RFC3339Nano, webInfo.State.StartedAt)
	// db answers /healthz only healthyAfter after it started, so web,
	// started once db was healthy, cannot have started earlier.
	if webStart.Before(dbStart.Add(healthyAfter)) {
		t.Errorf("web started at %s, db at %s: web did not wait for db's healthcheck (%s)", webStart, dbStart, healthyAfter)
	}
	if dbInfo.State.Health == nil || dbInfo.State.Health.Status != "healthy" {
		t.Errorf("db health %+v, want healthy", dbInfo.State.Health)
	}

	if got := get(t, svcURL(ports, "web", "/file?path=/mnt/host/bind.txt")); got != "from the host\n" {
		t.Errorf("bind mount: %q", got)
	}
	if got := get(t, svcURL(ports, "web", "/file?path=/etc/app.conf")); got != "config file\n" {
		t.Errorf("mounted config: %q", got)
	}
	if resp, err := http.Post(svcURL(ports, "web", "/write?path=/mnt/host/x"), "text/plain", strings.NewReader("no")); err != nil {
		t.Fatal(err)
	} else if resp.Body.Close(); resp.StatusCode == http.StatusOK {
		t.Error("a write into the read-only bind mount succeeded")
	}
	for _, tc := range []struct{ from, host string }{{"web", "database"}, {"web", "db"}, {"db", "web"}, {"web", "www"}} {
		if got := get(t, svcURL(ports, tc.from, "/resolve?host="+tc.host)); strings.TrimSpace(got) == "" {
			t.Errorf("%s resolves %s to nothing", tc.from, tc.host)
		}
	}
	if code := status(t, svcURL(ports, "db", "/resolve?host=www")); code != http.StatusNotFound {
		t.Errorf("db (not on front) resolves www: status %d", code)
	}
	if webInfo.Config.Labels[LabelTemplate] != "hello" || webInfo.Config.Labels[LabelTemplateVersion] != "1.0.0" || webInfo.Config.Labels[LabelJob] != "stack" {
		t.Errorf("labels %v", webInfo.Config.Labels)
	}

	post(t, svcURL(ports, "db", "/write?path=/cache/kept"), "in the stack volume")

	// A restarted worker re-adopts the stack from its record: the same
	// containers, not restarted, still on both networks.
	e.r.Shutdown()
	e.start(func(c *Config) { c.Network = NetworkJob })
	if got := e.r.List(); len(got) != 1 || got[0].Key() != key {
		t.Fatalf("List after restart = %v, want the stack", got)
	}
	after := e.inspectService(key, "web")
	if after.ID != webInfo.ID || after.State.StartedAt != webInfo.State.StartedAt {
		t.Errorf("web restarted by the re-adoption: %s@%s → %s@%s", webInfo.ID, webInfo.State.StartedAt, after.ID, after.State.StartedAt)
	}
	if got := get(t, svcURL(ports, "db", "/file?path=/cache/kept")); got != "in the stack volume" {
		t.Errorf("stack volume after restart: %q", got)
	}
	if len(after.NetworkSettings.Networks) != 2 {
		t.Errorf("web after restart on networks %v, want front and back", after.NetworkSettings.Networks)
	}
	if got := get(t, svcURL(ports, "web", "/resolve?host=database")); strings.TrimSpace(got) == "" {
		t.Error("web no longer resolves database after the restart")
	}

	if err := e.r.Stop(context.Background(), key, time.Second); err != nil {
		t.Fatal(err)
	}
	left := e.leftovers()
	if len(left) != 1 || !strings.HasPrefix(left[0], "volume "+volumeName(e.r.ID(), key, "cache")) {
		t.Fatalf("left %v, want only the stack volume (kept until the job is deleted)", left)
	}
	if err := e.r.DeleteJobData(context.Background(), key.JobID); err != nil {
		t.Fatal(err)
	}
	if left := e.leftovers(); len(left) != 0 {
		t.Fatalf("left %v after DeleteJobData", left)
	}
}

// status returns the status code of a GET of url.
func status(t *testing.T, url string) int {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// depends_on conditions on a real engine: a dependency that turns
// unhealthy fails the job naming both services, one that exits non-zero
// fails a completed_successfully dependant, one that exits 0 lets it
// start. Nothing is left either way.
func TestRuntime_Stack_DependencyConditions(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.Network = NetworkJob })
	cases := []struct {
		name    string
		dep     func() *serviceSpec
		cond    string
		wantErr string // "" : the job starts
	}{
		{"unhealthy", func() *serviceSpec {
			s := e.stackService("db", "serve")
			s.Healthcheck = &healthcheck{Test: []string{"CMD", "/probe", "health", "http://127.0.0.1:1/healthz"},
				Interval: 100 * time.Millisecond, Timeout: time.Second, Retries: 2}
			return s
		}, "healthy", `service "web": dependency "db" is unhealthy`},
		{"completed with code 3", func() *serviceSpec {
			s := e.stackService("db", "exit", "3")
			s.Restart = commonpb.Service_NEVER
			return s
		}, "completed_successfully", `service "web": dependency "db" did not complete successfully: it exited with code 3`},
		{"completed with code 0", func() *serviceSpec {
			s := e.stackService("db", "exit", "0")
			s.Restart = commonpb.Service_NEVER
			return s
		}, "completed_successfully", ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			web := e.stackService("web", "serve")
			web.DependsOn, web.Conditions = []string{"db"}, map[string]string{"db": tc.cond}
			id := strings.ReplaceAll(tc.name, " ", "-")
			key, _, err := e.startStack(id, &stackSpec{Networks: []string{"default"}}, withNet(tc.dep(), "default"), withNet(web, "default"))
			if tc.wantErr == "" {
				if err != nil {
					t.Fatal(err)
				}
				e.c.Wait(t, "job_started", isKind(key, worker.EventStarted))
				if err := e.r.Stop(context.Background(), key, time.Second); err != nil {
					t.Fatal(err)
				}
			} else {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("Start = %v, want %q", err, tc.wantErr)
				}
				e.c.Wait(t, "job_failed", isKind(key, worker.EventFailed))
				if n := e.c.Count(isInfo(key, "web", "started")); n != 0 {
					t.Error("web was started")
				}
			}
			if left := e.leftovers(); len(left) != 0 {
				t.Fatalf("left %v", left)
			}
		})
	}
}

func withNet(s *serviceSpec, net string) *serviceSpec {
	s.Networks = []networkAttach{{Name: net}}
	return s
}

// A Stop while a service waits for its dependency's healthcheck cuts the
// start short: job_stopped (not failed), nothing left.
func TestRuntime_Stack_StopDuringHealthyWait(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.Network = NetworkJob })
	db := e.stackService("db", "serve", "--healthy-after", "1h")
	db.Healthcheck = &healthcheck{Test: []string{"CMD", "/probe", "health", "http://127.0.0.1:8080/healthz"},
		Interval: 100 * time.Millisecond, Timeout: time.Second, Retries: 1000}
	web := e.stackService("web", "serve")
	web.DependsOn, web.Conditions = []string{"db"}, map[string]string{"db": "healthy"}
	startErr := make(chan error, 1)
	key := worker.KeyOf(mkJob("waiting"))
	go func() {
		_, _, err := e.startStack("waiting", &stackSpec{Networks: []string{"n"}}, withNet(db, "n"), withNet(web, "n"))
		startErr <- err
	}()
	e.c.Wait(t, "web waiting", isInfo(key, "", `service "web" waits for "db" to be healthy`))
	if err := e.r.Stop(context.Background(), key, time.Second); err != nil {
		t.Fatal(err)
	}
	e.c.Wait(t, "job_stopped", isKind(key, worker.EventStopped))
	if err := <-startErr; !errors.Is(err, errStoppedWhileStarting) {
		t.Errorf("Start = %v, want errStoppedWhileStarting", err)
	}
	if n := e.c.Count(isKind(key, worker.EventFailed)) + e.c.Count(isInfo(key, "web", "started")); n != 0 {
		t.Errorf("the stopped start also failed, or started web (%d events)", n)
	}
	if left := e.leftovers(); len(left) != 0 {
		t.Fatalf("left %v", left)
	}
}
