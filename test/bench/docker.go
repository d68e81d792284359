package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/network"
	"github.com/docker/docker/client"
	"github.com/docker/go-connections/nat"

	"github.com/norsk-oss/norsk-manager/proto/commonpb"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
	"github.com/norsk-oss/norsk-manager/test/dockerenv"
)

// The docker scenario: StartJob → job_running and StopJob → job_stopped of
// a two-container job through a norsk-manager process and a real worker
// process with --runtime=docker, then the Engine API calls the runtime
// makes, timed directly, to say where the time goes.

// Targets of the Docker runtime (issue 4).
const (
	dockerStartTarget = 1500 * time.Millisecond // StartJob → job_running, p99
	dockerStopTarget  = time.Second             // StopJob → job_stopped beyond the grace, p99
)

// dockerRole is the role the bench starts its container jobs in.
const dockerRole = "primary"

// benchLabel marks the containers and networks the bench creates itself
// (the Engine API timings), with a value unique to the run.
const benchLabel = "io.norsk.bench"

// workerLabel is the Docker runtime's label holding its runtime id
// (docs/design/worker-docker-runtime.md §1): what a worker created.
const workerLabel = "io.norsk.worker"

// dockerSeries is one measured series of start/stop trials.
type dockerSeries struct {
	network    string // the worker's --docker-network
	ignoreTerm bool   // the sleep service ignores SIGTERM (killed after the grace)
	grace      time.Duration

	call, running, stopped []time.Duration
	// beyond is stopped minus the grace (ignoreTerm: the trials where
	// sleep was killed after the grace), else stopped.
	beyond []time.Duration
	// early counts the ignoreTerm trials where sleep exited on SIGTERM
	// instead of ignoring it.
	early int
	// phases are the intervals of the start and stop, from the job_info
	// messages' worker timestamps (see jobTrace.phases).
	phases map[string][]time.Duration
	warmup string // the uncounted first trial, described
	cpu    seriesCPU
	// idleCores is the box's busy CPU (cores) over 2 s before the
	// counted trials, the bench idle: the neighbours' share.
	idleCores float64
	load      string // loadLine at the end of the counted trials
	// exits counts the runtime's notes on the containers' ends over the
	// counted trials ("sleep: exited with code 0").
	exits    map[string]int
	leftover []string // what the worker left labelled with its runtime id
}

// label names the series in table rows.
func (s *dockerSeries) label() string {
	l := "--docker-network=" + s.network
	if s.ignoreTerm {
		l += ", sleep ignores SIGTERM"
	}
	return l
}

// runDocker measures the Docker runtime. Run alone, a missing engine is an
// error; in "all" the scenario is skipped with a note.
func runDocker(ctx context.Context, e *env) error {
	cli, err := dockerenv.Connect(ctx)
	if err != nil {
		if e.scenario == "all" {
			fmt.Fprintf(e.out, "## docker\n\nSkipped: no Docker engine reachable (%v).\n\n", err)
			return nil
		}
		return fmt.Errorf("docker engine not reachable (DOCKER_HOST or the local socket): %w", err)
	}
	defer cli.Close()
	engine := engineLine(ctx, cli)
	t0 := time.Now()
	image, built, err := dockerenv.EnsureProbeImage(ctx, cli)
	if err != nil {
		return err
	}
	imageNote := fmt.Sprintf("present already (checked in %s)", time.Since(t0).Round(time.Millisecond))
	if built {
		imageNote = fmt.Sprintf("built now, before any timing (%s)", time.Since(t0).Round(time.Millisecond))
	}

	dir := e.dir("docker")
	m, err := e.startManager(ctx, filepath.Join(dir, "data"), "")
	if err != nil {
		return err
	}
	defer m.stop()
	conn, api, err := dial(m.addr)
	if err != nil {
		return err
	}
	defer conn.Close()
	ev, err := watchEvents(ctx, m.addr)
	if err != nil {
		return err
	}
	defer ev.close()

	var all []*dockerSeries
	networks := []string{"host"}
	if e.dockerJobNetwork {
		networks = append(networks, "job")
	}
	for _, nw := range networks {
		series := []*dockerSeries{{network: nw}}
		if nw == "host" {
			series = append(series, &dockerSeries{network: nw, ignoreTerm: true})
		}
		if err := runDockerWorker(ctx, e, cli, api, ev, m, image, nw, series); err != nil {
			return err
		}
		all = append(all, series...)
	}
	// "none" (a container in a network namespace of its own, without
	// interfaces) tells what the namespace costs apart from the bridge.
	engineModes := slices.Clone(networks)
	if e.dockerJobNetwork {
		engineModes = append(engineModes, "none")
	}
	reps := map[string]*engineTimes{}
	for _, nw := range engineModes {
		if reps[nw], err = timeEngineCalls(ctx, cli, image, nw, e.engineReps); err != nil {
			return fmt.Errorf("engine API timings (%s network): %w", nw, err)
		}
	}
	lost, err := lostSigterm(ctx, cli, image, e.engineReps)
	if err != nil {
		return fmt.Errorf("SIGTERM right after the start: %w", err)
	}
	printDocker(e, engine, image, imageNote, all, engineModes, reps, loadLine(), lost)
	return nil
}

// runDockerWorker starts a worker with --runtime=docker
// --docker-network=nw on a new slot, runs the series on it, and stops it.
func runDockerWorker(ctx context.Context, e *env, cli *client.Client, api managerpb.ManagerClient, ev *eventWatch, m *manager,
	image, nw string, series []*dockerSeries) error {
	dir := e.dir("docker-" + nw)
	node, w, err := startWorkerWith(ctx, e, api, ev, dir, m.addr, "bench-docker-"+nw,
		"--runtime=docker", "--docker-network="+nw, "--stop-grace="+e.dockerGrace.String())
	if err != nil {
		return err
	}
	defer w.stop()
	ridBytes, err := os.ReadFile(filepath.Join(dir, "worker", "docker", "runtime-id"))
	if err != nil {
		return fmt.Errorf("the docker worker's runtime id: %w", err)
	}
	rid := strings.TrimSpace(string(ridBytes))
	pids := cpuPids{manager: m.cmd.Process.Pid, worker: w.cmd.Process.Pid,
		dockerd: pidsByComm("dockerd"), containerd: pidsByComm("containerd")}
	for _, s := range series {
		s.grace = e.dockerGrace
		s.phases = map[string][]time.Duration{}
		s.exits = map[string]int{}
		job := dockerBenchJob(image, s.ignoreTerm)
		prefix := fmt.Sprintf("bench-docker-%s-%s", nw, map[bool]string{true: "ignoreterm", false: "prompt"}[s.ignoreTerm])
		// One uncounted trial first: the first container of a worker (and
		// the first job of a network mode) pays one-off costs.
		tr, err := dockerTrial(ctx, api, ev, job, prefix+"-warmup", node)
		if err != nil {
			return fmt.Errorf("%s, warm-up trial: %w\nworker log:\n%s", s.label(), err, w.tail())
		}
		s.warmup = fmt.Sprintf("start %s ms, stop %s ms", fmtMs(ms(tr.running)), fmtMs(ms(tr.stopped)))
		// What the box does without the bench (neighbours, daemons), for
		// the CPU line.
		b0, t0 := boxBusy(), time.Now()
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(2 * time.Second):
		}
		s.idleCores = (boxBusy() - b0).Seconds() / time.Since(t0).Seconds()
		c0 := pids.sample()
		for i := range e.dockerTrials {
			tr, err := dockerTrial(ctx, api, ev, job, fmt.Sprintf("%s-%03d", prefix, i+1), node)
			if err != nil {
				return fmt.Errorf("%s, trial %d: %w\nworker log:\n%s", s.label(), i+1, err, w.tail())
			}
			s.call, s.running, s.stopped = append(s.call, tr.call), append(s.running, tr.running), append(s.stopped, tr.stopped)
			switch {
			case !s.ignoreTerm:
				s.beyond = append(s.beyond, tr.stopped)
			case slices.ContainsFunc(tr.exits, func(x string) bool { return strings.HasPrefix(x, "sleep: did not stop within") }):
				s.beyond = append(s.beyond, tr.stopped-s.grace)
			default:
				// sleep exited on the SIGTERM: it came before the probe
				// had set up its handling (see printDocker); the grace
				// was not used, so the trial says nothing of it.
				s.early++
			}
			for k, v := range tr.phases {
				s.phases[k] = append(s.phases[k], v)
			}
			for _, x := range tr.exits {
				s.exits[x]++
			}
		}
		s.cpu = pids.sample().sub(c0)
		s.load = loadLine()
		if s.leftover, err = dockerenv.Leftovers(ctx, cli, workerLabel, rid); err != nil {
			return fmt.Errorf("listing what the worker left: %w", err)
		}
	}
	return nil
}

// dockerBenchJob is the job of every trial (the id is set per trial): two
// services of the probe image, each with an ephemeral TCP port on
// 127.0.0.1; "sleep" depends on "serve", so serve starts first and stops
// last. With ignoreTerm, sleep ignores SIGTERM and is killed after the
// worker's --stop-grace.
func dockerBenchJob(image string, ignoreTerm bool) *managerpb.Job {
	svc := func(name, cmd string, port uint32) *commonpb.Service {
		return &commonpb.Service{
			Name:      name,
			Container: &commonpb.Service_Docker{Docker: &commonpb.DockerContainer{ContainerUrl: &commonpb.ContainerUrl{Url: image}}},
			Command:   cmd,
			Parameters: &commonpb.ServiceParameters{PortMappings: []*commonpb.PortMapping{{
				ContainerPort: port, Protocol: commonpb.ProtocolFamily_TCP, HostAddress: "127.0.0.1",
				HostPort: &commonpb.PortMapping_Ephemeral{Ephemeral: &commonpb.HostPortEphemeral{}},
			}}},
		}
	}
	sleep := svc("sleep", "sleep", 8081)
	if ignoreTerm {
		sleep.Command = "sleep --ignore-term"
	}
	sleep.DependsOn = []string{"serve"}
	return &managerpb.Job{Tags: map[string]string{"bench": "docker"}, Services: []*commonpb.Service{svc("serve", "serve", 8080), sleep}}
}

// trialResult is one start/stop trial.
type trialResult struct {
	call, running, stopped time.Duration
	phases                 map[string]time.Duration
	exits                  []string // the runtime's notes on the containers' ends ("sleep: exited with code 0")
}

// dockerTrial creates a fresh job from tmpl with id, starts it on node,
// waits for job_running, stops it, waits for job_stopped, deletes it and
// waits for job_deleted. It times StartJob → job_running and StopJob →
// job_stopped (bench clock), and the phases between from the job_info
// messages (worker clock, the same machine).
func dockerTrial(ctx context.Context, api managerpb.ManagerClient, ev *eventWatch, tmpl *managerpb.Job, id, node string) (trialResult, error) {
	var r trialResult
	job := &managerpb.Job{JobId: &commonpb.JobId{JobId: id}, Tags: tmpl.GetTags(), Services: tmpl.GetServices()}
	if _, err := api.CreateJob(ctx, job); err != nil {
		return r, fmt.Errorf("CreateJob: %w", err)
	}
	tr := &jobTrace{job: id}
	key := &commonpb.JobId{JobId: id}
	t0 := time.Now()
	if _, err := api.StartJob(ctx, &managerpb.StartJobRequest{JobId: key, Role: dockerRole, NodeId: &commonpb.NodeId{NodeId: node}}); err != nil {
		return r, fmt.Errorf("StartJob: %w", err)
	}
	r.call = time.Since(t0)
	at, last, err := tr.await(ctx, ev, "job_running", func(h *managerpb.JobHistoryEntry) bool { return h.GetJobRunning() != nil })
	if err != nil {
		return r, err
	}
	if last.GetJobRunning() == nil {
		return r, fmt.Errorf("job %s stopped instead of running: %s; job_info: %s", id, stopReason(last), tr.texts())
	}
	if pm := last.GetJobRunning().GetServicePortMappings(); len(pm) != 2 {
		return r, fmt.Errorf("job_running of %s has port mappings for %d services, want 2: %v", id, len(pm), pm)
	}
	r.running = at.Sub(t0)
	t1 := time.Now()
	if _, err := api.StopJob(ctx, &managerpb.StopJobRequest{JobId: key, Role: dockerRole, NodeId: &commonpb.NodeId{NodeId: node}}); err != nil {
		return r, fmt.Errorf("StopJob: %w", err)
	}
	at, last, err = tr.await(ctx, ev, "job_stopped", nil)
	if err != nil {
		return r, err
	}
	r.stopped = at.Sub(t1)
	if _, err := api.DeleteJob(ctx, key); err != nil {
		return r, fmt.Errorf("DeleteJob: %w", err)
	}
	// Waiting for job_deleted also collects the job_info messages that
	// arrive after job_stopped (the manager publishes them from another
	// grain).
	if _, err := ev.waitFor(ctx, eventTimeout, "job_deleted", func(x *managerpb.EventStreamEvent) bool {
		tr.observe(x)
		return x.GetJobDeleted().GetJobId().GetJobId() == id
	}); err != nil {
		return r, err
	}
	r.phases = tr.phases(t0, t0.Add(r.running), t1, t1.Add(r.stopped))
	r.exits = tr.exits()
	return r, nil
}

func stopReason(h *managerpb.JobHistoryEntry) string {
	if h == nil {
		return "?"
	}
	return fmt.Sprintf("%T", h.GetHistoryEntry())
}

// jobTrace collects the job_info messages of one job that the manager
// publishes while the bench waits for the job's lifecycle events.
type jobTrace struct {
	job   string
	infos []*commonpb.JobInfoMessage
}

func (tr *jobTrace) observe(x *managerpb.EventStreamEvent) {
	if in := x.GetJobInfo(); in != nil && in.GetJobKey().GetJobId().GetJobId() == tr.job {
		tr.infos = append(tr.infos, in)
	}
}

// await waits for the job_updated of the job whose newest history entry
// satisfies is, or is job_stopped (is nil: only job_stopped), and returns
// when it was received and that entry.
func (tr *jobTrace) await(ctx context.Context, ev *eventWatch, what string, is func(*managerpb.JobHistoryEntry) bool) (time.Time, *managerpb.JobHistoryEntry, error) {
	var last *managerpb.JobHistoryEntry
	at, err := ev.waitFor(ctx, eventTimeout, what, func(x *managerpb.EventStreamEvent) bool {
		tr.observe(x)
		jwh := x.GetJobUpdated().GetJobWithHistory()
		h := jwh.GetHistoryEntry()
		if jwh.GetJob().GetJobId().GetJobId() != tr.job || len(h) == 0 {
			return false
		}
		last = h[len(h)-1]
		return (is != nil && is(last)) || last.GetJobStopped() != nil
	})
	if err != nil {
		return at, nil, fmt.Errorf("%w; job_info so far: %s", err, tr.texts())
	}
	return at, last, nil
}

// exits lists the runtime's container_event notes on how the containers
// ended or were killed, as "service: text".
func (tr *jobTrace) exits() []string {
	var out []string
	for _, in := range tr.infos {
		ce := in.GetContainerEvent()
		for _, p := range []string{"exited with code", "was killed", "did not stop within", "container removed"} {
			if ce != nil && strings.HasPrefix(ce.GetText(), p) {
				out = append(out, ce.GetServiceName()+": "+ce.GetText())
			}
		}
	}
	return out
}

// texts lists the job_info messages seen, for error messages.
func (tr *jobTrace) texts() string {
	var out []string
	for _, in := range tr.infos {
		switch {
		case in.GetComposeMessage() != nil:
			out = append(out, in.GetComposeMessage().GetStage().String()+": "+in.GetComposeMessage().GetText())
		case in.GetServiceStarted() != nil:
			out = append(out, "service_started "+in.GetServiceStarted().GetServiceName())
		case in.GetContainerEvent() != nil:
			out = append(out, in.GetContainerEvent().GetServiceName()+": "+in.GetContainerEvent().GetText())
		}
	}
	return strings.Join(out, " | ")
}

// The phases of a trial, in order: what happens between two marks. The
// marks are the StartJob/StopJob calls and the receptions of
// job_running/job_stopped (bench clock), and the worker's timestamps of
// its job_info messages (compose stages BUILD "checking 1 images", CREATE
// "creating 2 containers…", START "starting 2 containers", STOP, DOWN, and
// service_started per service; worker/docker/job.go emits each right
// before the step it names).
var (
	startPhases = []string{
		"StartJob → worker begins (BUILD): manager + dispatch to the worker",
		"BUILD → CREATE: image inspect + job record (fsync)",
		"CREATE → START: list leftovers, [network create], 2 × container create, job record (fsync)",
		"START → service_started serve: container start",
		"service_started serve → service_started sleep: container start",
		"service_started sleep → job_running received: job record (fsync), job_started → manager → event",
	}
	stopPhases = []string{
		"StopJob → STOP: manager + dispatch to the worker, job record (fsync)",
		"STOP → DOWN: stop both containers (inspect, SIGTERM, wait, [SIGKILL after the grace], inspect)",
		"DOWN → job_stopped received: list + remove containers, [network remove], job dir, job_stopped → manager → event",
	}
)

// phases returns the phase durations of the trial whose StartJob was
// called at t0, job_running received at running, StopJob called at t1 and
// job_stopped received at stopped. A phase whose marks are missing is
// left out.
func (tr *jobTrace) phases(t0, running, t1, stopped time.Time) map[string]time.Duration {
	first := func(match func(*commonpb.JobInfoMessage) bool) (time.Time, bool) {
		for _, in := range tr.infos {
			if match(in) {
				return in.GetTimestamp().AsTime(), true
			}
		}
		return time.Time{}, false
	}
	stage := func(s commonpb.JobInfoComposeMessage_Stage) func(*commonpb.JobInfoMessage) bool {
		return func(in *commonpb.JobInfoMessage) bool {
			return in.GetComposeMessage() != nil && in.GetComposeMessage().GetStage() == s
		}
	}
	started := func(svc string) func(*commonpb.JobInfoMessage) bool {
		return func(in *commonpb.JobInfoMessage) bool { return in.GetServiceStarted().GetServiceName() == svc }
	}
	out := map[string]time.Duration{}
	marks := func(names []string, from, to time.Time, matches ...func(*commonpb.JobInfoMessage) bool) {
		ts := []time.Time{from.Round(0)} // wall clock: the worker's timestamps are wall clock
		ok := []bool{true}
		for _, m := range matches {
			t, found := first(m)
			ts, ok = append(ts, t), append(ok, found)
		}
		ts, ok = append(ts, to.Round(0)), append(ok, true)
		for i, name := range names {
			if ok[i] && ok[i+1] {
				out[name] = ts[i+1].Sub(ts[i])
			}
		}
	}
	marks(startPhases, t0, running, stage(commonpb.JobInfoComposeMessage_BUILD), stage(commonpb.JobInfoComposeMessage_CREATE),
		stage(commonpb.JobInfoComposeMessage_START), started("serve"), started("sleep"))
	marks(stopPhases, t1, stopped, stage(commonpb.JobInfoComposeMessage_STOP), stage(commonpb.JobInfoComposeMessage_DOWN))
	return out
}

// --- the Engine API, timed directly ------------------------------------------

// engineTimes holds the latencies of each Engine API call, by call, in
// the order first made.
type engineTimes struct {
	order []string
	lat   map[string][]time.Duration
	errs  map[string]int // calls that did not complete as expected, by call
	// anomalies describe them.
	anomalies []string
	// startPath and stopPath are, per repetition, the sum of the calls on
	// the runtime's start path (inspect, list, [network], create ×2,
	// start ×2) and stop path (both stops, list, remove ×2, [network]).
	startPath, stopPath []time.Duration
}

func (t *engineTimes) add(name string, d time.Duration) {
	if _, ok := t.lat[name]; !ok {
		t.order = append(t.order, name)
	}
	t.lat[name] = append(t.lat[name], d)
}

// timeEngineCalls makes, reps times, the Engine API calls the Docker
// runtime makes to start and stop the bench job, in the same order and
// with the same container settings, and times each. Everything it creates
// carries benchLabel and is removed, also on failure.
func timeEngineCalls(ctx context.Context, cli *client.Client, image, nw string, reps int) (*engineTimes, error) {
	run := fmt.Sprintf("%d-%d", os.Getpid(), time.Now().UnixNano())
	defer removeBenchObjects(cli, run)
	t := &engineTimes{lat: map[string][]time.Duration{}, errs: map[string]int{}}
	timed := func(name string, sum *time.Duration, f func() error) error {
		t0 := time.Now()
		err := f()
		d := time.Since(t0)
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		t.add(name, d)
		*sum += d
		return nil
	}
	for rep := range reps {
		var start, stop time.Duration
		project := fmt.Sprintf("norsk-bench-%s-%d", run, rep)
		labels := map[string]string{benchLabel: run, "io.norsk.project": project}
		byLabel := filters.NewArgs(filters.Arg("label", benchLabel+"="+run), filters.Arg("label", "io.norsk.project="+project))
		if err := timed("image inspect", &start, func() error { _, err := cli.ImageInspect(ctx, image); return err }); err != nil {
			return nil, err
		}
		if err := timed("container list (by label)", &start, func() error {
			_, err := cli.ContainerList(ctx, container.ListOptions{All: true, Filters: byLabel})
			return err
		}); err != nil {
			return nil, err
		}
		if nw == "job" {
			if err := timed("network create (bridge)", &start, func() error {
				_, err := cli.NetworkCreate(ctx, project, network.CreateOptions{Driver: "bridge", Labels: labels})
				return err
			}); err != nil {
				return nil, err
			}
		}
		type svc struct {
			name    string
			cmd     []string
			port    int // container port
			id      string
			started time.Time // when ContainerStart returned
		}
		svcs := []*svc{{name: "serve", cmd: []string{"serve"}, port: 8080}, {name: "sleep", cmd: []string{"sleep"}, port: 8081}}
		for _, s := range svcs {
			host, err := freePort()
			if err != nil {
				return nil, err
			}
			cfg := &container.Config{Image: image, Cmd: s.cmd, Labels: labels}
			hc := &container.HostConfig{RestartPolicy: container.RestartPolicy{Name: container.RestartPolicyDisabled}}
			var nc *network.NetworkingConfig
			cp := strconv.Itoa(s.port)
			switch nw {
			case "host", "none":
				hc.NetworkMode = container.NetworkMode(nw)
				cfg.Env = []string{"NORSK_PORT_" + cp + "=" + strconv.Itoa(host), fmt.Sprintf("NORSK_ADDR_%s=127.0.0.1:%d", cp, host)}
			default:
				hc.NetworkMode = container.NetworkMode(project)
				nc = &network.NetworkingConfig{EndpointsConfig: map[string]*network.EndpointSettings{project: {Aliases: []string{s.name}}}}
				port := nat.Port(cp + "/tcp")
				cfg.ExposedPorts = nat.PortSet{port: {}}
				hc.PortBindings = nat.PortMap{port: {{HostIP: "127.0.0.1", HostPort: strconv.Itoa(host)}}}
				cfg.Env = []string{"NORSK_PORT_" + cp + "=" + cp, "NORSK_ADDR_" + cp + "=0.0.0.0:" + cp}
			}
			if err := timed("container create", &start, func() error {
				resp, err := cli.ContainerCreate(ctx, cfg, hc, nc, nil, project+"."+s.name)
				s.id = resp.ID
				return err
			}); err != nil {
				return nil, err
			}
		}
		for _, s := range svcs {
			if err := timed("container start", &start, func() error { return cli.ContainerStart(ctx, s.id, container.StartOptions{}) }); err != nil {
				return nil, err
			}
			s.started = time.Now()
		}
		for i := len(svcs) - 1; i >= 0; i-- { // reverse start order, as the runtime
			s := svcs[i]
			if err := timed("container inspect", &stop, func() error { _, err := cli.ContainerInspect(ctx, s.id); return err }); err != nil {
				return nil, err
			}
			gap := time.Since(s.started)
			d, note, err := sigtermExit(ctx, cli, s.id)
			if err != nil {
				return nil, fmt.Errorf("%s: SIGTERM: %w", s.name, err)
			}
			if note != "" {
				t.errs[sigtermRow]++
				t.anomalies = append(t.anomalies, fmt.Sprintf("%s network, repetition %d, %s (SIGTERM sent %s after its ContainerStart returned): %s",
					nw, rep+1, s.name, gap.Round(time.Millisecond), note))
			} else {
				t.add(sigtermRow, d)
				stop += d
			}
			if err := timed("container inspect", &stop, func() error { _, err := cli.ContainerInspect(ctx, s.id); return err }); err != nil {
				return nil, err
			}
		}
		var list []container.Summary
		if err := timed("container list (by label)", &stop, func() error {
			var err error
			list, err = cli.ContainerList(ctx, container.ListOptions{All: true, Filters: byLabel})
			return err
		}); err != nil {
			return nil, err
		}
		for _, c := range list {
			if err := timed("container remove (force)", &stop, func() error {
				return cli.ContainerRemove(ctx, c.ID, container.RemoveOptions{Force: true})
			}); err != nil {
				return nil, err
			}
		}
		if nw == "job" {
			if err := timed("network remove", &stop, func() error { return cli.NetworkRemove(ctx, project) }); err != nil {
				return nil, err
			}
		}
		t.startPath, t.stopPath = append(t.startPath, start), append(t.stopPath, stop)
	}
	return t, nil
}

// sigtermRow is the Engine API timing of a stop: ContainerKill SIGTERM
// until ContainerWait (not-running) returns.
const sigtermRow = "SIGTERM → exited (kill + wait)"

// sigtermWait bounds how long the engine timings wait for a container to
// exit on SIGTERM (the probe exits at once) before they kill it.
const sigtermWait = 10 * time.Second

// sigtermExit sends SIGTERM to container id, as the runtime stops a
// container, and returns how long it took to exit. A container still
// running sigtermWait later is described in note (its state and whether
// its process had a SIGTERM handler), then killed.
func sigtermExit(ctx context.Context, cli *client.Client, id string) (d time.Duration, note string, err error) {
	t0 := time.Now()
	waitC, errC := cli.ContainerWait(ctx, id, container.WaitConditionNotRunning)
	if err := cli.ContainerKill(ctx, id, "SIGTERM"); err != nil {
		return 0, "", err
	}
	select {
	case <-waitC:
		return time.Since(t0), "", nil
	case err := <-errC:
		return 0, "", err
	case <-time.After(sigtermWait):
	}
	note = fmt.Sprintf("not exited %s after SIGTERM; %s", sigtermWait, describeContainer(ctx, cli, id))
	if err := cli.ContainerKill(ctx, id, "SIGKILL"); err != nil {
		return 0, note, fmt.Errorf("%s; SIGKILL: %w", note, err)
	}
	select {
	case <-waitC:
		note += "; exited on SIGKILL"
	case <-time.After(sigtermWait):
		note += fmt.Sprintf("; not exited %s after SIGKILL either", sigtermWait)
	}
	return time.Since(t0), note, nil
}

// describeContainer gives the engine's state of container id and, for a
// running one, what /proc says of its process's signal dispositions.
func describeContainer(ctx context.Context, cli *client.Client, id string) string {
	info, err := cli.ContainerInspect(ctx, id)
	if err != nil || info.State == nil {
		return fmt.Sprintf("inspect: %v", err)
	}
	st := info.State
	out := fmt.Sprintf("engine state %s, running %t, pid %d", st.Status, st.Running, st.Pid)
	if st.Pid <= 0 {
		return out
	}
	status := readFile(fmt.Sprintf("/proc/%d/status", st.Pid))
	mask := func(key string) string {
		for _, line := range strings.Split(status, "\n") {
			if v, ok := strings.CutPrefix(line, key+":"); ok {
				n, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
				if err != nil {
					return "?"
				}
				return strconv.FormatBool(n&(1<<14) != 0) // SIGTERM is 15: bit 14
			}
		}
		return "?"
	}
	return out + fmt.Sprintf(" (SIGTERM: caught %s, ignored %s, blocked %s, pending %s; state %s)", mask("SigCgt"), mask("SigIgn"),
		mask("SigBlk"), mask("ShdPnd"), procField(fmt.Sprintf("/proc/%d/status", st.Pid), "State"))
}

// lostSigterm starts n containers of the probe's sleep (host network),
// each limited to 0.02 CPU so that the Go runtime in it takes long to
// start, and sends each SIGTERM as soon as ContainerStart returns, as a
// stop right after a start does on a busy machine. It reports how many
// were still running 2 s later, and the state of the first of them.
func lostSigterm(ctx context.Context, cli *client.Client, image string, n int) (string, error) {
	run := fmt.Sprintf("%d-%d-lost", os.Getpid(), time.Now().UnixNano())
	defer removeBenchObjects(cli, run)
	lost, state := 0, ""
	for range n {
		resp, err := cli.ContainerCreate(ctx, &container.Config{Image: image, Cmd: []string{"sleep"}, Labels: map[string]string{benchLabel: run}},
			&container.HostConfig{NetworkMode: network.NetworkHost, Resources: container.Resources{NanoCPUs: 20_000_000}}, nil, nil, "")
		if err != nil {
			return "", err
		}
		if err := cli.ContainerStart(ctx, resp.ID, container.StartOptions{}); err != nil {
			return "", err
		}
		waitC, errC := cli.ContainerWait(ctx, resp.ID, container.WaitConditionNotRunning)
		if err := cli.ContainerKill(ctx, resp.ID, "SIGTERM"); err != nil {
			return "", err
		}
		select {
		case <-waitC:
		case err := <-errC:
			return "", err
		case <-time.After(2 * time.Second):
			lost++
			if state == "" {
				state = describeContainer(ctx, cli, resp.ID)
			}
		}
		if err := cli.ContainerRemove(ctx, resp.ID, container.RemoveOptions{Force: true}); err != nil {
			return "", err
		}
	}
	out := fmt.Sprintf("SIGTERM as soon as ContainerStart returned, to the probe's sleep limited to 0.02 CPU (--cpus 0.02): "+
		"still running 2 s later in %d of %d containers", lost, n)
	if state != "" {
		out += "; the first, 2 s after its SIGTERM: " + state
	}
	return out, nil
}

// removeBenchObjects force-removes the containers and networks labelled
// with the bench's run value (what a failed timing left).
func removeBenchObjects(cli *client.Client, run string) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	f := filters.NewArgs(filters.Arg("label", benchLabel+"="+run))
	if cs, err := cli.ContainerList(ctx, container.ListOptions{All: true, Filters: f}); err == nil {
		for _, c := range cs {
			_ = cli.ContainerRemove(ctx, c.ID, container.RemoveOptions{Force: true})
		}
	}
	if ns, err := cli.NetworkList(ctx, network.ListOptions{Filters: f}); err == nil {
		for _, n := range ns {
			_ = cli.NetworkRemove(ctx, n.ID)
		}
	}
}

// engineLine describes the engine: version, API version in use, storage
// and cgroup drivers, and the runtime.
func engineLine(ctx context.Context, cli *client.Client) string {
	info, err := cli.Info(ctx)
	if err != nil {
		return "Docker engine: info failed: " + err.Error()
	}
	return fmt.Sprintf("Docker engine %s (API %s in use), storage driver %s, cgroup driver %s (cgroup v%s), default runtime %s, %d CPUs, %d containers before the run",
		info.ServerVersion, cli.ClientVersion(), info.Driver, info.CgroupDriver, info.CgroupVersion, info.DefaultRuntime, info.NCPU, info.Containers)
}

// --- CPU ---------------------------------------------------------------------

// cpuPids are the processes whose CPU a series accounts.
type cpuPids struct {
	manager, worker     int
	dockerd, containerd []int
}

// seriesCPU is CPU time used (or, for box, the whole machine's busy time)
// and the wall time it was used in.
type seriesCPU struct {
	wall                                             time.Duration
	manager, worker, dockerd, containerd, bench, box time.Duration
}

func (p cpuPids) sample() seriesCPU {
	sum := func(pids []int) (d time.Duration) {
		for _, pid := range pids {
			d += cpuTime(pid)
		}
		return d
	}
	return seriesCPU{wall: time.Duration(time.Now().UnixNano()), manager: cpuTime(p.manager), worker: cpuTime(p.worker),
		dockerd: sum(p.dockerd), containerd: sum(p.containerd), bench: cpuTime(0), box: boxBusy()}
}

func (c seriesCPU) sub(o seriesCPU) seriesCPU {
	return seriesCPU{wall: c.wall - o.wall, manager: c.manager - o.manager, worker: c.worker - o.worker,
		dockerd: c.dockerd - o.dockerd, containerd: c.containerd - o.containerd, bench: c.bench - o.bench, box: c.box - o.box}
}

// pidsByComm returns the pids of the processes named comm (/proc/*/comm).
func pidsByComm(comm string) []int {
	ents, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if strings.TrimSpace(readFile(filepath.Join("/proc", e.Name(), "comm"))) == comm {
			out = append(out, pid)
		}
	}
	return out
}

// boxBusy is the machine's busy CPU time so far (/proc/stat: all CPUs,
// everything but idle and iowait).
func boxBusy() time.Duration {
	line, _, _ := strings.Cut(readFile("/proc/stat"), "\n")
	f := strings.Fields(line)
	if len(f) < 5 || f[0] != "cpu" {
		return 0
	}
	var busy int64
	for i, v := range f[1:] {
		n, _ := strconv.ParseInt(v, 10, 64)
		if i != 3 && i != 4 { // idle, iowait
			busy += n
		}
	}
	return time.Duration(busy) * clockTick
}

// --- output ------------------------------------------------------------------

func printDocker(e *env, engine, image, imageNote string, all []*dockerSeries, networks []string, reps map[string]*engineTimes, engineLoad, lost string) {
	w := e.out
	fmt.Fprintln(w, "## docker")
	fmt.Fprintln(w)
	fmt.Fprintf(w, "%s.\n\n", engine)
	fmt.Fprintf(w, "A norsk-manager process (fsync on) and, per network mode, a norsk-ctl --mode=worker process with --runtime=docker "+
		"--docker-network=MODE --stop-grace=%s on its own cluster slot. The job: two services of the probe image %s (%s; FROM scratch, "+
		"never pulled), `serve` (probe serve) and `sleep` (probe sleep; dependsOn serve, so it starts second and is stopped first), "+
		"each with an ephemeral TCP port on 127.0.0.1. Per series one uncounted warm-up trial, then %d trials, each a fresh job: "+
		"CreateJob, StartJob → wait for job_running → StopJob → wait for job_stopped → DeleteJob → wait for job_deleted, "+
		"events received on an EventStream subscription on its own connection. The probe exits 0 at once on SIGTERM; in the "+
		"ignore-term series `sleep` runs `probe sleep --ignore-term` and is killed after the grace, and the stop is reported "+
		"beyond the grace.\n\n", e.dockerGrace, image, imageNote, e.dockerTrials)
	fmt.Fprintln(w, latencyHeader)
	for _, s := range all {
		latencyRow(w, s.label()+": StartJob call returns", s.call, 0)
		latencyRow(w, s.label()+": StartJob → job_running", s.running, 0)
		latencyRow(w, s.label()+": StopJob → job_stopped", s.stopped, 0)
		if s.ignoreTerm {
			latencyRow(w, fmt.Sprintf("%s: StopJob → job_stopped beyond the %s grace (trials where sleep was killed after the grace)", s.label(), s.grace), s.beyond, 0)
		}
	}
	fmt.Fprintln(w)
	for _, s := range all {
		fmt.Fprintf(w, "- %s: warm-up trial (not counted) %s; left behind (containers, networks, volumes labelled with the worker's runtime id): %s; "+
			"how the containers ended (the runtime's notes, over the counted trials): %s; at the end of the series: %s\n",
			s.label(), s.warmup, orNone(s.leftover), countList(s.exits), s.load)
	}
	fmt.Fprintln(w)
	for _, s := range all {
		if s.early > 0 {
			fmt.Fprintf(w, "In %d of %d trials of %q, sleep exited on the SIGTERM instead of ignoring it and the grace was not used: "+
				"those trials are left out of the beyond-the-grace row.\n\n", s.early, len(s.running), s.label())
		}
	}
	fmt.Fprintln(w, "The probe is a Go program and PID 1 of its container. A SIGTERM that reaches it after the Go runtime has "+
		"installed its signal handlers but before the probe's signal.Notify makes the runtime exit with code 2 (\"exited with "+
		"code 2\" above; with --ignore-term, the signal is not ignored). One that reaches it even earlier, before the runtime's "+
		"handlers exist, is dropped by the kernel (PID 1 of a PID namespace gets no default action for signals from outside): "+
		"the container keeps running until the SIGKILL after the grace (\"did not stop within\" in a series whose services "+
		"exit on SIGTERM). The runtime sends SIGTERM once (worker/docker/job.go stopContainer), so such a stop takes the "+
		"whole grace. Checked directly: "+lost+".")
	fmt.Fprintln(w)

	fmt.Fprintln(w, "### docker: where the time goes, on the real path")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Intervals between the StartJob/StopJob calls, the worker's own timestamps on its job_info messages "+
		"(the compose stages BUILD, CREATE, START, STOP, DOWN and service_started, each emitted right before the step it "+
		"names; same machine, so the same clock) and the reception of job_running/job_stopped. Per series, p50 / p99 in ms.")
	fmt.Fprintln(w)
	header := "| phase |"
	sep := "|---|"
	for _, s := range all {
		header += " " + s.label() + " |"
		sep += "---|"
	}
	fmt.Fprintln(w, header)
	fmt.Fprintln(w, sep)
	for _, ph := range slices.Concat(startPhases, stopPhases) {
		row := "| " + ph + " |"
		for _, s := range all {
			v := s.phases[ph]
			if len(v) == 0 {
				row += " – |"
				continue
			}
			row += fmt.Sprintf(" %s / %s |", fmtMs(ms(percentile(v, 50))), fmtMs(ms(percentile(v, 99))))
		}
		fmt.Fprintln(w, row)
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "CPU used per trial (start + stop + delete), mean over the counted trials (from /proc, 10 ms ticks). The box is "+
		"every process on the machine; \"other\" is the box minus the processes named: runc, containerd-shim, the kernel's "+
		"work for them, and the neighbours, whose share is estimated by the box's busy CPU over 2 s before the series, "+
		"with the bench idle:")
	fmt.Fprintln(w)
	for _, s := range all {
		n := time.Duration(len(s.running))
		c := s.cpu
		named := c.dockerd + c.containerd + c.worker + c.manager + c.bench
		fmt.Fprintf(w, "- %s: %s ms wall per trial; CPU ms per trial: dockerd %s, containerd %s, worker %s, manager %s, bench %s, "+
			"other %s; box %s (%.2f cores; %.2f cores before the series)\n",
			s.label(), fmtMs(ms(c.wall/n)), fmtMs(ms(c.dockerd/n)), fmtMs(ms(c.containerd/n)), fmtMs(ms(c.worker/n)),
			fmtMs(ms(c.manager/n)), fmtMs(ms(c.bench/n)), fmtMs(ms((c.box-named)/n)), fmtMs(ms(c.box/n)),
			c.box.Seconds()/c.wall.Seconds(), s.idleCores)
	}
	fmt.Fprintln(w)

	fmt.Fprintln(w, "### docker: the Engine API calls, timed directly")
	fmt.Fprintln(w)
	fmt.Fprintf(w, "The calls the runtime makes for this job, in its order and with its container settings, made by the bench with the "+
		"Docker Go client (API version negotiated), %d repetitions per network mode, one call at a time, nothing else running "+
		"in the bench (the workers are stopped). Start path: image inspect, container list, [network create], create ×2, "+
		"start ×2; stop path, in reverse start order: inspect, SIGTERM → exited, inspect (per container), list, remove ×2, "+
		"[network remove]. The job network is a user-defined bridge with each container's port published on 127.0.0.1; "+
		"\"none\" (not a runtime mode) gives each container a network namespace of its own without interfaces, to "+
		"separate the cost of the namespace from that of the bridge. At the end of these timings: %s.\n\n", e.engineReps, engineLoad)
	fmt.Fprintln(w, latencyHeader)
	for _, nw := range networks {
		t := reps[nw]
		for _, name := range t.order {
			latencyRow(w, fmt.Sprintf("%s network: %s", nw, name), t.lat[name], t.errs[name])
		}
		latencyRow(w, nw+" network: start path, sum", t.startPath, 0)
		latencyRow(w, nw+" network: stop path, sum", t.stopPath, 0)
	}
	fmt.Fprintln(w)
	for _, nw := range networks {
		for _, a := range reps[nw].anomalies {
			fmt.Fprintf(w, "- Error: %s (not in the timings; the stop path sum of that repetition lacks it)\n", a)
		}
	}
	fmt.Fprintln(w)

	for _, s := range all {
		if s.network != "host" {
			p99 := percentile(s.running, 99)
			fmt.Fprintf(w, "Extra (no target): %s StartJob → job_running p99 %s ms, p50 %s ms.\n\n", s.label(),
				fmtMs(ms(p99)), fmtMs(ms(percentile(s.running, 50))))
			continue
		}
		if !s.ignoreTerm {
			p99 := percentile(s.running, 99)
			fmt.Fprintf(w, "Target: %s StartJob → job_running p99 %s ms < %s ms: %s\n\n", s.label(), fmtMs(ms(p99)),
				fmtMs(ms(dockerStartTarget)), met(p99 < dockerStartTarget))
			p99 = percentile(s.stopped, 99)
			fmt.Fprintf(w, "Target: %s StopJob → job_stopped p99 %s ms < %s ms (services exit on SIGTERM, the grace is not used): %s\n\n",
				s.label(), fmtMs(ms(p99)), fmtMs(ms(dockerStopTarget)), met(p99 < dockerStopTarget))
			continue
		}
		p99 := percentile(s.beyond, 99)
		fmt.Fprintf(w, "Target: %s StopJob → job_stopped beyond the %s grace p99 %s ms < %s ms: %s\n\n", s.label(), s.grace,
			fmtMs(ms(p99)), fmtMs(ms(dockerStopTarget)), met(p99 < dockerStopTarget))
	}
}

// countList formats counts as "a ×3, b ×1", sorted by key.
func countList(m map[string]int) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var out []string
	for _, k := range keys {
		out = append(out, fmt.Sprintf("%s ×%d", k, m[k]))
	}
	return orNone(out)
}

func orNone(items []string) string {
	if len(items) == 0 {
		return "nothing"
	}
	return strings.Join(items, ", ")
}
