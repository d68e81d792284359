package template

import (
	"context"
	"encoding/json"
	"errors"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/compose-spec/compose-go/v2/types"

	"github.com/norsk-oss/norsk-manager/proto/commonpb"
	"github.com/norsk-oss/norsk-manager/proto/workerpb"
	"github.com/norsk-oss/norsk-manager/worker"
)

func job(name, version string, params map[string]string) *workerpb.WorkerJob {
	return &workerpb.WorkerJob{
		ProductTemplate:           &commonpb.ProductTemplateRef{Name: name, Version: version},
		ProductTemplateParameters: params,
	}
}

func strp(s string) *string { return &s }

// fullCompose uses every feature Resolve converts.
const fullCompose = `
name: authors-name
services:
  api:
    image: ${IMAGE}
    entrypoint: ["/probe"]
    command: serve --port ${PORT:-8080}
    environment:
      GREETING: ${GREETING:-hello}
      FROM_DOTENV:
      UNSET_BARE:
      NORSK_LAUNCH_CONFIG: overridden
    env_file: [app.env]
    ports: ["${PORT:-8080}:8080", {target: 9000, protocol: udp, host_ip: 127.0.0.2}]
    volumes: ["data:/data", "./conf:/conf:ro"]
    healthcheck:
      test: ["CMD", "/probe", "health", "http://127.0.0.1:8080/healthz"]
      interval: 1s
      timeout: 2s
      retries: 5
      start_period: 3s
    restart: on-failure:3
    shm_size: 64m
    cpuset: "0"
    configs: [{source: cfg, target: /etc/app/cfg.txt}, cfg]
  web:
    image: ${IMAGE}
    depends_on:
      api: {condition: service_healthy}
    networks: {front: {aliases: [www]}}
    restart: unless-stopped
    healthcheck: {disable: true}
volumes:
  data:
networks:
  front:
configs:
  cfg: {file: ./cfg.txt}
`

func fullCatalogue(t *testing.T) (*Catalogue, string) {
	t.Helper()
	dir := t.TempDir()
	vdir := writeVersion(t, dir, "full", "1.0", map[string]string{
		ComposeFile:  fullCompose,
		EnvFile:      "IMAGE=example/probe:1\nFROM_DOTENV=dotenv\nDERIVED=${IMAGE}-${GREETING}\n",
		"app.env":    "APP=${DERIVED}\n",
		"cfg.txt":    "config",
		MetadataFile: `{"launchDefaults": {"log": {"level": "info", "json": true}}}`,
	})
	return mustLoad(t, dir), vdir
}

func TestResolve_FullStack(t *testing.T) {
	c, vdir := fullCatalogue(t)
	st, err := c.Resolve(context.Background(), job("full", "1.0", map[string]string{"GREETING": "hi", "PORT": "18080"}))
	if err != nil {
		t.Fatal(err)
	}
	launch := `{"log":{"json":true,"level":"info"}}`
	want := &Stack{
		Template: "full", Version: "1.0",
		Volumes:  []string{"data"},
		Networks: []string{"default", "front"},
		Services: []Service{{
			Name: "api", Image: "example/probe:1",
			Entrypoint: []string{"/probe"},
			Command:    []string{"serve", "--port", "18080"},
			Environment: []string{
				"APP=example/probe:1-hi", "FROM_DOTENV=dotenv", "GREETING=hi", "NORSK_LAUNCH_CONFIG=" + launch,
			},
			Ports: []Port{
				{HostPort: 18080, ContainerPort: 8080, Protocol: "tcp"},
				{HostIP: "127.0.0.2", ContainerPort: 9000, Protocol: "udp"},
			},
			Volumes: []Volume{
				{Type: VolumeNamed, Source: "data", Target: "/data"},
				{Type: VolumeBind, Source: filepath.Join(vdir, "conf"), Target: "/conf", ReadOnly: true},
			},
			Networks: []NetworkAttachment{{Name: "default"}},
			Healthcheck: &Healthcheck{
				Test:     []string{"CMD", "/probe", "health", "http://127.0.0.1:8080/healthz"},
				Interval: time.Second, Timeout: 2 * time.Second, StartPeriod: 3 * time.Second, Retries: 5,
			},
			Restart: "on-failure:3", ShmSize: 64 << 20, CPUSet: "0",
			Configs: []ConfigMount{
				{Source: filepath.Join(vdir, "cfg.txt"), Target: "/etc/app/cfg.txt"},
				{Source: filepath.Join(vdir, "cfg.txt"), Target: "/cfg"},
			},
		}, {
			Name: "web", Image: "example/probe:1",
			Environment: []string{"NORSK_LAUNCH_CONFIG=" + launch},
			Networks:    []NetworkAttachment{{Name: "front", Aliases: []string{"www"}}},
			DependsOn:   []Dependency{{Service: "api", Condition: ConditionHealthy}},
			Healthcheck: &Healthcheck{Disabled: true},
			Restart:     "unless-stopped",
		}},
		LaunchConfig: []byte(launch),
	}
	if !reflect.DeepEqual(st, want) {
		got, _ := json.MarshalIndent(st, "", "  ")
		exp, _ := json.MarshalIndent(want, "", "  ")
		t.Fatalf("stack:\n%s\nwant:\n%s", got, exp)
	}
}

func TestResolve_WorkerEnvironmentDoesNotLeak(t *testing.T) {
	t.Setenv("LEAK", "from-the-worker")
	t.Setenv("IMAGE", "worker/image:1")
	dir := t.TempDir()
	writeVersion(t, dir, "t", "1", map[string]string{
		ComposeFile: "services:\n  web:\n    image: ${IMAGE:-example/probe:1}\n    environment: {A: \"${LEAK}\", LEAK: null}\n",
		EnvFile:     "B=${LEAK}\n",
	})
	st, err := mustLoad(t, dir).Resolve(context.Background(), job("t", "1", nil))
	if err != nil {
		t.Fatal(err)
	}
	s := st.Services[0]
	if s.Image != "example/probe:1" {
		t.Errorf("image %q: the worker's $IMAGE leaked", s.Image)
	}
	for _, e := range s.Environment {
		if strings.Contains(e, "from-the-worker") || strings.HasPrefix(e, "LEAK=") {
			t.Errorf("environment %v: the worker's $LEAK leaked", s.Environment)
		}
	}
}

func TestResolve_Errors(t *testing.T) {
	dir := t.TempDir()
	writeVersion(t, dir, "a", "1.0", map[string]string{ComposeFile: minimalCompose})
	writeVersion(t, dir, "a", "1.1", map[string]string{ComposeFile: minimalCompose})
	writeVersion(t, dir, "b", "2", map[string]string{ComposeFile: minimalCompose})
	writeVersion(t, dir, "req", "1", map[string]string{
		ComposeFile: "services:\n  web:\n    image: example/probe:1\n    environment: {K: \"${STREAM_KEY:?the stream key}\", U: \"${URL?}\"}\n",
	})
	writeVersion(t, dir, "meta", "1", map[string]string{
		ComposeFile: minimalCompose, MetadataFile: `{"requiredParameters": ["TOKEN"]}`,
	})
	writeVersion(t, dir, "vals", "1", map[string]string{
		ComposeFile: "services:\n  web:\n    image: \"${IMAGE-example/probe:1}\"\n    restart: \"${RESTART:-no}\"\n" +
			"    ports: [\"${PORTS:-8080}:80\"]\n",
	})
	writeVersion(t, dir, "anon", "1", map[string]string{ComposeFile: minimalCompose + "    volumes: [/data]\n"})
	writeVersion(t, dir, "nocfg", "1", map[string]string{ComposeFile: minimalCompose + "    configs: [c]\nconfigs:\n  c: {file: ./missing.txt}\n"})
	c := mustLoad(t, dir)
	cases := []struct {
		name    string
		job     *workerpb.WorkerJob
		wantErr error
		wantMsg []string
	}{
		{"no product_template", &workerpb.WorkerJob{}, worker.ErrInvalidJob, []string{"product_template"}},
		{"unknown template", job("x", "1", nil), worker.ErrTemplateUnavailable,
			[]string{`no template "x"`, "a (1.0, 1.1), anon (1), b (2)"}},
		{"missing config file", job("nocfg", "1", nil), worker.ErrInvalidJob, []string{"services.web.configs[0]", "missing.txt"}},
		{"unknown version", job("a", "2.0", nil), worker.ErrTemplateUnavailable,
			[]string{`no version "2.0" of template "a"`, "a (1.0, 1.1)"}},
		{"required :? missing", job("req", "1", map[string]string{"URL": ""}), worker.ErrInvalidJob,
			[]string{"STREAM_KEY", "the stream key"}},
		{"required :? empty", job("req", "1", map[string]string{"STREAM_KEY": "", "URL": ""}), worker.ErrInvalidJob,
			[]string{"STREAM_KEY"}},
		{"required ? unset", job("req", "1", map[string]string{"STREAM_KEY": "k"}), worker.ErrInvalidJob, []string{"URL"}},
		{"requiredParameters", job("meta", "1", nil), worker.ErrInvalidJob, []string{"TOKEN", "requiredParameters"}},
		{"bad parameter name", job("a", "1.0", map[string]string{"A=B": "x"}), worker.ErrInvalidJob, []string{`"A=B"`}},
		{"empty image", job("vals", "1", map[string]string{"IMAGE": ""}), worker.ErrInvalidJob, []string{`"web"`, "image"}},
		{"bad restart", job("vals", "1", map[string]string{"RESTART": "sometimes"}), worker.ErrInvalidJob, []string{"services.web.restart", "sometimes"}},
		{"restart count beyond 32 bits", job("vals", "1", map[string]string{"RESTART": "on-failure:4294967296"}), worker.ErrInvalidJob, []string{"services.web.restart", "on-failure:4294967296"}},
		{"port range", job("vals", "1", map[string]string{"PORTS": "8000-8001"}), worker.ErrInvalidJob, []string{"services.web.ports[0]"}},
		{"anonymous volume", job("anon", "1", nil), worker.ErrInvalidJob, []string{"anonymous"}},
		{"bad launch_config_json", func() *workerpb.WorkerJob {
			j := job("a", "1.0", nil)
			j.LaunchConfigJson = strp("{")
			return j
		}(), worker.ErrInvalidJob, []string{"launch_config_json"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := c.Resolve(context.Background(), tc.job)
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("err %v, want %v", err, tc.wantErr)
			}
			for _, m := range tc.wantMsg {
				if !strings.Contains(err.Error(), m) {
					t.Errorf("err %q does not name %q", err, m)
				}
			}
		})
	}
	if _, err := c.Resolve(context.Background(), job("req", "1", map[string]string{"STREAM_KEY": "k", "URL": ""})); err != nil {
		t.Fatalf("required variables set: %v", err)
	}
}

func TestVolumes_RefusesWhatTheRuntimeCannotMount(t *testing.T) {
	// Defence in depth: the allow-list (literal values) and compose-go's
	// schema (interpolated ones) refuse these before.
	cases := map[string]types.ServiceVolumeConfig{
		"tmpfs":       {Type: "tmpfs", Target: "/t"},
		"anonymous":   {Type: VolumeNamed, Target: "/t"},
		"relative":    {Type: VolumeNamed, Source: "d", Target: "t"},
		"selinux":     {Type: VolumeBind, Source: "/s", Target: "/t", Bind: &types.ServiceVolumeBind{SELinux: "z"}},
		"propagation": {Type: VolumeBind, Source: "/s", Target: "/t", Bind: &types.ServiceVolumeBind{Propagation: "shared"}},
		"nocopy":      {Type: VolumeNamed, Source: "d", Target: "/t", Volume: &types.ServiceVolumeVolume{NoCopy: true}},
	}
	for name, v := range cases {
		if _, err := volumes([]types.ServiceVolumeConfig{v}); err == nil || !strings.Contains(err.Error(), "volumes[0]") {
			t.Errorf("%s: err %v, want one naming volumes[0]", name, err)
		}
	}
}

func TestResolve_NilCatalogue(t *testing.T) {
	var c *Catalogue
	_, err := c.Resolve(context.Background(), job("hello", "1.0", nil))
	if !errors.Is(err, worker.ErrTemplateUnavailable) || !strings.Contains(err.Error(), "no templates") {
		t.Fatalf("err %v, want ErrTemplateUnavailable saying the worker has no templates", err)
	}
	if c.Offers() != nil {
		t.Fatal("a nil catalogue offers templates")
	}
}

// The stack's networks are the declared ones, plus compose's implicit
// default only when a service uses it.
func TestResolve_Networks(t *testing.T) {
	dir := t.TempDir()
	writeVersion(t, dir, "n", "1", map[string]string{ComposeFile: minimalCompose + "    networks: [front]\nnetworks:\n  front:\n  unused:\n"})
	st, err := mustLoad(t, dir).Resolve(context.Background(), job("n", "1", nil))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(st.Networks, []string{"front", "unused"}) {
		t.Fatalf("networks %v: want [front unused]", st.Networks)
	}
}

func TestFuseLaunchConfig(t *testing.T) {
	cases := []struct {
		name             string
		defaults         string
		author, operator *string
		want             string
		wantField        string
	}{
		{"nothing", "", nil, nil, `{}`, ""},
		{"defaults only", `{"a": 1}`, nil, nil, `{"a":1}`, ""},
		{"operator over author over defaults", `{"a": 1, "b": {"c": 1, "d": 1}}`, strp(`{"b": {"c": 2}, "e": 1}`), strp(`{"b": {"d": 3}, "e": null}`),
			`{"a":1,"b":{"c":2,"d":3}}`, ""},
		{"null deletes a default", `{"a": 1, "b": 2}`, nil, strp(`{"a": null}`), `{"b":2}`, ""},
		{"array replaces", `{"a": [1, 2]}`, strp(`{"a": [3]}`), nil, `{"a":[3]}`, ""},
		{"blank tier skipped", `{"a": 1}`, strp(""), strp("  "), `{"a":1}`, ""},
		{"non-object patch replaces (RFC 7396)", `{"a": 1}`, nil, strp(`"x"`), `"x"`, ""},
		{"bad author tier", "", strp(`{"a":`), nil, "", "template_launch_defaults_json"},
		{"bad operator tier", "", nil, strp(`nope`), "", "launch_config_json"},
		{"bad defaults", `{`, nil, nil, "", "launchDefaults"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := FuseLaunchConfig([]byte(tc.defaults), tc.author, tc.operator)
			if tc.wantField != "" {
				if !errors.Is(err, worker.ErrInvalidJob) || !strings.Contains(err.Error(), tc.wantField) {
					t.Fatalf("err %v, want ErrInvalidJob naming %s", err, tc.wantField)
				}
				return
			}
			if err != nil || string(got) != tc.want {
				t.Fatalf("got %s, %v; want %s", got, err, tc.want)
			}
		})
	}
}

func TestResolve_LaunchConfigTiers(t *testing.T) {
	c, _ := fullCatalogue(t)
	j := job("full", "1.0", nil)
	j.TemplateLaunchDefaultsJson = strp(`{"log": {"json": false}, "x": 1}`)
	j.LaunchConfigJson = strp(`{"log": {"level": "debug"}}`)
	st, err := c.Resolve(context.Background(), j)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"log":{"json":false,"level":"debug"},"x":1}`
	if string(st.LaunchConfig) != want {
		t.Fatalf("launch config %s, want %s", st.LaunchConfig, want)
	}
	for _, s := range st.Services {
		if !contains(s.Environment, LaunchConfigEnv+"="+want) {
			t.Errorf("service %s environment %v lacks %s", s.Name, s.Environment, LaunchConfigEnv)
		}
	}
}
