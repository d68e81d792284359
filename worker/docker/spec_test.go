package docker

import (
	"errors"
	"strings"
	"testing"

	"github.com/norsk-oss/norsk-manager/proto/commonpb"
	"github.com/norsk-oss/norsk-manager/proto/workerpb"
	"github.com/norsk-oss/norsk-manager/worker"
)

func imgSvc(name, command string, deps ...string) *commonpb.Service {
	return &commonpb.Service{Name: name, Command: command, DependsOn: deps,
		Container: &commonpb.Service_Docker{Docker: &commonpb.DockerContainer{ContainerUrl: &commonpb.ContainerUrl{Url: "example/app:1"}}}}
}

func TestPlanJob(t *testing.T) {
	media := map[string]string{"RECOMMENDED": "example/media:1"}
	tests := []struct {
		name    string
		job     *workerpb.WorkerJob
		media   map[string]string
		order   string
		wantErr string
	}{
		{"order and media first", &workerpb.WorkerJob{JobId: &commonpb.JobId{JobId: "j"},
			Services: []*commonpb.Service{imgSvc("web", "serve --x 'a b'", "db"), imgSvc("db", "")}}, media, "norsk-media,db,web", ""},
		{"no media without images", &workerpb.WorkerJob{JobId: &commonpb.JobId{JobId: "j"},
			Services: []*commonpb.Service{imgSvc("a", "")}}, nil, "a", ""},
		{"empty job id", &workerpb.WorkerJob{}, nil, "", "job_id is empty"},
		{"reserved media name", &workerpb.WorkerJob{JobId: &commonpb.JobId{JobId: "j"},
			Services: []*commonpb.Service{imgSvc("norsk-media", "")}}, media, "", "reserved for the Norsk Media container"},
		{"unknown dependency", &workerpb.WorkerJob{JobId: &commonpb.JobId{JobId: "j"},
			Services: []*commonpb.Service{imgSvc("a", "", "b")}}, nil, "", `depends on unknown service "b"`},
		{"cycle", &workerpb.WorkerJob{JobId: &commonpb.JobId{JobId: "j"},
			Services: []*commonpb.Service{imgSvc("a", "", "b"), imgSvc("b", "", "a")}}, nil, "", "cycle"},
		{"unbalanced quote", &workerpb.WorkerJob{JobId: &commonpb.JobId{JobId: "j"},
			Services: []*commonpb.Service{imgSvc("a", `serve "oops`)}}, nil, "", "cannot be split into arguments"},
		{"file outside", &workerpb.WorkerJob{JobId: &commonpb.JobId{JobId: "j"}, Services: []*commonpb.Service{imgSvc("a", "")},
			WriteFiles: []*commonpb.WriteFile{{Path: "../x"}}}, nil, "", "write_files[0].path"},
		{"file for unknown service", &workerpb.WorkerJob{JobId: &commonpb.JobId{JobId: "j"}, Services: []*commonpb.Service{imgSvc("a", "")},
			WriteFiles: []*commonpb.WriteFile{{Path: "/x", Services: []string{"b"}}}}, nil, "", `unknown service "b"`},
		{"duplicate volume", &workerpb.WorkerJob{JobId: &commonpb.JobId{JobId: "j"}, Volumes: []string{"v", "v"}}, nil, "", "volumes[1]"},
		{"bad env", &workerpb.WorkerJob{JobId: &commonpb.JobId{JobId: "j"}, Services: []*commonpb.Service{func() *commonpb.Service {
			s := imgSvc("a", "")
			s.Parameters = &commonpb.ServiceParameters{EnvironmentVariables: []*commonpb.EnvironmentVariable{{Name: "A=B"}}}
			return s
		}()}}, nil, "", "environment_variables[0]"},
		{"bad image", &workerpb.WorkerJob{JobId: &commonpb.JobId{JobId: "j"}, Services: []*commonpb.Service{func() *commonpb.Service {
			s := imgSvc("a", "")
			s.GetDocker().ContainerUrl.Url = "example/app:a tag with spaces"
			return s
		}()}}, nil, "", "is not an image reference"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			specs, err := planJob(tt.job, tt.media)
			if tt.wantErr != "" {
				if !errors.Is(err, worker.ErrInvalidJob) || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("planJob error = %v, want ErrInvalidJob with %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var names []string
			for _, s := range specs {
				names = append(names, s.Name)
			}
			if got := strings.Join(names, ","); got != tt.order {
				t.Fatalf("order = %s, want %s", got, tt.order)
			}
		})
	}
	specs, err := planJob(tests[0].job, media)
	if err != nil {
		t.Fatal(err)
	}
	if web := specs[2]; strings.Join(web.Cmd, "|") != "serve|--x|a b" {
		t.Errorf("command split as %q", web.Cmd)
	}
	if specs[1].Cmd != nil {
		t.Errorf("an empty command must keep the image's CMD, got %q", specs[1].Cmd)
	}
}
