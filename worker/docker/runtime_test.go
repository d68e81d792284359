//go:build linux

package docker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/api/types/network"
	"github.com/docker/docker/client"

	"github.com/norsk-oss/norsk-manager/proto/commonpb"
	"github.com/norsk-oss/norsk-manager/proto/workerpb"
	"github.com/norsk-oss/norsk-manager/test/dockerenv"
	"github.com/norsk-oss/norsk-manager/worker"
)

// These tests run containers on the local Docker engine (dockerenv.Client
// skips them without one, unless NORSK_REQUIRE_DOCKER=1), from the probe
// image (test/containers/probe), with host networking and loopback ports
// only.

// testEnv is one runtime over a fresh state directory.
type testEnv struct {
	t     *testing.T
	cli   *client.Client
	image string
	dir   string
	r     *Runtime
	c     *worker.Collector
}

func newEnv(t *testing.T, mutate func(*Config)) *testEnv {
	t.Helper()
	cli := dockerenv.Client(t)
	e := &testEnv{t: t, cli: cli, image: dockerenv.ProbeImage(t, cli), dir: t.TempDir()}
	e.start(mutate)
	dockerenv.Cleanup(t, cli, LabelWorker, e.r.ID())
	return e
}

// start creates and restores a runtime over e.dir.
func (e *testEnv) start(mutate func(*Config)) {
	e.t.Helper()
	cfg := DevConfig()
	cfg.StateDir = e.dir
	cfg.Client = e.cli
	cfg.Logger = worker.TestLogger(e.t)
	if mutate != nil {
		mutate(&cfg)
	}
	r, err := New(context.Background(), cfg)
	if err != nil {
		e.t.Fatal(err)
	}
	e.r = r
	e.t.Cleanup(r.Shutdown)
	e.c = worker.Collect(e.t, r)
	if err := r.Restore(context.Background()); err != nil {
		e.t.Fatal(err)
	}
}

// leftovers returns what the runtime left on the engine.
func (e *testEnv) leftovers() []string {
	e.t.Helper()
	got, err := dockerenv.Leftovers(context.Background(), e.cli, LabelWorker, e.r.ID())
	if err != nil {
		e.t.Fatal(err)
	}
	return got
}

func (e *testEnv) svc(name string, args ...string) *commonpb.Service {
	return &commonpb.Service{
		Name:      name,
		Container: &commonpb.Service_Docker{Docker: &commonpb.DockerContainer{ContainerUrl: &commonpb.ContainerUrl{Url: e.image}}},
		Command:   strings.Join(args, " "),
	}
}

func mkJob(id string, svcs ...*commonpb.Service) *workerpb.WorkerJob {
	return &workerpb.WorkerJob{JobId: &commonpb.JobId{JobId: id}, Role: "primary", Services: svcs}
}

func ephemeral(port uint32) *commonpb.PortMapping {
	return &commonpb.PortMapping{ContainerPort: port, Protocol: commonpb.ProtocolFamily_TCP,
		HostPort: &commonpb.PortMapping_Ephemeral{Ephemeral: &commonpb.HostPortEphemeral{}}}
}

func isKind(key worker.JobKey, k worker.EventKind) func(worker.Event) bool {
	return func(ev worker.Event) bool { return ev.Key == key && ev.Kind == k }
}

func isInfo(key worker.JobKey, svc, text string) func(worker.Event) bool {
	return func(ev worker.Event) bool {
		if ev.Key != key || ev.Info == nil {
			return false
		}
		switch {
		case ev.Info.GetServiceStarted() != nil:
			return svc == ev.Info.GetServiceStarted().GetServiceName() && text == "started"
		case ev.Info.GetServiceRestarting() != nil:
			return svc == ev.Info.GetServiceRestarting().GetServiceName() && text == "restarting"
		case ev.Info.GetContainerEvent() != nil:
			ce := ev.Info.GetContainerEvent()
			return svc == ce.GetServiceName() && strings.Contains(ce.GetText(), text)
		case ev.Info.GetComposeMessage() != nil:
			return svc == "" && strings.Contains(ev.Info.GetComposeMessage().GetStage().String()+" "+ev.Info.GetComposeMessage().GetText(), text)
		}
		return false
	}
}

// get fetches url and returns the body; it fails the test on a non-200.
func get(t *testing.T, url string) string {
	t.Helper()
	var last error
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		resp, err := http.Get(url)
		if err == nil {
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return string(body)
			}
			last = fmt.Errorf("%s: %s %s", url, resp.Status, body)
		} else {
			last = err
		}
		time.Sleep(50 * time.Millisecond) // poll until the service listens
	}
	t.Fatalf("GET %s: %v", url, last)
	return ""
}

func post(t *testing.T, url, body string) {
	t.Helper()
	resp, err := http.Post(url, "text/plain", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("POST %s: %s", url, resp.Status)
	}
}

func TestRuntime_TwoServices_DependsOnPortsEnvVolumeFile(t *testing.T) {
	e := newEnv(t, nil)
	db := e.svc("db", "serve")
	db.Parameters = &commonpb.ServiceParameters{
		PortMappings:         []*commonpb.PortMapping{ephemeral(8080)},
		EnvironmentVariables: []*commonpb.EnvironmentVariable{{Name: "ROLE_NAME", Value: "database"}},
		VolumeMounts:         []*commonpb.VolumeMount{{VolumeName: "data", ContainerPath: "/data"}},
		SharedMemorySize:     &commonpb.OptionalInt64{Value: 128 << 20},
		CpuSet:               []uint32{0},
	}
	web := e.svc("web", "serve")
	web.DependsOn = []string{"db"}
	web.Parameters = &commonpb.ServiceParameters{
		PortMappings: []*commonpb.PortMapping{ephemeral(8080)},
		VolumeMounts: []*commonpb.VolumeMount{{VolumeName: "data", ContainerPath: "/ro", ReadOnly: true}},
	}
	j := mkJob("two", web, db) // web first: dependsOn must still start db first
	j.Volumes = []string{"data"}
	j.WriteFiles = []*commonpb.WriteFile{
		{Path: "/etc/app.conf", Contents: []byte("hello file\n"), Services: []string{"web"}},
		{Path: "conf/rel.txt", Contents: []byte("relative\n")},
	}
	key := worker.KeyOf(j)

	ports, err := e.r.Start(context.Background(), j)
	if err != nil {
		t.Fatal(err)
	}
	e.c.Wait(t, "job_started", isKind(key, worker.EventStarted))
	dbURL := "http://" + strings.TrimPrefix(ports["db"].GetMappings()[0].GetUrl(), "tcp://")
	webURL := "http://" + strings.TrimPrefix(ports["web"].GetMappings()[0].GetUrl(), "tcp://")
	if dbURL == webURL || ports["db"].GetMappings()[0].GetTarget() != 8080 {
		t.Fatalf("ports: %v", ports)
	}

	// Start order: db's service_started before web's.
	var order []string
	for _, ev := range e.c.All() {
		if s := ev.Info.GetServiceStarted(); s != nil {
			order = append(order, s.GetServiceName())
		}
	}
	if strings.Join(order, ",") != "db,web" {
		t.Errorf("start order = %v, want db,web", order)
	}
	for _, stage := range []string{"BUILD", "CREATE", "START"} {
		e.c.Wait(t, "compose "+stage, isInfo(key, "", stage))
	}

	if got := get(t, dbURL+"/env?name=ROLE_NAME"); got != "database" {
		t.Errorf("db env ROLE_NAME = %q", got)
	}
	if got := get(t, dbURL+"/env?name=NORSK_JOB_ID"); got != "two" {
		t.Errorf("db env NORSK_JOB_ID = %q", got)
	}
	if got := get(t, webURL+"/file?path=/etc/app.conf"); got != "hello file\n" {
		t.Errorf("web /etc/app.conf = %q", got)
	}
	if got := get(t, webURL+"/file?path=/conf/rel.txt"); got != "relative\n" {
		t.Errorf("web conf/rel.txt (relative to the image's working directory /) = %q", got)
	}
	if resp, err := http.Get(dbURL + "/file?path=/etc/app.conf"); err != nil || resp.StatusCode != http.StatusNotFound {
		t.Errorf("db sees a file written only for web: %v %v", resp, err)
	}
	post(t, dbURL+"/write?path=/data/x.txt", "in the volume")
	if got := get(t, webURL+"/file?path=/ro/x.txt"); got != "in the volume" {
		t.Errorf("web sees %q through the shared volume", got)
	}
	if resp, err := http.Post(webURL+"/write?path=/ro/y.txt", "text/plain", strings.NewReader("no")); err != nil || resp.StatusCode == http.StatusOK {
		t.Errorf("write to a read-only mount succeeded: %v %v", resp, err)
	}

	// The containers carry their labels, shm size and cpu set.
	list, err := e.cli.ContainerList(context.Background(), container.ListOptions{Filters: filters.NewArgs(
		filters.Arg("label", LabelWorker+"="+e.r.ID()), filters.Arg("label", LabelService+"=db"))})
	if err != nil || len(list) != 1 {
		t.Fatalf("db container by labels: %v %v", list, err)
	}
	info, err := e.cli.ContainerInspect(context.Background(), list[0].ID)
	if err != nil {
		t.Fatal(err)
	}
	if info.HostConfig.ShmSize != 128<<20 || info.HostConfig.CpusetCpus != "0" || info.Config.Labels[LabelJob] != "two" {
		t.Errorf("db container: shm %d cpuset %q labels %v", info.HostConfig.ShmSize, info.HostConfig.CpusetCpus, info.Config.Labels)
	}
	if got := e.r.List(); len(got) != 1 || got[0].Key() != key || len(got[0].Ports["web"].GetMappings()) != 1 {
		t.Errorf("List = %v", got)
	}

	// Stop: job_stopped, and only the named volume survives DOWN.
	if err := e.r.Stop(context.Background(), key, 2*time.Second); err != nil {
		t.Fatal(err)
	}
	e.c.Wait(t, "job_stopped", isKind(key, worker.EventStopped))
	e.c.Wait(t, "compose DOWN", isInfo(key, "", "DOWN"))
	left := e.leftovers()
	if len(left) != 1 || !strings.HasPrefix(left[0], "volume ") {
		t.Fatalf("after stop: %v, want only the volume", left)
	}
	// The volume keeps its data for the next run of the job.
	if _, err := e.r.Start(context.Background(), j); err != nil {
		t.Fatal(err)
	}
	if got := get(t, webURL2(t, e, key)+"/file?path=/ro/x.txt"); got != "in the volume" {
		t.Errorf("volume after restart of the job = %q", got)
	}
	if err := e.r.Stop(context.Background(), key, time.Second); err != nil {
		t.Fatal(err)
	}
	// A deleted job's volumes go.
	if err := e.r.DeleteJobData(context.Background(), key.JobID); err != nil {
		t.Fatal(err)
	}
	if left := e.leftovers(); len(left) != 0 {
		t.Fatalf("after DeleteJobData: %v", left)
	}
}

// webURL2 returns the web service's URL of the running job key.
func webURL2(t *testing.T, e *testEnv, key worker.JobKey) string {
	for _, rj := range e.r.List() {
		if rj.Key() == key {
			return "http://" + strings.TrimPrefix(rj.Ports["web"].GetMappings()[0].GetUrl(), "tcp://")
		}
	}
	t.Fatalf("job %s not listed", key)
	return ""
}

func TestRuntime_RestartPolicyThenFailed(t *testing.T) {
	e := newEnv(t, nil)
	s := e.svc("crash", "exit", "3")
	s.Restart = commonpb.Service_ON_FAILURE
	s.RestartCount = 2
	j := mkJob("crashy", e.svc("ok", "sleep"), s)
	key := worker.KeyOf(j)
	if _, err := e.r.Start(context.Background(), j); err != nil {
		t.Fatal(err)
	}
	failed := e.c.Wait(t, "job_failed", isKind(key, worker.EventFailed))
	for _, want := range []string{`service "crash" exited with code 3`, "restarted 2 times", "ON_FAILURE", "last output"} {
		if !strings.Contains(failed.Reason, want) {
			t.Errorf("reason %q lacks %q", failed.Reason, want)
		}
	}
	if n := e.c.Count(isInfo(key, "crash", "restarting")); n != 2 {
		t.Errorf("service_restarting ×%d, want 2", n)
	}
	if n := e.c.Count(isInfo(key, "crash", "exited with code 3")); n != 3 {
		t.Errorf("exit events ×%d, want 3", n)
	}
	// Each run's output once: a restart does not repeat the earlier runs'.
	if n := e.c.Count(isInfo(key, "crash", "(stdout)")); n != 3 {
		t.Errorf("output lines ×%d, want 3 (one per run)", n)
	}
	if left := e.leftovers(); len(left) != 0 {
		t.Fatalf("a failed job left %v", left)
	}
}

func TestRuntime_NeverPolicyAndCompletion(t *testing.T) {
	e := newEnv(t, nil)
	done := mkJob("done", e.svc("once", "exit", "0"))
	if _, err := e.r.Start(context.Background(), done); err != nil {
		t.Fatal(err)
	}
	e.c.Wait(t, "job_stopped after completion", isKind(worker.KeyOf(done), worker.EventStopped))
	bad := mkJob("bad", e.svc("once", "exit", "4"))
	if _, err := e.r.Start(context.Background(), bad); err != nil {
		t.Fatal(err)
	}
	ev := e.c.Wait(t, "job_failed", isKind(worker.KeyOf(bad), worker.EventFailed))
	if !strings.Contains(ev.Reason, "exited with code 4 (restart policy NEVER)") {
		t.Errorf("reason = %q", ev.Reason)
	}
	if left := e.leftovers(); len(left) != 0 {
		t.Fatalf("left %v", left)
	}
}

func TestRuntime_StopGraceThenKill(t *testing.T) {
	e := newEnv(t, nil)
	j := mkJob("stubborn", e.svc("s", "sleep", "--ignore-term"))
	key := worker.KeyOf(j)
	if _, err := e.r.Start(context.Background(), j); err != nil {
		t.Fatal(err)
	}
	// The probe says "sleeping" once it ignores SIGTERM; a stop before
	// that would be obeyed by Go's default handler (exit code 2).
	e.c.Wait(t, "probe ready", isInfo(key, "s", "sleeping"))
	if err := e.r.Stop(context.Background(), key, 300*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	e.c.Wait(t, "kill note", isInfo(key, "s", "did not stop within 300ms; sending SIGKILL"))
	e.c.Wait(t, "job_stopped", isKind(key, worker.EventStopped))
	if left := e.leftovers(); len(left) != 0 {
		t.Fatalf("left %v", left)
	}
}

func TestRuntime_RestoreReadoptsWithoutRestart(t *testing.T) {
	e := newEnv(t, nil)
	s := e.svc("web", "serve")
	s.Parameters = &commonpb.ServiceParameters{PortMappings: []*commonpb.PortMapping{ephemeral(8080)}}
	j := mkJob("adopt", s)
	key := worker.KeyOf(j)
	ports, err := e.r.Start(context.Background(), j)
	if err != nil {
		t.Fatal(err)
	}
	url := "http://" + strings.TrimPrefix(ports["web"].GetMappings()[0].GetUrl(), "tcp://")
	pid := get(t, url+"/pid")
	before := e.inspectService(key, "web")

	e.r.Shutdown() // the worker exits; the container keeps running
	e.start(nil)
	got := e.r.List()
	if len(got) != 1 || got[0].Key() != key || got[0].Ports["web"].GetMappings()[0].GetUrl() != ports["web"].GetMappings()[0].GetUrl() {
		t.Fatalf("after restore: %v", got)
	}
	after := e.inspectService(key, "web")
	if after.ID != before.ID || after.State.StartedAt != before.State.StartedAt || get(t, url+"/pid") != pid {
		t.Fatalf("container restarted: %s@%s → %s@%s", before.ID, before.State.StartedAt, after.ID, after.State.StartedAt)
	}
	// A service dying after the restore is still watched.
	if err := e.cli.ContainerKill(context.Background(), after.ID, "SIGKILL"); err != nil {
		t.Fatal(err)
	}
	ev := e.c.Wait(t, "job_failed", isKind(key, worker.EventFailed))
	if !strings.Contains(ev.Reason, "exited with code 137 (killed by SIGKILL)") {
		t.Errorf("reason = %q", ev.Reason)
	}
}

func (e *testEnv) inspectService(key worker.JobKey, svc string) container.InspectResponse {
	e.t.Helper()
	list, err := e.cli.ContainerList(context.Background(), container.ListOptions{All: true, Filters: filters.NewArgs(
		filters.Arg("label", LabelWorker+"="+e.r.ID()), filters.Arg("label", LabelJob+"="+string(key.JobID)),
		filters.Arg("label", LabelService+"="+svc))})
	if err != nil || len(list) != 1 {
		e.t.Fatalf("container of %s/%s: %v %v", key, svc, list, err)
	}
	info, err := e.cli.ContainerInspect(context.Background(), list[0].ID)
	if err != nil {
		e.t.Fatal(err)
	}
	return info
}

func TestRuntime_MissingImageIsPulled(t *testing.T) {
	e := newEnv(t, nil)
	reg := dockerenv.NewRegistry(t)
	ref := reg.AddProbe(t, "pulled/probe", fmt.Sprintf("t%d", time.Now().UnixNano()))
	t.Cleanup(func() {
		_, _ = e.cli.ImageRemove(context.Background(), ref, image.RemoveOptions{Force: true})
	})
	s := e.svc("p", "sleep")
	s.GetDocker().ContainerUrl.Url = ref
	j := mkJob("pull", s)
	key := worker.KeyOf(j)
	if _, err := e.r.Start(context.Background(), j); err != nil {
		t.Fatal(err)
	}
	e.c.Wait(t, "pulled note", isInfo(key, "", "pulled image "+ref))
	if reg.Pulls("pulled/probe") == 0 {
		t.Error("the registry saw no pull")
	}
	if err := e.r.Stop(context.Background(), key, time.Second); err != nil {
		t.Fatal(err)
	}
}

func TestRuntime_FailuresLeaveNothing(t *testing.T) {
	e := newEnv(t, nil)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	taken := uint32(l.Addr().(*net.TCPAddr).Port)

	pullFails := e.svc("x", "sleep")
	pullFails.GetDocker().ContainerUrl.Url = "127.0.0.1:1/nothing/here:v1"
	portTaken := e.svc("x", "serve")
	portTaken.Parameters = &commonpb.ServiceParameters{PortMappings: []*commonpb.PortMapping{{ContainerPort: 8080,
		HostPort: &commonpb.PortMapping_Specific{Specific: &commonpb.HostPortSpecific{Port: taken}}}}}
	badMount := e.svc("x", "sleep")
	badMount.Parameters = &commonpb.ServiceParameters{VolumeMounts: []*commonpb.VolumeMount{{VolumeName: "nope", ContainerPath: "/data"}}}
	relMount := e.svc("x", "sleep")
	relMount.Parameters = &commonpb.ServiceParameters{VolumeMounts: []*commonpb.VolumeMount{{VolumeName: "v", ContainerPath: "data"}}}
	noImage := &commonpb.Service{Name: "x", Command: "sleep 1"}
	badCPU := e.svc("x", "sleep")
	badCPU.Parameters = &commonpb.ServiceParameters{CpuSet: []uint32{4096}}
	// A service that starts fine before one that fails to start: the
	// started one must be removed too.
	okFirst := e.svc("a", "sleep")

	// A file written over the image's entrypoint, without the execute bit:
	// the engine refuses to start that container, after "a" started.
	startFails := mkJob("start-fails", okFirst, e.svc("b", "sleep"))
	startFails.Services[1].DependsOn = []string{"a"}
	startFails.WriteFiles = []*commonpb.WriteFile{{Path: "/probe", Contents: []byte("not a program"), Services: []string{"b"}}}

	tests := []struct {
		name    string
		job     *workerpb.WorkerJob
		invalid bool
		want    string
	}{
		{"failed pull", mkJob("pull-fails", pullFails), false, "pull image 127.0.0.1:1/nothing/here:v1"},
		{"port taken", mkJob("port-taken", okFirst, portTaken), false, fmt.Sprintf("port 127.0.0.1:%d is not free", taken)},
		{"start refused by the engine", startFails, false, `start service "b"`},
		{"unknown volume", mkJob("bad-mount", badMount), true, `volume_mounts[0].volume_name "nope" is not one of the job's volumes`},
		{"relative mount", func() *workerpb.WorkerJob { j := mkJob("rel-mount", relMount); j.Volumes = []string{"v"}; return j }(), true, "must be an absolute path"},
		{"no image", mkJob("no-image", noImage), true, "has no docker.container_url"},
		{"cpu", mkJob("bad-cpu", badCPU), true, "names CPU 4096"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			key := worker.KeyOf(tt.job)
			_, err := e.r.Start(context.Background(), tt.job)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Start error = %v, want it to contain %q", err, tt.want)
			}
			if errors.Is(err, worker.ErrInvalidJob) != tt.invalid {
				t.Errorf("ErrInvalidJob = %v, want %v", errors.Is(err, worker.ErrInvalidJob), tt.invalid)
			}
			ev := e.c.Wait(t, "job_failed", isKind(key, worker.EventFailed))
			if !strings.Contains(ev.Reason, tt.want) {
				t.Errorf("job_failed reason %q lacks %q", ev.Reason, tt.want)
			}
			if left := e.leftovers(); len(left) != 0 {
				t.Fatalf("left %v", left)
			}
			if len(e.r.List()) != 0 {
				t.Fatalf("still listed: %v", e.r.List())
			}
		})
	}
}

func TestRuntime_JobNetworkCreatedAndRemoved(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.Network = NetworkJob })
	s := e.svc("a", "sleep")
	j := mkJob("netted", s)
	key := worker.KeyOf(j)
	if _, err := e.r.Start(context.Background(), j); err != nil {
		t.Fatal(err)
	}
	nets, err := e.cli.NetworkList(context.Background(), network.ListOptions{Filters: filters.NewArgs(filters.Arg("label", LabelWorker+"="+e.r.ID()))})
	if err != nil || len(nets) != 1 || nets[0].Name != projectName(e.r.ID(), key) {
		t.Fatalf("project network: %v %v", nets, err)
	}
	info := e.inspectService(key, "a")
	if _, ok := info.NetworkSettings.Networks[nets[0].Name]; !ok {
		t.Fatalf("container not on the project network: %v", info.NetworkSettings.Networks)
	}
	if err := e.r.Stop(context.Background(), key, time.Second); err != nil {
		t.Fatal(err)
	}
	if left := e.leftovers(); len(left) != 0 {
		t.Fatalf("left %v", left)
	}
}

func TestRuntime_MediaContainer(t *testing.T) {
	var img string
	e := newEnv(t, nil)
	img = e.image
	e.r.Shutdown()
	e.start(func(c *Config) { c.MediaImages = map[string]string{"LTS": img} })
	j := mkJob("media")
	j.NorskMediaVersion = "LTS"
	j.NorskCpuList = []uint32{0}
	j.NorskServiceParameters = &commonpb.ServiceParameters{EnvironmentVariables: []*commonpb.EnvironmentVariable{{Name: "PROBE_MODE", Value: "sleep"}}}
	key := worker.KeyOf(j)
	if _, err := e.r.Start(context.Background(), j); err != nil {
		t.Fatal(err)
	}
	info := e.inspectService(key, MediaServiceName)
	if !info.State.Running || info.HostConfig.CpusetCpus != "0" || info.Config.Image != img {
		t.Fatalf("media container: running %v cpuset %q image %s", info.State.Running, info.HostConfig.CpusetCpus, info.Config.Image)
	}
	// A version without an image fails clearly.
	other := mkJob("media-latest")
	other.NorskMediaVersion = "LATEST"
	if _, err := e.r.Start(context.Background(), other); err == nil || !strings.Contains(err.Error(), `norsk_media_version "LATEST" has no Norsk Media image on this worker (configured: LTS`) {
		t.Fatalf("Start = %v", err)
	}
	if err := e.r.Stop(context.Background(), key, time.Second); err != nil {
		t.Fatal(err)
	}
}

func TestRuntime_StopDuringPullIsAStop(t *testing.T) {
	e := newEnv(t, nil)
	// A "registry" that accepts connections and never answers: the pull
	// hangs until the stop cuts it short.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		var held []net.Conn
		defer func() {
			for _, c := range held {
				c.Close()
			}
		}()
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			held = append(held, c)
		}
	}()
	s := e.svc("x", "sleep")
	s.GetDocker().ContainerUrl.Url = l.Addr().String() + "/hangs/forever:v1"
	j := mkJob("slow-pull", e.svc("ok", "sleep"), s)
	key := worker.KeyOf(j)
	startErr := make(chan error, 1)
	go func() {
		_, err := e.r.Start(context.Background(), j)
		startErr <- err
	}()
	e.c.Wait(t, "pulling", isInfo(key, "", "pulling image"))
	if got := e.r.List(); len(got) != 0 {
		t.Errorf("a job still pulling is listed (the hello would report it running): %v", got)
	}
	if err := e.r.Stop(context.Background(), key, time.Second); err != nil {
		t.Fatal(err)
	}
	e.c.Wait(t, "job_stopped", isKind(key, worker.EventStopped))
	if err := <-startErr; !errors.Is(err, errStoppedWhileStarting) {
		t.Errorf("Start = %v, want errStoppedWhileStarting", err)
	}
	if n := e.c.Count(isKind(key, worker.EventFailed)); n != 0 {
		t.Errorf("a stopped start was also reported failed")
	}
	if left := e.leftovers(); len(left) != 0 {
		t.Fatalf("left %v", left)
	}
}
