//go:build linux

package process

import (
	"context"
	"os/exec"

	"errors"
	"fmt"
	"golang.org/x/sys/unix"
	"google.golang.org/protobuf/encoding/protojson"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/norsk-oss/norsk-manager/proto/commonpb"
	"github.com/norsk-oss/norsk-manager/proto/workerpb"
	"github.com/norsk-oss/norsk-manager/worker"
)

func TestRuntime_Start_EnvPortsFilesOutput(t *testing.T) {
	r, c := newTestRuntime(t, t.TempDir(), nil)
	specific, err := ephemeralPort("udp", "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	lo, err := ephemeralPort("tcp", "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	s := svc("app", `echo "foo=$FOO port=$NORSK_PORT_8080 job=$NORSK_JOB_ID/$NORSK_JOB_ROLE svc=$NORSK_SERVICE_NAME"
echo oops >&2
cat conf/hello.txt
exec sleep 30`)
	s.Parameters = &commonpb.ServiceParameters{
		EnvironmentVariables: []*commonpb.EnvironmentVariable{{Name: "FOO", Value: "bar"}},
		PortMappings: []*commonpb.PortMapping{
			{ContainerPort: 8080, Protocol: commonpb.ProtocolFamily_TCP, HostPort: &commonpb.PortMapping_Ephemeral{Ephemeral: &commonpb.HostPortEphemeral{}}},
			{ContainerPort: 9000, Protocol: commonpb.ProtocolFamily_UDP, HostPort: &commonpb.PortMapping_Specific{Specific: &commonpb.HostPortSpecific{Port: specific}}},
			{ContainerPort: 9100, Protocol: commonpb.ProtocolFamily_TCP, HostPort: &commonpb.PortMapping_Range{Range: &commonpb.HostPortRange{MinPort: lo, MaxPort: min(lo+50, 65535)}}},
		},
	}
	job := testJob("job-env", s)
	job.WriteFiles = []*commonpb.WriteFile{{Path: "conf/hello.txt", Contents: []byte("hi from a file\n"), Mode: &commonpb.OptionalInt{Value: 0o600}}}
	key := worker.KeyOf(job)

	ports, err := r.Start(context.Background(), job)
	if err != nil {
		t.Fatal(err)
	}
	maps := ports["app"].GetMappings()
	if len(maps) != 3 {
		t.Fatalf("want 3 resolved mappings, got %v", maps)
	}
	eph := maps[0]
	if eph.GetTarget() != 8080 || eph.GetPublished() == 0 || eph.GetUrl() != fmt.Sprintf("tcp://127.0.0.1:%d", eph.GetPublished()) {
		t.Errorf("ephemeral mapping: %v", eph)
	}
	if m := maps[1]; m.GetPublished() != specific || m.GetUrl() != fmt.Sprintf("udp://127.0.0.1:%d", specific) || m.GetProtocol() != commonpb.ProtocolFamily_UDP {
		t.Errorf("specific mapping: %v", m)
	}
	if m := maps[2]; m.GetPublished() < lo || m.GetPublished() > lo+50 {
		t.Errorf("range mapping %v not in %d..%d", m, lo, lo+50)
	}
	started := c.Wait(t, "job_started", isKind(key, worker.EventStarted))
	if got := started.Ports["app"].GetMappings()[0].GetPublished(); got != eph.GetPublished() {
		t.Errorf("job_started port %d, Start returned %d", got, eph.GetPublished())
	}
	c.Wait(t, "env line", isOutput(key, "app", fmt.Sprintf("stdout: foo=bar port=%d job=job-env/primary svc=app", eph.GetPublished())))
	c.Wait(t, "stderr line", isOutput(key, "app", "stderr: oops"))
	c.Wait(t, "file line", isOutput(key, "app", "stdout: hi from a file"))
	c.Wait(t, "CREATE", isStage(key, commonpb.JobInfoComposeMessage_CREATE))
	c.Wait(t, "START", isStage(key, commonpb.JobInfoComposeMessage_START))
	c.Wait(t, "service_started", isServiceStarted(key, "app"))
	fi, err := os.Stat(filepath.Join(workDir(r, key), "conf", "hello.txt"))
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("file mode %v, want 0600", fi.Mode().Perm())
	}
	if got := r.List(); len(got) != 1 || got[0].Key() != key || got[0].Ports["app"].GetMappings()[0].GetPublished() != eph.GetPublished() {
		t.Errorf("List = %v", got)
	}

	if err := r.Stop(context.Background(), key, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	c.Wait(t, "job_stopped", isKind(key, worker.EventStopped))
	c.Wait(t, "exit by SIGTERM", isOutput(key, "app", "killed by signal SIGTERM"))
	c.Wait(t, "STOP", isStage(key, commonpb.JobInfoComposeMessage_STOP))
	c.Wait(t, "DOWN", isStage(key, commonpb.JobInfoComposeMessage_DOWN))
	if len(r.List()) != 0 {
		t.Errorf("List after stop = %v", r.List())
	}
	if fileExists(newJobPaths(r.jobsDir, key).root) {
		t.Error("job directory still exists after stop")
	}
	// Ports are released: the same specific port can be used again.
	if _, err := r.Start(context.Background(), job); err != nil {
		t.Fatalf("restart with the same ports: %v", err)
	}
}

func TestRuntime_RestartPolicy(t *testing.T) {
	cases := []struct {
		name      string
		command   string
		policy    commonpb.Service_ServiceRestart
		count     uint32
		want      worker.EventKind
		restarts  int
		reasonHas []string
	}{
		{"never success completes", "exit 0", commonpb.Service_NEVER, 0, worker.EventStopped, 0, nil},
		{"never failure fails", "exit 3", commonpb.Service_NEVER, 0, worker.EventFailed, 0,
			[]string{`service "s" exited with code 3`, "NEVER"}},
		{"on failure success completes", "exit 0", commonpb.Service_ON_FAILURE, 2, worker.EventStopped, 0, nil},
		{"on failure exhausts", "echo boom; exit 2", commonpb.Service_ON_FAILURE, 2, worker.EventFailed, 2,
			[]string{"exited with code 2", "restarted 2 times", "ON_FAILURE"}},
		{"always restarts success too", "exit 0", commonpb.Service_ALWAYS, 3, worker.EventFailed, 3,
			[]string{"exited with code 0", "restarted 3 times", "ALWAYS"}},
		{"on failure default count", "exit 1", commonpb.Service_ON_FAILURE, 0, worker.EventFailed, DefaultRestartCount,
			[]string{"restart_count 3"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r, c := newTestRuntime(t, t.TempDir(), nil)
			s := svc("s", tc.command)
			s.Restart, s.RestartCount, s.RestartPeriod = tc.policy, tc.count, 60
			job := testJob("job-policy", s)
			key := worker.KeyOf(job)
			if _, err := r.Start(context.Background(), job); err != nil {
				t.Fatal(err)
			}
			ev := c.Wait(t, "end of job", func(ev worker.Event) bool {
				return ev.Key == key && (ev.Kind == worker.EventFailed || ev.Kind == worker.EventStopped)
			})
			if ev.Kind != tc.want {
				t.Fatalf("got %s (%s), want %s", ev.Kind, ev.Reason, tc.want)
			}
			for _, frag := range tc.reasonHas {
				if !strings.Contains(ev.Reason, frag) {
					t.Errorf("reason %q lacks %q", ev.Reason, frag)
				}
			}
			if got := c.Count(isRestarting(key, "s")); got != tc.restarts {
				t.Errorf("service_restarting × %d, want %d", got, tc.restarts)
			}
			if got := c.Count(isServiceStarted(key, "s")); got != tc.restarts+1 {
				t.Errorf("service_started × %d, want %d", got, tc.restarts+1)
			}
			if len(r.List()) != 0 {
				t.Errorf("job still listed after it ended")
			}
		})
	}
}

func TestRuntime_Restart_KeepsOtherServicesAndPorts(t *testing.T) {
	r, c := newTestRuntime(t, t.TempDir(), nil)
	flaky := svc("flaky", `echo "port=$NORSK_PORT_7000"; if [ -f ran ]; then exec sleep 30; fi; touch ran; exit 1`)
	flaky.Restart, flaky.RestartCount = commonpb.Service_ON_FAILURE, 1
	flaky.Parameters.PortMappings = []*commonpb.PortMapping{{ContainerPort: 7000}}
	job := testJob("job-flaky", svc("steady", "exec sleep 30"), flaky)
	key := worker.KeyOf(job)
	ports, err := r.Start(context.Background(), job)
	if err != nil {
		t.Fatal(err)
	}
	port := ports["flaky"].GetMappings()[0].GetPublished()
	c.WaitN(t, 2, "two service_started of flaky", isServiceStarted(key, "flaky"))
	lines := c.WaitN(t, 2, "two port lines", isOutput(key, "flaky", "stdout: port="))
	for _, l := range lines {
		if want := fmt.Sprintf("stdout: port=%d", port); l.Info.GetContainerEvent().GetText() != want {
			t.Errorf("line %q, want %q (ports are kept across restarts)", l.Info.GetContainerEvent().GetText(), want)
		}
	}
	c.Wait(t, "exit 1", isOutput(key, "flaky", "exited with code 1"))
	if n := c.Count(isServiceStarted(key, "steady")); n != 1 {
		t.Errorf("steady started %d times, want 1", n)
	}
	if c.Count(isKind(key, worker.EventFailed)) != 0 {
		t.Error("job failed")
	}
}

func TestRuntime_Stop_KillsAfterGrace(t *testing.T) {
	r, c := newTestRuntime(t, t.TempDir(), nil)
	job := testJob("job-stubborn", svc("stubborn", `trap '' TERM; echo ready; while :; do sleep 0.05; done`))
	key := worker.KeyOf(job)
	if _, err := r.Start(context.Background(), job); err != nil {
		t.Fatal(err)
	}
	c.Wait(t, "ready", isOutput(key, "stubborn", "stdout: ready"))
	const grace = 300 * time.Millisecond
	begin := time.Now()
	if err := r.Stop(context.Background(), key, grace); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(begin); took < grace {
		t.Errorf("stop took %s, less than the grace period %s", took, grace)
	}
	c.Wait(t, "SIGKILL note", isOutput(key, "stubborn", "sending SIGKILL"))
	c.Wait(t, "killed", isOutput(key, "stubborn", "killed by signal SIGKILL"))
	c.Wait(t, "job_stopped", isKind(key, worker.EventStopped))
}

func TestRuntime_DependsOnOrder(t *testing.T) {
	r, c := newTestRuntime(t, t.TempDir(), nil)
	cmd := func(name string) string {
		return fmt.Sprintf(`trap 'echo stopping %s; exit 0' TERM; echo ready; while :; do sleep 0.02; done`, name)
	}
	a, b, cc := svc("a", cmd("a")), svc("b", cmd("b")), svc("c", cmd("c"))
	a.DependsOn = []string{"b"}
	b.DependsOn = []string{"c"}
	job := testJob("job-deps", a, b, cc)
	key := worker.KeyOf(job)
	if _, err := r.Start(context.Background(), job); err != nil {
		t.Fatal(err)
	}
	var order []string
	for _, ev := range c.WaitN(t, 3, "service_started", func(ev worker.Event) bool {
		return ev.Key == key && ev.Info.GetServiceStarted() != nil
	}) {
		order = append(order, ev.Info.GetServiceStarted().GetServiceName())
	}
	if got := strings.Join(order, ","); got != "c,b,a" {
		t.Errorf("start order %s, want c,b,a", got)
	}
	for _, name := range []string{"a", "b", "c"} {
		c.Wait(t, name+" ready", isOutput(key, name, "stdout: ready"))
	}
	if err := r.Stop(context.Background(), key, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	var exits []string
	for _, ev := range c.All() {
		if ce := ev.Info.GetContainerEvent(); ev.Key == key && ce != nil &&
			(strings.HasPrefix(ce.GetText(), "exited") || strings.HasPrefix(ce.GetText(), "killed")) {
			exits = append(exits, ce.GetServiceName())
		}
	}
	if got := strings.Join(exits, ","); got != "a,b,c" {
		t.Errorf("stop order %s, want a,b,c (each exited with code 0 from its TERM trap)", got)
	}
}

func TestRuntime_Start_InvalidJobs(t *testing.T) {
	loop := func(name string, deps ...string) *commonpb.Service {
		s := svc(name, "exec sleep 30")
		s.DependsOn = deps
		return s
	}
	cases := []struct {
		name   string
		job    *workerpb.WorkerJob
		reason string
	}{
		{"dotdot path", withFiles(testJob("j", loop("a")), "../escape"), `write_files[0].path "../escape"`},
		{"absolute path", withFiles(testJob("j", loop("a")), "/etc/passwd"), `write_files[0].path "/etc/passwd"`},
		{"empty path", withFiles(testJob("j", loop("a")), ""), `write_files[0].path ""`},
		{"no command", testJob("j", svc("a", "")), `service "a" has no command`},
		{"duplicate", testJob("j", loop("a"), loop("a")), `services[1].name "a" is used twice`},
		{"cycle", testJob("j", loop("a", "b"), loop("b", "a")), `cycle among services "a", "b"`},
		{"unknown dependency", testJob("j", loop("a", "x")), `depends on unknown service "x"`},
		{"no job id", testJob("", loop("a")), "job_id is empty"},
		{"bad env", func() *workerpb.WorkerJob {
			s := loop("a")
			s.Parameters.EnvironmentVariables = []*commonpb.EnvironmentVariable{{Name: "A=B"}}
			return testJob("j", s)
		}(), "is not a valid variable name"},
		{"bad range", func() *workerpb.WorkerJob {
			s := loop("a")
			s.Parameters.PortMappings = []*commonpb.PortMapping{{ContainerPort: 1, HostPort: &commonpb.PortMapping_Range{Range: &commonpb.HostPortRange{MinPort: 9, MaxPort: 3}}}}
			return testJob("j", s)
		}(), "range 9..3"},
	}
	r, c := newTestRuntime(t, t.TempDir(), nil)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			before := c.Count(func(ev worker.Event) bool { return ev.Kind == worker.EventFailed })
			_, err := r.Start(context.Background(), tc.job)
			if !errors.Is(err, worker.ErrInvalidJob) {
				t.Fatalf("err = %v, want ErrInvalidJob", err)
			}
			if !strings.Contains(err.Error(), tc.reason) {
				t.Errorf("err %q lacks %q", err, tc.reason)
			}
			evs := c.WaitN(t, before+1, "job_failed", func(ev worker.Event) bool { return ev.Kind == worker.EventFailed })
			if got := evs[before].Reason; !strings.Contains(got, tc.reason) {
				t.Errorf("job_failed reason %q lacks %q", got, tc.reason)
			}
			if len(r.List()) != 0 {
				t.Errorf("List = %v", r.List())
			}
		})
	}
}

func withFiles(job *workerpb.WorkerJob, paths ...string) *workerpb.WorkerJob {
	for _, p := range paths {
		job.WriteFiles = append(job.WriteFiles, &commonpb.WriteFile{Path: p, Contents: []byte("x")})
	}
	return job
}

func TestRuntime_Start_CommandNotFound(t *testing.T) {
	r, c := newTestRuntime(t, t.TempDir(), nil)
	job := testJob("job-404", svc("ghost", "no-such-command-norsk"))
	key := worker.KeyOf(job)
	if _, err := r.Start(context.Background(), job); err != nil {
		t.Fatal(err)
	}
	ev := c.Wait(t, "job_failed", isKind(key, worker.EventFailed))
	for _, frag := range []string{"exited with code 127 (command not found)", `last stderr: "`, "no-such-command-norsk: not found"} {
		if !strings.Contains(ev.Reason, frag) {
			t.Errorf("reason %q lacks %q", ev.Reason, frag)
		}
	}
	c.Wait(t, "shell's complaint", isOutput(key, "ghost", "stderr: "))
}

func TestRuntime_Start_Idempotent(t *testing.T) {
	r, c := newTestRuntime(t, t.TempDir(), nil)
	s := svc("app", "echo $$ >> pids; exec sleep 30")
	s.Parameters.PortMappings = []*commonpb.PortMapping{{ContainerPort: 80}}
	job := testJob("job-idem", s)
	key := worker.KeyOf(job)
	first, err := r.Start(context.Background(), job)
	if err != nil {
		t.Fatal(err)
	}
	second, err := r.Start(context.Background(), job)
	if err != nil {
		t.Fatal(err)
	}
	if a, b := first["app"].GetMappings()[0].GetPublished(), second["app"].GetMappings()[0].GetPublished(); a != b {
		t.Errorf("second Start returned port %d, first %d", b, a)
	}
	c.WaitN(t, 2, "job_started twice", isKind(key, worker.EventStarted))
	if n := c.Count(isServiceStarted(key, "app")); n != 1 {
		t.Errorf("service started %d times, want 1", n)
	}
	if n := len(r.List()); n != 1 {
		t.Errorf("List has %d jobs", n)
	}
}

func TestRuntime_Stop_UnknownJob(t *testing.T) {
	r, c := newTestRuntime(t, t.TempDir(), nil)
	key := keyOf("nope")
	if err := r.Stop(context.Background(), key, time.Second); err != nil {
		t.Fatal(err)
	}
	c.Wait(t, "job_stopped", isKind(key, worker.EventStopped))
}

func TestRuntime_Update_StoresWithoutRestart(t *testing.T) {
	r, c := newTestRuntime(t, t.TempDir(), nil)
	job := testJob("job-upd", svc("app", "exec sleep 30"))
	key := worker.KeyOf(job)
	if _, err := r.Start(context.Background(), job); err != nil {
		t.Fatal(err)
	}
	c.Wait(t, "job_started", isKind(key, worker.EventStarted)) // and every event before it
	upd := testJob("job-upd", svc("app", "exec sleep 31"))
	upd.Description = "v2"
	if err := r.Update(context.Background(), upd); err != nil {
		t.Fatal(err)
	}
	if got := r.List(); len(got) != 1 || got[0].Job.GetDescription() != "v2" {
		t.Errorf("List after update = %v", got)
	}
	if n := c.Count(isServiceStarted(key, "app")); n != 1 {
		t.Errorf("service started %d times", n)
	}
	err := r.Update(context.Background(), testJob("other", svc("a", "true")))
	if !errors.Is(err, worker.ErrJobNotRunning) {
		t.Errorf("update of unknown job: %v", err)
	}
}

func TestRuntime_OutputRateLimit(t *testing.T) {
	r, c := newTestRuntime(t, t.TempDir(), func(cfg *Config) { cfg.OutputLinesPerSecond = 10 })
	job := testJob("job-chatty", svc("chatty", `i=0; while [ $i -lt 200 ]; do echo line$i; i=$((i+1)); done; exec sleep 30`))
	key := worker.KeyOf(job)
	if _, err := r.Start(context.Background(), job); err != nil {
		t.Fatal(err)
	}
	note := c.Wait(t, "suppressed note", isOutput(key, "chatty", "lines suppressed"))
	lines := c.Count(isOutput(key, "chatty", "stdout: line"))
	if lines > 20 {
		t.Errorf("%d lines reported, limit is 10/s", lines)
	}
	var suppressed int
	if _, err := fmt.Sscanf(note.Info.GetContainerEvent().GetText(), "%d lines suppressed", &suppressed); err != nil {
		t.Fatal(err)
	}
	if suppressed+lines < 200 && suppressed < 150 {
		t.Errorf("%d reported + %d suppressed, want 200 in total", lines, suppressed)
	}
}

// TestRuntime_Restore_SameProcess simulates a worker restart with a second
// runtime over the same state directory in this process.
func TestRuntime_Restore_SameProcess(t *testing.T) {
	dir := t.TempDir()
	a, ca := newTestRuntime(t, dir, nil)
	live := svc("live", "echo $$ > live.pid; exec sleep 30")
	live.Parameters.PortMappings = []*commonpb.PortMapping{{ContainerPort: 8080}}
	dies := svc("dies", "echo $$ >> dies.pid; exec sleep 30")
	dies.Restart, dies.RestartCount = commonpb.Service_ON_FAILURE, 2
	job := testJob("job-adopt", live, dies)
	key := worker.KeyOf(job)
	ports, err := a.Start(context.Background(), job)
	if err != nil {
		t.Fatal(err)
	}
	ca.Wait(t, "started", isKind(key, worker.EventStarted))
	wd := workDir(a, key)
	livePID := readPID(t, filepath.Join(wd, "live.pid"))
	diesPID := readPID(t, filepath.Join(wd, "dies.pid"))
	a.Shutdown() // the worker goes away; processes stay

	if !alive(livePID) || !alive(diesPID) {
		t.Fatal("processes did not survive the runtime's shutdown")
	}
	// While no worker watches, "dies" dies.
	if err := syscallKill(diesPID); err != nil {
		t.Fatal(err)
	}
	exitFile := newJobPaths(a.jobsDir, key).exit("dies")
	waitUntil(t, "exit file of dies", func() bool { return fileExists(exitFile) })

	b, cb := newTestRuntime(t, dir, nil)
	got := b.List()
	if len(got) != 1 || got[0].Key() != key {
		t.Fatalf("List after restore = %v", got)
	}
	if p := got[0].Ports["live"].GetMappings()[0].GetPublished(); p != ports["live"].GetMappings()[0].GetPublished() {
		t.Errorf("restored port %d, want %d", p, ports["live"].GetMappings()[0].GetPublished())
	}
	if !alive(livePID) {
		t.Fatal("live service was killed by restore")
	}
	// The dead service is restarted per its policy.
	cb.Wait(t, "exit of dies reported", isOutput(key, "dies", "killed by signal SIGTERM"))
	cb.Wait(t, "dies restarting", isRestarting(key, "dies"))
	cb.Wait(t, "dies started again", isServiceStarted(key, "dies"))
	waitUntil(t, "new pid of dies", func() bool {
		data, _ := os.ReadFile(filepath.Join(wd, "dies.pid"))
		return len(strings.Fields(string(data))) == 2
	})
	if readPID(t, filepath.Join(wd, "live.pid")) != livePID {
		t.Error("live service was restarted")
	}
	if n := cb.Count(isServiceStarted(key, "live")); n != 0 {
		t.Errorf("live service_started × %d after restore, want 0", n)
	}
	// The adopted process's exit is detected (from its exit file: this
	// runtime is not its parent) and fails the job (policy NEVER).
	if err := syscallKill(livePID); err != nil {
		t.Fatal(err)
	}
	ev := cb.Wait(t, "job_failed", isKind(key, worker.EventFailed))
	if !strings.Contains(ev.Reason, `service "live" killed by signal SIGTERM`) {
		t.Errorf("reason %q", ev.Reason)
	}
}

// TestRuntime_Restore_AfterWorkerCrash starts a job from a separate
// "worker" process that then exits without shutting down, and re-adopts
// the job's process, which is no longer anyone's child here.
func TestRuntime_Restore_AfterWorkerCrash(t *testing.T) {
	dir := t.TempDir()
	s := svc("live", "echo $$ > live.pid; exec sleep 30")
	s.Parameters.PortMappings = []*commonpb.PortMapping{{ContainerPort: 5000}}
	job := testJob("job-crash", s)
	key := worker.KeyOf(job)
	runHelper(t, dir, job)

	r, c := newTestRuntime(t, dir, nil)
	got := r.List()
	if len(got) != 1 || got[0].Key() != key || len(got[0].Ports["live"].GetMappings()) != 1 {
		t.Fatalf("List after restore = %v", got)
	}
	pid := readPID(t, filepath.Join(workDir(r, key), "live.pid"))
	if !alive(pid) {
		t.Fatal("service did not survive the worker's crash")
	}
	begin := time.Now()
	if err := syscallKill(pid); err != nil {
		t.Fatal(err)
	}
	ev := c.Wait(t, "job_failed", isKind(key, worker.EventFailed))
	if !strings.Contains(ev.Reason, "killed by signal SIGTERM") {
		t.Errorf("reason %q", ev.Reason)
	}
	t.Logf("exit of an adopted process detected and reported in %s", time.Since(begin))
}

func TestExitStatus_String(t *testing.T) {
	cases := []struct {
		st   exitStatus
		want string
	}{
		{statusFromCode(0), "exited with code 0"},
		{statusFromCode(3), "exited with code 3"},
		{statusFromCode(137), "killed by signal SIGKILL"},
		{statusFromCode(143), "killed by signal SIGTERM"},
		{exitStatus{}, "exited with an unknown status"},
	}
	for _, tc := range cases {
		if got := tc.st.String(); !strings.HasPrefix(got, tc.want) {
			t.Errorf("%+v: %q, want %q", tc.st, got, tc.want)
		}
	}
}

func syscallKill(pid int) error { return unix.Kill(pid, unix.SIGTERM) }

// runHelper runs this test binary in helper mode: it starts job over dir
// and exits without shutting its runtime down.
func runHelper(t *testing.T, dir string, job *workerpb.WorkerJob) {
	t.Helper()
	data, err := protojson.Marshal(job)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), helperEnv+"=1", helperDirEnv+"="+dir, helperJobEnv+"="+string(data))
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "started") {
		t.Fatalf("helper worker: %v\n%s", err, out)
	}
}

// TestRuntime_ChattyServiceLogStaysBounded: a service that writes as fast as
// it can must not fill the disk: its log file is cut back to the cap even
// when the reader cannot keep up.
func TestRuntime_ChattyServiceLogStaysBounded(t *testing.T) {
	dir := t.TempDir()
	const capBytes = 1 << 20
	r, _ := newTestRuntime(t, dir, func(c *Config) { c.MaxLogBytes = capBytes })
	key := worker.JobKey{JobID: "chatty", Role: "primary"}
	if _, err := r.Start(context.Background(), testJob("chatty", svc("yes", "exec yes"))); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = r.Stop(context.Background(), key, time.Second) }()
	var largest, last int64
	shrank := 0
	deadline := time.Now().Add(2 * time.Second)
	for time.Now().Before(deadline) {
		var size int64
		_ = filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
			if err == nil && strings.HasSuffix(p, ".stdout.log") {
				size = fi.Size()
			}
			return nil
		})
		if size < last {
			shrank++
		}
		last, largest = size, max(largest, size)
		time.Sleep(10 * time.Millisecond) // sampling the file size, not synchronising
	}
	if largest == 0 {
		t.Fatal("the service wrote nothing")
	}
	// Unbounded, the file only grows (to gigabytes within 2 s). Bounded,
	// it is cut back again and again; how far it gets between two cuts
	// depends on how busy the machine is, so the size bound is loose.
	if shrank == 0 {
		t.Fatalf("the stdout log never shrank (largest %d bytes, cap %d)", largest, capBytes)
	}
	if largest > 1<<30 {
		t.Fatalf("stdout log reached %d bytes with a cap of %d", largest, capBytes)
	}
}
