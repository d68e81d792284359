package process

import (
	"errors"
	"slices"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/norsk-oss/norsk-manager/proto/commonpb"
	"github.com/norsk-oss/norsk-manager/proto/workerpb"
	"github.com/norsk-oss/norsk-manager/worker"
)

// FuzzPlanServices feeds a WorkerJob, as a provision_job or update_job of
// a manager session carries it, to the process runtime's planning. It must
// never panic; a refusal wraps worker.ErrInvalidJob (the worker reports
// job_failed, it does not crash); a plan has every service once, each
// after the services it depends on; pinned CPUs are within those allowed,
// ascending, each once.
func FuzzPlanServices(f *testing.F) {
	for _, j := range []*workerpb.WorkerJob{
		{JobId: &commonpb.JobId{JobId: "j"}, Role: "primary", Services: []*commonpb.Service{
			{Name: "web", Command: "exec sleep 1", DependsOn: []string{"db"}, Parameters: &commonpb.ServiceParameters{
				EnvironmentVariables: []*commonpb.EnvironmentVariable{{Name: "A", Value: "1"}},
				PortMappings:         []*commonpb.PortMapping{{ContainerPort: 8080}}}},
			{Name: "db", Command: "exec sleep 1", Restart: commonpb.Service_ON_FAILURE}},
			WriteFiles: []*commonpb.WriteFile{{Path: "conf/a.json", Services: []string{"web"}}}, NorskCpuList: []uint32{1, 0, 1}},
		{JobId: &commonpb.JobId{JobId: "cycle"}, Services: []*commonpb.Service{
			{Name: "a", Command: "x", DependsOn: []string{"b"}}, {Name: "b", Command: "x", DependsOn: []string{"a"}}}},
	} {
		b, err := proto.Marshal(j)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	allowed := []uint32{0, 1, 2, 3}
	f.Fuzz(func(t *testing.T, data []byte) {
		var job workerpb.WorkerJob
		if proto.Unmarshal(data, &job) != nil {
			return
		}
		if cpus, err := planCPUs(&job, allowed); err != nil {
			if !errors.Is(err, worker.ErrInvalidJob) {
				t.Fatalf("planCPUs refusal %v does not wrap ErrInvalidJob", err)
			}
		} else if !slices.IsSorted(cpus) || len(slices.Compact(slices.Clone(cpus))) != len(cpus) ||
			slices.ContainsFunc(cpus, func(c uint32) bool { return !slices.Contains(allowed, c) }) {
			t.Fatalf("planCPUs = %v from %v", cpus, job.GetNorskCpuList())
		}
		specs, err := planServices(&job)
		if err != nil {
			if !errors.Is(err, worker.ErrInvalidJob) {
				t.Fatalf("planServices refusal %v does not wrap ErrInvalidJob", err)
			}
			return
		}
		if len(specs) != len(job.GetServices()) {
			t.Fatalf("%d services planned of %d", len(specs), len(job.GetServices()))
		}
		seen := map[string]bool{}
		for _, s := range specs {
			for _, d := range s.DependsOn {
				if !seen[d] {
					t.Fatalf("service %q planned before its dependency %q", s.Name, d)
				}
			}
			if seen[s.Name] {
				t.Fatalf("service %q planned twice", s.Name)
			}
			seen[s.Name] = true
		}
	})
}
