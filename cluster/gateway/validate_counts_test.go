package gateway

import (
	"fmt"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"

	"github.com/norsk-oss/norsk-manager/proto/commonpb"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
)

// TestValidateJob_Counts: a list one over its limit is refused naming the
// list and the limit; at the limit it is accepted.
func TestValidateJob_Counts(t *testing.T) {
	tags := func(n int) map[string]string {
		m := map[string]string{}
		for i := range n {
			m[fmt.Sprintf("t%d", i)] = "v"
		}
		return m
	}
	services := func(n int) []*commonpb.Service {
		var s []*commonpb.Service
		for i := range n {
			s = append(s, &commonpb.Service{Name: fmt.Sprintf("s%d", i)})
		}
		return s
	}
	ports := func(n int) *commonpb.ServiceParameters {
		p := &commonpb.ServiceParameters{}
		for range n {
			p.PortMappings = append(p.PortMappings, &commonpb.PortMapping{ContainerPort: 80})
		}
		return p
	}
	env := func(n int) *commonpb.ServiceParameters {
		p := &commonpb.ServiceParameters{}
		for i := range n {
			p.EnvironmentVariables = append(p.EnvironmentVariables, &commonpb.EnvironmentVariable{Name: fmt.Sprintf("E%d", i)})
		}
		return p
	}
	deps := make([]string, maxServiceDeps+1)
	for i := range deps {
		deps[i] = "s0"
	}
	cases := []struct {
		name  string
		job   *managerpb.Job
		field string // "" = valid
	}{
		{"tags at the limit", &managerpb.Job{Tags: tags(maxJobTags)}, ""},
		{"tags over", &managerpb.Job{Tags: tags(maxJobTags + 1)}, "job.tags"},
		{"services at the limit", &managerpb.Job{Services: services(maxJobServices)}, ""},
		{"services over", &managerpb.Job{Services: services(maxJobServices + 1)}, "job.services"},
		{"dependsOn over", &managerpb.Job{Services: append(services(1), &commonpb.Service{Name: "x", DependsOn: deps})}, "job.services[1].dependsOn"},
		{"port mappings at the limit", &managerpb.Job{NorskServiceParameters: ports(maxPortMappings)}, ""},
		{"port mappings over", &managerpb.Job{Services: []*commonpb.Service{{Name: "a", Parameters: ports(maxPortMappings + 1)}}},
			"job.services[0].parameters.port_mappings"},
		{"environment over", &managerpb.Job{NorskServiceParameters: env(maxEnvVars + 1)}, "job.norsk_service_parameters.environment_variables"},
		{"write files over", &managerpb.Job{WriteFiles: make([]*commonpb.WriteFile, maxWriteFiles+1)}, "job.write_files"},
		{"cpu list over", &managerpb.Job{NorskCpuList: make([]uint32, maxCPUSet+1)}, "job.norsk_cpu_list"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := validateJob(tc.job)
			if tc.field == "" {
				requireOK(t, err)
				return
			}
			requireStatus(t, err, codes.InvalidArgument, tc.field+": has ", "the limit is")
			if !strings.HasPrefix(err.Error(), "rpc error: code = InvalidArgument desc = "+tc.field+":") {
				t.Fatalf("error %v does not start with the field %s", err, tc.field)
			}
		})
	}
}
