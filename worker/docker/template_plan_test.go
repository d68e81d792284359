package docker

import (
	"errors"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/norsk-oss/norsk-manager/proto/commonpb"
	"github.com/norsk-oss/norsk-manager/proto/workerpb"
	"github.com/norsk-oss/norsk-manager/worker"
	"github.com/norsk-oss/norsk-manager/worker/internal/svcplan"
	"github.com/norsk-oss/norsk-manager/worker/template"
)

func TestRestartOf(t *testing.T) {
	cases := []struct {
		in     string
		policy commonpb.Service_ServiceRestart
		count  uint32
		bad    bool
	}{
		{"no", commonpb.Service_NEVER, svcplan.DefaultRestartCount, false},
		{"", commonpb.Service_NEVER, svcplan.DefaultRestartCount, false},
		{"always", commonpb.Service_ALWAYS, svcplan.DefaultRestartCount, false},
		{"unless-stopped", commonpb.Service_ALWAYS, svcplan.DefaultRestartCount, false},
		{"on-failure", commonpb.Service_ON_FAILURE, svcplan.DefaultRestartCount, false},
		{"on-failure:7", commonpb.Service_ON_FAILURE, 7, false},
		{"on-failure:0", commonpb.Service_ON_FAILURE, svcplan.DefaultRestartCount, false},
		{"on-failure:x", 0, 0, true},
		{"sometimes", 0, 0, true},
	}
	for _, tc := range cases {
		policy, count, err := restartOf(tc.in)
		if tc.bad != (err != nil) || policy != tc.policy || count != tc.count {
			t.Errorf("restartOf(%q) = %v, %d, %v; want %v, %d, error %v", tc.in, policy, count, err, tc.policy, tc.count, tc.bad)
		}
	}
}

func TestStackCPUSet(t *testing.T) {
	last := runtime.NumCPU() - 1
	cases := []struct {
		in, want string
		bad      bool
	}{
		{"", "", false},
		{"0", "0", false},
		{"0-0,0", "0", false},
		{"x", "", true},
		{"1-0", "", true},
		{"0-99999", "", true},
	}
	if last >= 1 {
		cases = append(cases, struct {
			in, want string
			bad      bool
		}{"1,0-1", "0,1", false})
	}
	for _, tc := range cases {
		got, err := stackCPUSet(tc.in)
		if tc.bad != (err != nil) || got != tc.want {
			t.Errorf("stackCPUSet(%q) = %q, %v; want %q, error %v", tc.in, got, err, tc.want, tc.bad)
		}
	}
}

func TestStackPorts(t *testing.T) {
	got, err := stackPorts([]template.Port{
		{ContainerPort: 8080, Protocol: "tcp"},
		{HostIP: "0.0.0.0", HostPort: 5000, ContainerPort: 5000, Protocol: "udp"},
	})
	if err != nil {
		t.Fatal(err)
	}
	if got[0].GetEphemeral() == nil || got[0].GetHostAddress() != "" || got[0].GetProtocol() != commonpb.ProtocolFamily_TCP {
		t.Errorf("no host port: %v, want ephemeral on the default address", got[0])
	}
	if got[1].GetSpecific().GetPort() != 5000 || got[1].GetHostAddress() != "0.0.0.0" || got[1].GetProtocol() != commonpb.ProtocolFamily_UDP {
		t.Errorf("fixed host port: %v, want specific 5000 udp on 0.0.0.0", got[1])
	}
	if _, err := stackPorts([]template.Port{{HostIP: "nowhere", ContainerPort: 1, Protocol: "tcp"}}); err == nil || !strings.Contains(err.Error(), "ports[0]") {
		t.Errorf("bad host ip: %v", err)
	}
}

func stackOf(svcs ...template.Service) *resolvedTemplate {
	st := &template.Stack{Template: "t", Version: "1", Services: svcs, Networks: []string{"default"}, LaunchConfig: []byte("{}")}
	return &resolvedTemplate{stack: st, files: []stackFile{{Data: st.LaunchConfig}}, fileIdx: map[string]int{}}
}

func TestPlanTemplate(t *testing.T) {
	def := &workerpb.WorkerJob{JobId: &commonpb.JobId{JobId: "j"}, Role: "primary"}
	net := []template.NetworkAttachment{{Name: "default"}}
	rt := stackOf(
		template.Service{Name: "web", Image: "example/web:1", Restart: "always", Networks: net, Entrypoint: []string{},
			DependsOn: []template.Dependency{{Service: "db", Condition: template.ConditionHealthy}, {Service: "init", Condition: template.ConditionStarted}}},
		template.Service{Name: "db", Image: "example/db:1", Restart: "no", Networks: net},
		template.Service{Name: "init", Image: "example/init:1", Restart: "on-failure:2", Networks: net, Command: []string{"a", "b"}},
	)
	specs, stack, err := planTemplate(def, rt)
	if err != nil {
		t.Fatal(err)
	}
	names := []string{}
	for _, s := range specs {
		names = append(names, s.Name)
	}
	if !slices.Equal(names, []string{"db", "init", "web"}) {
		t.Errorf("start order %v", names)
	}
	db, init, web := specs[0], specs[1], specs[2]
	if db.Healthcheck == nil || !db.Healthcheck.watched() || len(db.Healthcheck.Test) != 0 {
		t.Errorf("db (waited healthy, no healthcheck of its own) healthcheck %+v, want the image's, watched", db.Healthcheck)
	}
	if init.Healthcheck != nil {
		t.Errorf("init healthcheck %+v, want none", init.Healthcheck)
	}
	if web.Conditions["db"] != "healthy" || web.Conditions["init"] != "" || !slices.Equal(web.DependsOn, []string{"db", "init"}) {
		t.Errorf("web depends_on %v %v", web.DependsOn, web.Conditions)
	}
	if !slices.Equal(web.Entrypoint, []string{""}) || web.Cmd != nil || !slices.Equal(init.Cmd, []string{"a", "b"}) {
		t.Errorf("entrypoint %q cmd %q / %q", web.Entrypoint, web.Cmd, init.Cmd)
	}
	if web.Restart != commonpb.Service_ALWAYS || db.Restart != commonpb.Service_NEVER || init.Restart != commonpb.Service_ON_FAILURE || init.RestartCount != 2 {
		t.Errorf("restart %v %v %v/%d", web.Restart, db.Restart, init.Restart, init.RestartCount)
	}
	for _, s := range specs {
		if len(s.StackFiles) != 1 || s.StackFiles[0] != (fileMount{Index: 0, Path: template.LaunchConfigPath}) || s.Labels[LabelTemplate] != "t" || s.Labels[LabelTemplateVersion] != "1" {
			t.Errorf("%s: stack files %v labels %v", s.Name, s.StackFiles, s.Labels)
		}
	}
	if len(stack.Files) != 1 || !slices.Equal(stack.Networks, []string{"default"}) {
		t.Errorf("stack %+v", stack)
	}
	if err := validateStack(stack, nil, specs); err != nil {
		t.Errorf("validateStack: %v", err)
	}
	// Fresh specs on every call: the start path fills them in.
	again, _, _ := planTemplate(def, rt)
	if again[0] == specs[0] {
		t.Error("planTemplate returned the same specs twice")
	}
}

func TestPlanTemplate_Refused(t *testing.T) {
	net := []template.NetworkAttachment{{Name: "default"}}
	cases := []struct {
		name string
		svc  template.Service
		want string
	}{
		{"launch config path taken", template.Service{Name: "web", Image: "a", Networks: net,
			Volumes: []template.Volume{{Type: template.VolumeBind, Source: "/srv", Target: template.LaunchConfigPath}}},
			"services.web.volumes[0]: target /etc/norsk/launch-config.json is also the target of the launch config"},
		{"two mounts at one target", template.Service{Name: "web", Image: "a", Networks: net,
			Volumes: []template.Volume{{Type: template.VolumeNamed, Source: "v", Target: "/data"}, {Type: template.VolumeBind, Source: "/srv", Target: "/data/"}}},
			"services.web.volumes[1]: target /data is also the target of volumes[0]"},
		{"bad image", template.Service{Name: "web", Image: "Not An Image", Networks: net}, "services.web.image"},
		{"bad restart", template.Service{Name: "web", Image: "a", Restart: "sometimes", Networks: net}, "services.web.restart"},
		{"unknown dependency", template.Service{Name: "web", Image: "a", Networks: net,
			DependsOn: []template.Dependency{{Service: "db", Condition: template.ConditionStarted}}}, `services.web.depends_on: "db"`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := planTemplate(&workerpb.WorkerJob{JobId: &commonpb.JobId{JobId: "j"}, Role: "primary"}, stackOf(tc.svc))
			if !errors.Is(err, worker.ErrInvalidJob) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("planTemplate = %v, want ErrInvalidJob with %q", err, tc.want)
			}
		})
	}
}
