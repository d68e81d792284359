package template

import (
	"errors"
	"strings"
	"testing"
)

// allowedCompose uses every allowed key, in both the short and the long
// syntax where compose has both.
const allowedCompose = `
name: ignored
x-common: &common
  restart: always
services:
  api:
    <<: *common
    image: example/probe:1
    command: ["/probe", "serve"]
    entrypoint: /probe
    environment: {A: "1", B: null}
    env_file: [app.env, {path: opt.env, required: false}]
    ports: ["8080:8080", {target: 9090, published: "9091", protocol: udp, host_ip: 127.0.0.1}]
    volumes: ["data:/data", {type: bind, source: ./conf, target: /conf, read_only: true}, {type: volume, source: data, target: /d2}]
    networks: {front: {aliases: [api1]}, back: null}
    healthcheck: {test: ["CMD", "/probe", "health"], interval: 1s, timeout: 2s, retries: 3, start_period: 1s, disable: false}
    restart: on-failure:3
    shm_size: 64m
    cpuset: "0-1"
    configs: [cfg, {source: cfg, target: /etc/cfg}]
    x-note: ignored
  web:
    image: example/probe:1
    environment: ["A=1"]
    networks: [front]
    depends_on:
      api: {condition: service_healthy}
      job: {condition: service_completed_successfully}
      other: {condition: service_started}
  job:
    image: example/probe:1
    depends_on: [other]
  other:
    image: example/probe:1
volumes:
  data:
  more: {}
networks:
  front:
  back: {}
configs:
  cfg: {file: ./cfg.txt}
x-top: {anything: [1, 2]}
`

func TestCheckComposeKeys_AllowsEveryAllowedKey(t *testing.T) {
	path, reason, err := checkComposeKeys([]byte(allowedCompose))
	if err != nil || path != "" {
		t.Fatalf("allowed compose refused: path %q reason %q err %v", path, reason, err)
	}
}

func TestCheckComposeKeys_Refused(t *testing.T) {
	svc := func(body string) string { return "services:\n  web:\n    image: x\n" + body }
	cases := []struct {
		name, yaml, path string
	}{
		{"privileged", svc("    privileged: true\n"), "services.web.privileged"},
		{"build", svc("    build: .\n"), "services.web.build"},
		{"deploy", svc("    deploy: {replicas: 2}\n"), "services.web.deploy"},
		{"cap_add", svc("    cap_add: [SYS_ADMIN]\n"), "services.web.cap_add"},
		{"network_mode", svc("    network_mode: host\n"), "services.web.network_mode"},
		{"pid", svc("    pid: host\n"), "services.web.pid"},
		{"ipc", svc("    ipc: host\n"), "services.web.ipc"},
		{"devices", svc("    devices: [/dev/sda]\n"), "services.web.devices"},
		{"secrets", svc("    secrets: [s]\n"), "services.web.secrets"},
		{"extends", svc("    extends: {service: base}\n"), "services.web.extends"},
		{"labels", svc("    labels: {a: b}\n"), "services.web.labels"},
		{"container_name", svc("    container_name: fixed\n"), "services.web.container_name"},
		{"volumes_from", svc("    volumes_from: [other]\n"), "services.web.volumes_from"},
		{"profiles", svc("    profiles: [debug]\n"), "services.web.profiles"},
		{"user", svc("    user: root\n"), "services.web.user"},
		{"security_opt", svc("    security_opt: [seccomp:unconfined]\n"), "services.web.security_opt"},
		{"sysctls", svc("    sysctls: {a: 1}\n"), "services.web.sysctls"},
		{"tmpfs key", svc("    tmpfs: /run\n"), "services.web.tmpfs"},
		{"port mode", svc("    ports: [{target: 80, mode: host}]\n"), "services.web.ports[0].mode"},
		{"port protocol", svc("    ports: [{target: 80, protocol: sctp}]\n"), "services.web.ports[0].protocol"},
		{"volume tmpfs", svc("    volumes: [{type: tmpfs, target: /t}]\n"), "services.web.volumes[0].type"},
		{"volume bind options", svc("    volumes: [{type: bind, source: ., target: /t, bind: {propagation: shared}}]\n"), "services.web.volumes[0].bind"},
		{"volume consistency", svc("    volumes: [{type: volume, source: d, target: /t, consistency: cached}]\n"), "services.web.volumes[0].consistency"},
		{"network ipv4", svc("    networks: {front: {ipv4_address: 10.0.0.2}}\n"), "services.web.networks.front.ipv4_address"},
		{"depends_on restart", svc("    depends_on: {a: {condition: service_started, restart: true}}\n"), "services.web.depends_on.a.restart"},
		{"depends_on condition", svc("    depends_on: {a: {condition: service_ready}}\n"), "services.web.depends_on.a.condition"},
		{"healthcheck start_interval", svc("    healthcheck: {test: [NONE], start_interval: 1s}\n"), "services.web.healthcheck.start_interval"},
		{"env_file format", svc("    env_file: [{path: a.env, format: raw}]\n"), "services.web.env_file[0].format"},
		{"config mode", svc("    configs: [{source: c, mode: 0777}]\n"), "services.web.configs[0].mode"},
		{"top include", "include: [other.yaml]\n" + svc(""), "include"},
		{"top secrets", "secrets: {s: {file: ./s}}\n" + svc(""), "secrets"},
		{"top models", "models: {m: {model: x}}\n" + svc(""), "models"},
		{"top version", "version: '3'\n" + svc(""), "version"},
		{"volume driver", "volumes: {d: {driver: local}}\n" + svc(""), "volumes.d.driver"},
		{"volume external", "volumes: {d: {external: true}}\n" + svc(""), "volumes.d.external"},
		{"network driver", "networks: {n: {driver: host}}\n" + svc(""), "networks.n.driver"},
		{"config content", "configs: {c: {content: hello}}\n" + svc(""), "configs.c.content"},
		{"merged in by an anchor", "x-bad: &bad\n  privileged: true\nservices:\n  web:\n    <<: *bad\n    image: x\n", "services.web.privileged"},
		{"second document", svc("") + "---\n" + svc("    pid: host\n"), "services.web.pid"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			path, reason, err := checkComposeKeys([]byte(tc.yaml))
			if err != nil {
				t.Fatalf("parse: %v", err)
			}
			if path != tc.path || reason == "" {
				t.Fatalf("refused path %q (%q), want %q", path, reason, tc.path)
			}
		})
	}
}

func TestCheckComposeKeys_InterpolatedEnumChecked(t *testing.T) {
	// A "$" value is left to Resolve; a literal one is checked at load.
	y := "services:\n  web:\n    image: x\n    volumes: [{type: \"${T}\", source: d, target: /t}]\n"
	if path, _, _ := checkComposeKeys([]byte(y)); path != "" {
		t.Fatalf("interpolated type refused at load: %s", path)
	}
}

func TestLoadCatalogue_RefusesKeyNamingFileAndPath(t *testing.T) {
	dir := t.TempDir()
	writeVersion(t, dir, "bad", "1", map[string]string{ComposeFile: "services:\n  web:\n    image: x\n    privileged: true\n"})
	c := mustLoad(t, dir)
	if len(c.Offers()) != 0 {
		t.Fatalf("offers %v, want none", c.Offers())
	}
	refused := c.Refused()
	if len(refused) != 1 {
		t.Fatalf("refused %v, want one", refused)
	}
	r := refused[0]
	if !errors.Is(r, ErrKeyNotAllowed) || r.KeyPath != "services.web.privileged" || !strings.HasSuffix(r.File, "bad/1/compose.yaml") {
		t.Fatalf("refusal %+v: want ErrKeyNotAllowed at services.web.privileged in bad/1/compose.yaml", r)
	}
	if msg := r.Error(); !strings.Contains(msg, "services.web.privileged") || !strings.Contains(msg, "compose.yaml") {
		t.Fatalf("message %q names neither key nor file", msg)
	}
}
