//go:build linux

package docker

import (
	"context"
	"errors"
	"io"
	"net"
	"net/url"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/docker/docker/client"

	"github.com/norsk-oss/norsk-manager/proto/commonpb"
	"github.com/norsk-oss/norsk-manager/test/dockerenv"
	"github.com/norsk-oss/norsk-manager/worker"
)

// TestRuntime_EngineUnreachable_RefusesJobsAndReports: with DOCKER_HOST
// naming an engine that is not there, the runtime still starts, reports
// the engine's state with the cause, and refuses a job at once with
// job_failed naming the engine, instead of taking it. No engine needed.
func TestRuntime_EngineUnreachable_RefusesJobsAndReports(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closedPort := "tcp://" + l.Addr().String()
	l.Close()
	cases := []struct {
		name, host, cause string
	}{
		{"closed port", closedPort, "connection refused"},
		{"missing socket", "unix://" + filepath.Join(t.TempDir(), "docker.sock"), "no such file or directory"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("DOCKER_HOST", tc.host)
			cfg := DevConfig()
			cfg.StateDir = t.TempDir()
			cfg.Logger = worker.TestLogger(t)
			r, err := New(context.Background(), cfg)
			if err != nil {
				t.Fatalf("New with an unreachable engine: %v", err)
			}
			t.Cleanup(r.Shutdown)
			c := worker.Collect(t, r)
			if err := r.Restore(context.Background()); err != nil {
				t.Fatalf("Restore with an unreachable engine: %v", err)
			}
			want := "docker engine at " + tc.host + " unreachable: "
			conds := r.Conditions()
			if len(conds) != 1 || conds[0].Runtime != ConditionRuntime || conds[0].OK || conds[0].Since.IsZero() ||
				!strings.HasPrefix(conds[0].Reason, want) || !strings.Contains(conds[0].Reason, tc.cause) {
				t.Fatalf("conditions %+v, want docker not ok, %q… %q", conds, want, tc.cause)
			}

			job := mkJob("refused", &commonpb.Service{Name: "web",
				Container: &commonpb.Service_Docker{Docker: &commonpb.DockerContainer{ContainerUrl: &commonpb.ContainerUrl{Url: "example/web:1"}}}})
			key := worker.KeyOf(job)
			_, err = r.Start(context.Background(), job)
			if !errors.Is(err, ErrEngineUnreachable) {
				t.Fatalf("Start = %v, want ErrEngineUnreachable", err)
			}
			ev := c.Wait(t, "job_failed", isKind(key, worker.EventFailed))
			if !strings.HasPrefix(ev.Reason, want) || !strings.Contains(ev.Reason, tc.cause) {
				t.Errorf("job_failed reason %q, want %q… %q", ev.Reason, want, tc.cause)
			}
			if n := c.Count(func(ev worker.Event) bool { return ev.Key == key && ev.Kind != worker.EventFailed }); n != 0 {
				t.Errorf("%d other events for the refused job: it was taken", n)
			}
			if got := r.List(); len(got) != 0 {
				t.Errorf("List = %v after a refused start", got)
			}
		})
	}
}

// TestRuntime_EngineDownAtRestore_AdoptsWhenItAnswers: a worker restarted
// while its engine does not answer (a proxy in front of the real engine,
// stopped) takes its recorded jobs back at once (listed), refuses new ones,
// and once the engine answers adopts the containers without restarting
// them and carries out a stop asked meanwhile.
func TestRuntime_EngineDownAtRestore_AdoptsWhenItAnswers(t *testing.T) {
	engineCli := dockerenv.Client(t)
	sock := filepath.Join(t.TempDir(), "engine.sock")
	proxy := startEngineProxy(t, sock, engineCli.DaemonHost())
	proxied, err := client.NewClientWithOpts(client.WithHost("unix://"+sock), client.WithAPIVersionNegotiation())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { proxied.Close() })
	viaProxy := func(c *Config) { c.Client = proxied }
	e := newEnv(t, viaProxy)

	keep, stop := e.servingJob(t, "keep"), e.servingJob(t, "stop")
	before := e.inspectService(keep, "web")
	e.r.Shutdown() // the worker exits; the containers keep running
	proxy.stop()   // and the engine stops answering

	e.start(viaProxy)
	if conds := e.r.Conditions(); len(conds) != 1 || conds[0].OK {
		t.Fatalf("conditions %+v, want the engine unreachable", conds)
	}
	if got := e.r.List(); len(got) != 2 {
		t.Fatalf("List = %v, want both recorded jobs", got)
	}
	refused := mkJob("new", e.svc("web", "serve"))
	if _, err := e.r.Start(context.Background(), refused); !errors.Is(err, ErrEngineUnreachable) {
		t.Fatalf("Start of a new job = %v, want ErrEngineUnreachable", err)
	}
	stopped := make(chan error, 1)
	go func() { stopped <- e.r.Stop(context.Background(), stop, time.Second) }() // waits for the engine
	poll(t, "the stop to be taken before the containers are adopted", func() bool {
		e.r.mu.Lock()
		j := e.r.mu.jobs[stop]
		e.r.mu.Unlock()
		return j.sup.StopDeferred()
	})

	proxy.start()
	select {
	case err := <-stopped:
		if err != nil {
			t.Fatalf("Stop: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Stop did not finish after the engine came back")
	}
	e.c.Wait(t, "job_stopped", isKind(stop, worker.EventStopped))
	if conds := e.r.Conditions(); !conds[0].OK {
		t.Errorf("conditions %+v after the engine came back", conds)
	}
	after := e.inspectService(keep, "web")
	if after.ID != before.ID || after.State.StartedAt != before.State.StartedAt {
		t.Errorf("kept job's container restarted: %s@%s → %s@%s", before.ID, before.State.StartedAt, after.ID, after.State.StartedAt)
	}
	if got := e.r.List(); len(got) != 1 || got[0].Key() != keep {
		t.Errorf("List = %v, want only the kept job", got)
	}
}

// poll waits until cond holds, failing the test after 30 s.
func poll(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	ticker := time.NewTicker(10 * time.Millisecond)
	defer ticker.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		<-ticker.C
	}
}

// servingJob starts a one-service job that serves HTTP and waits until it
// is started.
func (e *testEnv) servingJob(t *testing.T, id string) worker.JobKey {
	t.Helper()
	s := e.svc("web", "serve")
	s.Parameters = &commonpb.ServiceParameters{PortMappings: []*commonpb.PortMapping{ephemeral(8080)}}
	j := mkJob(id, s)
	if _, err := e.r.Start(context.Background(), j); err != nil {
		t.Fatal(err)
	}
	return worker.KeyOf(j)
}

// engineProxy forwards connections on a unix socket to the real engine;
// stopping it closes the socket and every connection, as an engine that
// went away.
type engineProxy struct {
	t          *testing.T
	path, real string
	wg         sync.WaitGroup
	mu         struct {
		sync.Mutex
		lis   net.Listener
		conns map[net.Conn]bool
	}
}

func startEngineProxy(t *testing.T, path, realHost string) *engineProxy {
	t.Helper()
	p := &engineProxy{t: t, path: path, real: realHost}
	p.start()
	t.Cleanup(func() {
		p.stop()
		p.wg.Wait()
	})
	return p
}

func (p *engineProxy) start() {
	p.t.Helper()
	lis, err := net.Listen("unix", p.path)
	if err != nil {
		p.t.Fatal(err)
	}
	p.mu.Lock()
	p.mu.lis, p.mu.conns = lis, map[net.Conn]bool{}
	p.mu.Unlock()
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			p.forward(c)
		}
	}()
}

// forward copies between c and a new connection to the real engine.
func (p *engineProxy) forward(c net.Conn) {
	u, err := url.Parse(p.real)
	if err != nil {
		c.Close()
		return
	}
	network, addr := u.Scheme, u.Host
	if network == "unix" {
		addr = u.Path
	}
	up, err := net.Dial(network, addr)
	if err != nil {
		c.Close()
		return
	}
	p.mu.Lock()
	p.mu.conns[c], p.mu.conns[up] = true, true
	p.mu.Unlock()
	for _, pair := range [][2]net.Conn{{c, up}, {up, c}} {
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			_, _ = io.Copy(pair[0], pair[1])
			pair[0].Close()
			pair[1].Close()
		}()
	}
}

func (p *engineProxy) stop() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.mu.lis != nil {
		p.mu.lis.Close()
		p.mu.lis = nil
	}
	for c := range p.mu.conns {
		c.Close()
	}
	p.mu.conns = nil
}
