//go:build linux

package e2e

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	dockerclient "github.com/docker/docker/client"
	"github.com/stretchr/testify/require"

	"github.com/norsk-oss/norsk-manager/client"
	"github.com/norsk-oss/norsk-manager/proto/commonpb"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
	"github.com/norsk-oss/norsk-manager/test/dockerenv"
	"github.com/norsk-oss/norsk-manager/test/testproc"
)

// These tests run a manager and a worker with --runtime=docker
// --docker-network=host as real processes, and the jobs' services as
// containers of the probe image (test/containers/probe) on the local
// Docker engine: dockerenv.Client skips them without one, unless
// NORSK_REQUIRE_DOCKER=1. Every port is on 127.0.0.1, and no image comes
// from anywhere but the engine itself (a pull from 127.0.0.1:1 fails).

// The labels the Docker runtime puts on what it creates
// (docs/design/worker-docker-runtime.md §1): the external contract an
// operator filters by, so spelled out here rather than imported.
const (
	labelWorker  = "io.norsk.worker"
	labelJob     = "io.norsk.job"
	labelService = "io.norsk.service"
)

const dockerRole = "primary"

// dockerCluster is a manager and one Docker worker on a cluster slot,
// with a client and an event log following the manager.
type dockerCluster struct {
	t        *testing.T
	cli      *dockerclient.Client
	image    string // the probe image
	m        *manager
	mc       *client.NorskManager
	ev       *testproc.EventLog
	nodeID   client.NodeID
	token    string
	stateDir string
	wport    int
	w        *testproc.Proc // the current worker process
	wargs    []string       // extra worker flags (newDockerCluster's)
	starts   int
	rid      string // the worker's runtime id: the value of labelWorker
}

func newDockerCluster(t *testing.T, workerArgs ...string) *dockerCluster {
	t.Helper()
	cli := dockerenv.Client(t)
	d := &dockerCluster{t: t, cli: cli, image: dockerenv.ProbeImage(t, cli),
		stateDir: filepath.Join(t.TempDir(), "worker"), wport: testproc.FreePort(t), wargs: workerArgs}
	d.m = startManager(t, filepath.Join(t.TempDir(), "data"), testproc.FreePort(t))
	d.mc = connect(t, d.m.addr)
	d.ev = &testproc.EventLog{}
	d.ev.Follow(t, d.mc, 10*time.Second)
	var err error
	d.nodeID, d.token, err = d.mc.RegisterClusterNode(context.Background(), "docker-worker", nil)
	require.NoError(t, err)

	d.startWorker()
	testproc.Await(t, 20*time.Second, "the worker's runtime id", func() error {
		if !d.w.Running() {
			t.Fatalf("worker exited with %d:\n%s", d.w.Cmd.ProcessState.ExitCode(), d.w.Output())
		}
		b, err := os.ReadFile(filepath.Join(d.stateDir, "docker", "runtime-id"))
		if err != nil {
			return err
		}
		if d.rid = strings.TrimSpace(string(b)); len(d.rid) != 16 {
			return fmt.Errorf("runtime-id holds %q", d.rid)
		}
		return nil
	})
	// Whatever the test leaves (it failed half way), by the runtime id.
	dockerenv.Cleanup(t, cli, labelWorker, d.rid)
	// Cleanups run last-in first-out: the worker is killed before the
	// removal, so it cannot race it (restarting a removed container).
	// Workers started later are killed by their own earlier cleanups.
	t.Cleanup(func() { d.w.Kill() })
	d.awaitWorkerOnline()
	return d
}

// startWorker starts (or restarts) the worker on the slot, with the same
// state directory and listen port each time.
func (d *dockerCluster) startWorker() {
	d.t.Helper()
	d.starts++
	args := append([]string{"norsk-ctl", "--mode=worker", "--runtime=docker", "--docker-network=host",
		"--token", d.token, "--manager-url", d.m.addr, "--listen", testproc.Addr(d.wport),
		"--state-dir", d.stateDir, "--log-level", "debug", "--stop-grace", "2s", "--dial-back-timeout", "3s"}, d.wargs...)
	d.w = start(d.t, fmt.Sprintf("docker-worker-run%d", d.starts), args...)
}

func (d *dockerCluster) awaitWorkerOnline() {
	d.t.Helper()
	testproc.Eventually(d.t, 30*time.Second, "worker online", func() bool {
		if !d.w.Running() {
			d.t.Fatalf("worker exited with %d:\n%s", d.w.Cmd.ProcessState.ExitCode(), d.w.Output())
		}
		return nodeConnected(d.t, d.mc, string(d.nodeID))
	})
}

// svc is a service of the probe image running the probe with args.
func (d *dockerCluster) svc(name string, args ...string) *commonpb.Service {
	return &commonpb.Service{
		Name:      name,
		Container: &commonpb.Service_Docker{Docker: &commonpb.DockerContainer{ContainerUrl: &commonpb.ContainerUrl{Url: d.image}}},
		Command:   strings.Join(args, " "),
	}
}

func ephemeralPort(container uint32) *commonpb.PortMapping {
	return &commonpb.PortMapping{ContainerPort: container, Protocol: commonpb.ProtocolFamily_TCP,
		HostPort: &commonpb.PortMapping_Ephemeral{Ephemeral: &commonpb.HostPortEphemeral{}}}
}

func specificPort(container uint32, host int) *commonpb.PortMapping {
	return &commonpb.PortMapping{ContainerPort: container, Protocol: commonpb.ProtocolFamily_TCP,
		HostPort: &commonpb.PortMapping_Specific{Specific: &commonpb.HostPortSpecific{Port: uint32(host)}}}
}

func dockerJob(id string, svcs ...*commonpb.Service) *managerpb.Job {
	return &managerpb.Job{JobId: &commonpb.JobId{JobId: id}, Tags: map[string]string{"suite": "e2e-docker"}, Services: svcs}
}

// startJob creates job and starts it on the worker.
func (d *dockerCluster) startJob(job *managerpb.Job) {
	d.t.Helper()
	ctx := context.Background()
	_, err := d.mc.CreateJob(ctx, job)
	require.NoError(d.t, err)
	require.NoError(d.t, d.mc.StartJob(ctx, client.JobID(job.GetJobId().GetJobId()), dockerRole, d.nodeID))
}

// history is the job's history as of the latest job_updated event of the
// log (from event from on), with that event's log index; nil if none.
func (d *dockerCluster) history(id string, from int) ([]*managerpb.JobHistoryEntry, uint64) {
	var h []*managerpb.JobHistoryEntry
	var index uint64
	for _, e := range d.ev.Snapshot()[from:] {
		if jh := e.GetJobUpdated().GetJobWithHistory(); jh.GetJob().GetJobId().GetJobId() == id {
			h, index = jh.GetHistoryEntry(), e.GetLogIndex()
		}
	}
	return h, index
}

func lastEntry(h []*managerpb.JobHistoryEntry) *managerpb.JobHistoryEntry {
	if len(h) == 0 {
		return nil
	}
	return h[len(h)-1]
}

// stoppingReasons lists the reasons of the job_stopping entries of h.
func stoppingReasons(h []*managerpb.JobHistoryEntry) []managerpb.JobHistoryJobStopping_Reason {
	var out []managerpb.JobHistoryJobStopping_Reason
	for _, e := range h {
		if s := e.GetJobStopping(); s != nil {
			out = append(out, s.GetReason())
		}
	}
	return out
}

// awaitRunning waits for the job_updated event whose history ends with
// job_running and returns that entry. A job that stops meanwhile fails
// the test at once, with the manager's failure note.
func (d *dockerCluster) awaitRunning(id string) *managerpb.JobHistoryJobRunning {
	d.t.Helper()
	var running *managerpb.JobHistoryJobRunning
	testproc.Await(d.t, 30*time.Second, "job_running of "+id, func() error {
		h, _ := d.history(id, 0)
		last := lastEntry(h)
		if last.GetJobStopped() != nil {
			d.t.Fatalf("job %s stopped instead of running: %v; job_info: %s", id, stoppingReasons(h), strings.Join(d.infoSeq(id), " | "))
		}
		if running = last.GetJobRunning(); running == nil {
			return fmt.Errorf("last history entry %T", last.GetHistoryEntry())
		}
		return nil
	})
	return running
}

// awaitStopped waits for the job_updated event whose history ends with
// job_stopped, and returns the history.
func (d *dockerCluster) awaitStopped(id string) []*managerpb.JobHistoryEntry {
	d.t.Helper()
	var h []*managerpb.JobHistoryEntry
	testproc.Await(d.t, 30*time.Second, "job_stopped of "+id, func() error {
		h, _ = d.history(id, 0)
		if last := lastEntry(h); last.GetJobStopped() == nil {
			return fmt.Errorf("last history entry %T", last.GetHistoryEntry())
		}
		return nil
	})
	return h
}

// awaitFailed waits until the manager records that the worker failed the
// job: a job_updated whose history ends with job_stopping (JOB_FAILED)
// and job_stopped, and the job_info note carrying the worker's reason.
// It returns the reason and the log index of that job_updated event.
func (d *dockerCluster) awaitFailed(id string) (reason string, index uint64) {
	d.t.Helper()
	testproc.Await(d.t, 30*time.Second, "the failure of "+id, func() error {
		h, i := d.history(id, 0)
		if lastEntry(h).GetJobStopped() == nil {
			return fmt.Errorf("last history entry %T; job_info: %s", lastEntry(h).GetHistoryEntry(), strings.Join(d.infoSeq(id), " | "))
		}
		if r := stoppingReasons(h); len(r) == 0 || r[len(r)-1] != managerpb.JobHistoryJobStopping_JOB_STOPPED_JOB_FAILED {
			d.t.Fatalf("job %s stopped for %v, not JOB_STOPPED_JOB_FAILED", id, r)
		}
		index = i
		for _, m := range d.infos(id) {
			// The manager's own note: a container_event without a service.
			if ce := m.GetContainerEvent(); ce != nil && ce.GetServiceName() == "" && strings.HasPrefix(ce.GetText(), "failed: ") {
				reason = strings.TrimPrefix(ce.GetText(), "failed: ")
				return nil
			}
		}
		return fmt.Errorf("no job_info with the failure reason")
	})
	return reason, index
}

// infoEvents returns the job_info events of job id, in delivery order.
func (d *dockerCluster) infoEvents(id string) []*managerpb.EventStreamEvent {
	var out []*managerpb.EventStreamEvent
	for _, e := range d.ev.Snapshot() {
		if ji := e.GetJobInfo(); ji != nil && ji.GetJobKey().GetJobId().GetJobId() == id {
			out = append(out, e)
		}
	}
	return out
}

func (d *dockerCluster) infos(id string) []*commonpb.JobInfoMessage {
	var out []*commonpb.JobInfoMessage
	for _, e := range d.infoEvents(id) {
		out = append(out, e.GetJobInfo())
	}
	return out
}

// infoSeq describes the job_info messages of job id, in delivery order:
// "compose BUILD: …", "service_started db", "service_restarting db",
// "container_event db: …".
func (d *dockerCluster) infoSeq(id string) []string {
	var out []string
	for _, m := range d.infos(id) {
		out = append(out, describeInfo(m))
	}
	return out
}

func describeInfo(m *commonpb.JobInfoMessage) string {
	switch {
	case m.GetComposeMessage() != nil:
		return fmt.Sprintf("compose %s: %s", m.GetComposeMessage().GetStage(), m.GetComposeMessage().GetText())
	case m.GetServiceStarted() != nil:
		return "service_started " + m.GetServiceStarted().GetServiceName()
	case m.GetServiceRestarting() != nil:
		return "service_restarting " + m.GetServiceRestarting().GetServiceName()
	case m.GetContainerEvent() != nil:
		return fmt.Sprintf("container_event %s: %s", m.GetContainerEvent().GetServiceName(), m.GetContainerEvent().GetText())
	}
	return fmt.Sprintf("%T", m.GetMessage())
}

// inOrder checks that seq holds, in this order, an element starting with
// each of prefixes.
func inOrder(seq []string, prefixes ...string) error {
	i := 0
	for _, s := range seq {
		if i < len(prefixes) && strings.HasPrefix(s, prefixes[i]) {
			i++
		}
	}
	if i < len(prefixes) {
		return fmt.Errorf("no %q after %q in %q", prefixes[i], prefixes[:i], seq)
	}
	return nil
}

func count(seq []string, prefix string) int {
	n := 0
	for _, s := range seq {
		if strings.HasPrefix(s, prefix) {
			n++
		}
	}
	return n
}

// leftovers lists what is on the engine with the worker's runtime id.
func (d *dockerCluster) leftovers() []string {
	d.t.Helper()
	left, err := dockerenv.Leftovers(context.Background(), d.cli, labelWorker, d.rid)
	require.NoError(d.t, err)
	return left
}

// inspect returns the container of service svc of job id.
func (d *dockerCluster) inspect(id, svc string) container.InspectResponse {
	d.t.Helper()
	ctx := context.Background()
	list, err := d.cli.ContainerList(ctx, container.ListOptions{All: true, Filters: filters.NewArgs(
		filters.Arg("label", labelWorker+"="+d.rid), filters.Arg("label", labelJob+"="+id), filters.Arg("label", labelService+"="+svc))})
	require.NoError(d.t, err)
	require.Len(d.t, list, 1, "containers of %s/%s", id, svc)
	info, err := d.cli.ContainerInspect(ctx, list[0].ID)
	require.NoError(d.t, err)
	return info
}

// baseURL is the http:// URL of a resolved mapping, checking that it is on
// 127.0.0.1 (the default host_address) at the published port.
func baseURL(t *testing.T, m *commonpb.ResolvedPortMapping) string {
	t.Helper()
	hostPort := testproc.Addr(int(m.GetPublished()))
	require.Equal(t, "tcp://"+hostPort, m.GetUrl())
	return "http://" + hostPort
}

// httpGet polls url until it answers 200 and returns the body.
func httpGet(t *testing.T, url string) string {
	t.Helper()
	var body string
	testproc.Await(t, 10*time.Second, "GET "+url, func() error {
		code, b, err := httpDo(http.MethodGet, url, "")
		if err != nil {
			return err
		}
		if code != http.StatusOK {
			return fmt.Errorf("%d %s", code, b)
		}
		body = b
		return nil
	})
	return body
}

// httpDo makes one request with a short timeout.
func httpDo(method, url, body string) (int, string, error) {
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		return 0, "", err
	}
	c := http.Client{Timeout: 2 * time.Second}
	resp, err := c.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

// TestE2E_Docker_TwoServices: a job of two containers through manager and
// worker: ports resolved by the worker and reported to the manager,
// dependsOn order in the job_info the manager records, and what the
// services see (environment, write_files, a shared volume) over HTTP.
func TestE2E_Docker_TwoServices(t *testing.T) {
	d := newDockerCluster(t)
	const id = "docker-two"
	webPort := testproc.FreePort(t)

	db := d.svc("db", "serve")
	db.Parameters = &commonpb.ServiceParameters{
		PortMappings:         []*commonpb.PortMapping{ephemeralPort(8080)},
		EnvironmentVariables: []*commonpb.EnvironmentVariable{{Name: "DB_GREETING", Value: "hello from the db's environment"}},
		VolumeMounts:         []*commonpb.VolumeMount{{VolumeName: "data", ContainerPath: "/data"}},
	}
	web := d.svc("web", "serve")
	web.DependsOn = []string{"db"}
	web.Parameters = &commonpb.ServiceParameters{
		PortMappings: []*commonpb.PortMapping{specificPort(8080, webPort)},
		VolumeMounts: []*commonpb.VolumeMount{{VolumeName: "data", ContainerPath: "/shared", ReadOnly: true}},
	}
	job := dockerJob(id, web, db) // web first: dependsOn, not the order given, decides
	job.Volumes = []string{"data"}
	job.WriteFiles = []*commonpb.WriteFile{{Path: "/etc/norsk/web.conf", Contents: []byte("listen = web\n"), Services: []string{"web"}}}
	d.startJob(job)

	// job_running carries the ports the worker resolved for both services.
	running := d.awaitRunning(id)
	require.Equal(t, dockerRole, running.GetRole())
	pm := running.GetServicePortMappings()
	require.Len(t, pm, 2, "port mappings %v", pm)
	require.Len(t, pm["db"].GetMappings(), 1)
	require.Len(t, pm["web"].GetMappings(), 1)
	dbMap, webMap := pm["db"].GetMappings()[0], pm["web"].GetMappings()[0]
	require.EqualValues(t, 8080, dbMap.GetTarget())
	require.EqualValues(t, 8080, webMap.GetTarget())
	require.NotZero(t, dbMap.GetPublished())
	require.EqualValues(t, webPort, webMap.GetPublished(), "web's specific host port")
	require.NotEqual(t, dbMap.GetPublished(), webMap.GetPublished())
	dbURL, webURL := baseURL(t, dbMap), baseURL(t, webMap)

	// The compose stages, then db before web, as the manager recorded them.
	testproc.Await(t, 10*time.Second, "compose stages and service starts in order", func() error {
		return inOrder(d.infoSeq(id), "compose BUILD", "compose CREATE", "compose START", "service_started db", "service_started web")
	})
	seq := d.infoSeq(id)
	require.Equal(t, 1, count(seq, "service_started db"), "%q", seq)
	require.Equal(t, 1, count(seq, "service_started web"), "%q", seq)

	// What the services see, over HTTP on the resolved host ports.
	require.Equal(t, "ok", httpGet(t, dbURL+"/healthz"))
	require.Equal(t, "ok", httpGet(t, webURL+"/healthz"))
	require.Equal(t, "hello from the db's environment", httpGet(t, dbURL+"/env?name=DB_GREETING"))
	require.Equal(t, fmt.Sprint(webPort), httpGet(t, webURL+"/env?name=NORSK_PORT_8080"), "host networking: the service binds the resolved host port")
	require.Equal(t, id, httpGet(t, webURL+"/env?name=NORSK_JOB_ID"))
	code, _, err := httpDo(http.MethodGet, webURL+"/env?name=DB_GREETING", "")
	require.NoError(t, err)
	require.Equal(t, http.StatusNotFound, code, "db's environment variable leaked into web")

	require.Equal(t, "listen = web\n", httpGet(t, webURL+"/file?path=/etc/norsk/web.conf"))
	code, _, err = httpDo(http.MethodGet, dbURL+"/file?path=/etc/norsk/web.conf", "")
	require.NoError(t, err)
	require.Equal(t, http.StatusNotFound, code, "db sees a file written only for web")

	code, body, err := httpDo(http.MethodPost, dbURL+"/write?path=/data/note.txt", "written through db")
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, code, body)
	require.Equal(t, "written through db", httpGet(t, webURL+"/file?path=/shared/note.txt"), "the job volume, shared")
	code, _, err = httpDo(http.MethodPost, webURL+"/write?path=/shared/nope.txt", "no")
	require.NoError(t, err)
	require.NotEqual(t, http.StatusOK, code, "web wrote to its read-only mount of the volume")

	require.NoError(t, d.mc.StopJob(context.Background(), id, dockerRole, d.nodeID))
	h := d.awaitStopped(id)
	require.Equal(t, []managerpb.JobHistoryJobStopping_Reason{managerpb.JobHistoryJobStopping_JOB_STOPPED_USER_REQUESTED}, stoppingReasons(h))
}

// TestE2E_Docker_RestartPolicyThenFailed: a service that keeps exiting 3
// under ON_FAILURE with restart_count 2 is restarted twice, then the
// worker fails the job; the manager records the restarts (job_info), the
// failure (job_stopping JOB_FAILED, job_stopped) and the worker's reason.
func TestE2E_Docker_RestartPolicyThenFailed(t *testing.T) {
	d := newDockerCluster(t)
	const id = "docker-crash"
	crash := d.svc("crash", "exit", "3")
	crash.Restart = commonpb.Service_ON_FAILURE
	crash.RestartCount = 2
	d.startJob(dockerJob(id, crash))

	reason, failedAt := d.awaitFailed(id)
	t.Logf("failure reason: %s", reason)
	for _, want := range []string{`service "crash" exited with code 3`, "restarted 2 times", "ON_FAILURE"} {
		require.Contains(t, reason, want)
	}
	var restarting []uint64
	for _, e := range d.infoEvents(id) {
		if e.GetJobInfo().GetServiceRestarting().GetServiceName() == "crash" {
			restarting = append(restarting, e.GetLogIndex())
		}
	}
	require.Len(t, restarting, 2, "service_restarting: %q", d.infoSeq(id))
	for _, i := range restarting {
		require.Less(t, i, failedAt, "service_restarting after the failure: %q", d.infoSeq(id))
	}
	require.Equal(t, 3, count(d.infoSeq(id), "container_event crash: exited with code 3"), "%q", d.infoSeq(id))
	require.Empty(t, d.leftovers(), "a failed job leaves nothing behind")
}

// TestE2E_Docker_StopThenDelete: StopJob takes the project down but keeps
// its named volume; DeleteJob makes the worker remove the volume too.
func TestE2E_Docker_StopThenDelete(t *testing.T) {
	d := newDockerCluster(t)
	const id = "docker-vol"
	s := d.svc("svc", "serve")
	s.Parameters = &commonpb.ServiceParameters{
		PortMappings: []*commonpb.PortMapping{ephemeralPort(8080)},
		VolumeMounts: []*commonpb.VolumeMount{{VolumeName: "data", ContainerPath: "/data"}},
	}
	job := dockerJob(id, s)
	job.Volumes = []string{"data"}
	d.startJob(job)
	url := baseURL(t, d.awaitRunning(id).GetServicePortMappings()["svc"].GetMappings()[0])
	require.Equal(t, "ok", httpGet(t, url+"/healthz"))
	code, body, err := httpDo(http.MethodPost, url+"/write?path=/data/kept.txt", "kept")
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, code, body)

	ctx := context.Background()
	require.NoError(t, d.mc.StopJob(ctx, id, dockerRole, d.nodeID))
	d.awaitStopped(id)
	// The worker reports job_stopped after DOWN: no waiting needed.
	left := d.leftovers()
	require.Len(t, left, 1, "after the stop: %q", left)
	require.True(t, strings.HasPrefix(left[0], "volume "), "after the stop only the named volume stays: %q", left)

	require.NoError(t, d.mc.DeleteJob(ctx, id))
	testproc.Await(t, 20*time.Second, "the job's volume removed after DeleteJob", func() error {
		if left := d.leftovers(); len(left) > 0 {
			return fmt.Errorf("still there: %q", left)
		}
		return nil
	})
	require.True(t, d.ev.Has(func(e *managerpb.EventStreamEvent) bool { return e.GetJobDeleted().GetJobId().GetJobId() == id }), "job_deleted event")
}

// TestE2E_Docker_WorkerKilledAndRestarted: a SIGKILLed worker leaves its
// containers running; the worker restarted on the same state directory
// re-adopts them without a restart, reports the job in its hello, and the
// manager keeps the job running; a later StopJob stops it cleanly.
func TestE2E_Docker_WorkerKilledAndRestarted(t *testing.T) {
	d := newDockerCluster(t)
	ctx := context.Background()
	const id = "docker-adopt"
	s := d.svc("web", "serve")
	s.Parameters = &commonpb.ServiceParameters{PortMappings: []*commonpb.PortMapping{ephemeralPort(8080)}}
	d.startJob(dockerJob(id, s))
	ports := d.awaitRunning(id).GetServicePortMappings()
	url := baseURL(t, ports["web"].GetMappings()[0])
	pid := httpGet(t, url+"/pid")
	before := d.inspect(id, "web")
	require.True(t, before.State.Running)
	kinds, err := d.mc.JobByID(ctx, id)
	require.NoError(t, err)

	mark := d.ev.Len()
	d.w.Kill()
	require.True(t, d.inspect(id, "web").State.Running, "the container must outlive its worker")
	require.Equal(t, pid, httpGet(t, url+"/pid"))

	d.startWorker()
	d.awaitWorkerOnline()
	// The restarted worker's hello lists the job: the manager says so in
	// the physical_node_connected event of the new session.
	testproc.Await(t, 20*time.Second, "the new session's physical_node_connected with the job", func() error {
		for _, e := range d.ev.Snapshot()[mark:] {
			for _, in := range e.GetPhysicalNodeConnected().GetInstances() {
				if in.GetJobKey().GetJobId().GetJobId() == id && in.GetJobKey().GetRole() == dockerRole {
					return nil
				}
			}
		}
		return fmt.Errorf("none yet")
	})
	require.Contains(t, d.w.Output(), "re-adopting job")

	after := d.inspect(id, "web")
	require.Equal(t, before.ID, after.ID, "same container")
	require.Equal(t, before.State.StartedAt, after.State.StartedAt, "not restarted")
	require.True(t, after.State.Running)
	require.Equal(t, pid, httpGet(t, url+"/pid"), "the same process answers")

	// The manager still shows it running, and recorded no end of it.
	r, err := d.mc.JobByID(ctx, id)
	require.NoError(t, err)
	require.Len(t, r.GetInstances(), 1)
	require.Equal(t, historyKinds(kinds), historyKinds(r), "a worker restart re-adopts; it does not restart the job")
	h, _ := d.history(id, mark)
	require.Empty(t, stoppingReasons(h), "the manager ended the job across the worker restart")

	// A later stop goes through the re-adopted job cleanly.
	require.NoError(t, d.mc.StopJob(ctx, id, dockerRole, d.nodeID))
	h = d.awaitStopped(id)
	require.Equal(t, []managerpb.JobHistoryJobStopping_Reason{managerpb.JobHistoryJobStopping_JOB_STOPPED_USER_REQUESTED}, stoppingReasons(h))
	r, err = d.mc.JobByID(ctx, id)
	require.NoError(t, err)
	require.Equal(t, append(historyKinds(kinds), "Stopping", "Stopped"), historyKinds(r))
	require.Empty(t, d.leftovers())
	code, _, err := httpDo(http.MethodGet, url+"/pid", "")
	require.Error(t, err, "the service still answers (%d) after the stop", code)
}

// TestE2E_Docker_StartFailures: an image that cannot be pulled and a
// specific host port another program holds each fail the job with a clear
// reason, recorded by the manager, and leave no container behind.
func TestE2E_Docker_StartFailures(t *testing.T) {
	d := newDockerCluster(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	taken := l.Addr().(*net.TCPAddr).Port

	const missing = "127.0.0.1:1/nothing:v1"
	unpullable := d.svc("missing", "sleep")
	unpullable.GetDocker().ContainerUrl.Url = missing
	portTaken := d.svc("web", "serve")
	portTaken.Parameters = &commonpb.ServiceParameters{PortMappings: []*commonpb.PortMapping{specificPort(8080, taken)}}

	cases := []struct {
		name, id string
		svc      *commonpb.Service
		want     string
	}{
		{"image cannot be pulled", "docker-no-image", unpullable, "pull image " + missing},
		{"host port taken", "docker-port-taken", portTaken, fmt.Sprintf("tcp port 127.0.0.1:%d is not free", taken)},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			outer := d.t
			d.t = t // the helpers fail this subtest
			defer func() { d.t = outer }()
			// A service that would start fine comes first: it must not be
			// left behind either.
			d.startJob(dockerJob(tc.id, d.svc("ok", "sleep"), tc.svc))
			reason, _ := d.awaitFailed(tc.id)
			t.Logf("failure reason: %s", reason)
			require.Contains(t, reason, tc.want)
			require.Empty(t, d.leftovers())
			r, err := d.mc.JobByID(context.Background(), client.JobID(tc.id))
			require.NoError(t, err)
			require.Empty(t, r.GetInstances())
			require.Zero(t, count(d.infoSeq(tc.id), "service_started"), "%q", d.infoSeq(tc.id))
		})
	}
}
