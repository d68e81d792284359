package gateway

import (
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/norsk-oss/norsk-manager/proto/commonpb"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
)

func TestValidateJob(t *testing.T) {
	svc := func(name string, deps ...string) *commonpb.Service {
		return &commonpb.Service{Name: name, DependsOn: deps}
	}
	cases := []struct {
		name  string
		job   *managerpb.Job
		field string // "" = valid
	}{
		{"minimal", &managerpb.Job{}, ""},
		{"full", &managerpb.Job{Tags: map[string]string{"a": "b"}, StartDateTime: timestamppb.Now(),
			Services:   []*commonpb.Service{svc("a"), svc("b", "a")},
			WriteFiles: []*commonpb.WriteFile{{Path: "conf/x.json"}}}, ""},
		{"empty tag key", &managerpb.Job{Tags: map[string]string{"": "b"}}, "job.tags key"},
		{"bad timestamp", &managerpb.Job{StartDateTime: &timestamppb.Timestamp{Nanos: 2e9}}, "job.start_date_time"},
		{"service without name", &managerpb.Job{Services: []*commonpb.Service{svc("")}}, "job.services[0].name"},
		{"duplicate service", &managerpb.Job{Services: []*commonpb.Service{svc("a"), svc("a")}}, "job.services[1].name"},
		{"self dependency", &managerpb.Job{Services: []*commonpb.Service{svc("a", "a")}}, "job.services[0].dependsOn"},
		{"range reversed", &managerpb.Job{Services: []*commonpb.Service{{Name: "a", Parameters: &commonpb.ServiceParameters{PortMappings: []*commonpb.PortMapping{
			{ContainerPort: 80, HostPort: &commonpb.PortMapping_Range{Range: &commonpb.HostPortRange{MinPort: 9, MaxPort: 8}}}}}}}}, "job.services[0].parameters.port_mappings[0].range"},
		{"bad host address", &managerpb.Job{NorskServiceParameters: &commonpb.ServiceParameters{PortMappings: []*commonpb.PortMapping{
			{ContainerPort: 80, HostAddress: "not-an-ip"}}}}, "job.norsk_service_parameters.port_mappings[0].host_address"},
		{"env with =", &managerpb.Job{NorskServiceParameters: &commonpb.ServiceParameters{EnvironmentVariables: []*commonpb.EnvironmentVariable{{Name: "A=B"}}}},
			"job.norsk_service_parameters.environment_variables[0].name"},
		{"absolute write file is allowed (container path)", &managerpb.Job{WriteFiles: []*commonpb.WriteFile{{Path: "/etc/x"}}}, ""},
		{"escaping write file", &managerpb.Job{WriteFiles: []*commonpb.WriteFile{{Path: "a/../../x"}}}, "job.write_files[0].path"},
		{"bad mode", &managerpb.Job{WriteFiles: []*commonpb.WriteFile{{Path: "x", Mode: &commonpb.OptionalInt{Value: 0o17777}}}}, "job.write_files[0].mode"},
		{"dependsOn cycle", &managerpb.Job{Services: []*commonpb.Service{svc("a", "c"), svc("b", "a"), svc("c", "b")}}, "job.services"},
		{"write file for an unknown service", &managerpb.Job{Services: []*commonpb.Service{svc("a")},
			WriteFiles: []*commonpb.WriteFile{{Path: "x", Services: []string{"nope"}}}}, "job.write_files[0].services"},
		{"too large", &managerpb.Job{Description: strings.Repeat("d", maxJobBytes)}, "job"},
		{"the Norsk Media container may be depended on and given files", &managerpb.Job{Services: []*commonpb.Service{svc("a", "norsk-media")},
			WriteFiles: []*commonpb.WriteFile{{Path: "/etc/m.conf", Services: []string{"norsk-media"}}}}, ""},
		{"opaque json is not parsed", &managerpb.Job{LaunchConfigJson: strPtr("{not json")}, ""},
		{"cpu list of a manual job", &managerpb.Job{NorskCpuList: []uint32{0, 1}}, ""},
		{"cpu list with auto_placement", &managerpb.Job{NorskCpuList: []uint32{0, 1}, AutoPlacement: &managerpb.AutoPlacement{}}, "job.norsk_cpu_list"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := validateJob(tc.job)
			if tc.field == "" {
				if err != nil {
					t.Fatalf("unexpected error: %v", err)
				}
				return
			}
			if status.Code(err) != codes.InvalidArgument || !strings.HasPrefix(status.Convert(err).Message(), tc.field+":") {
				t.Fatalf("got %v, want InvalidArgument naming %s", err, tc.field)
			}
		})
	}
}

func strPtr(s string) *string { return &s }

func TestCheckID(t *testing.T) {
	for _, id := range []string{"", "a/b", " a", "a ", "a\x00b", string([]byte{0xff}), strings.Repeat("x", maxIDLen+1),
		".", "..", "a\u200bb", "a\u202eb", "a\u2028b"} {
		if checkID("id", id) == nil {
			t.Errorf("checkID(%q) accepted", id)
		}
	}
	for _, id := range []string{"a", "job-1", "ünïcode", "with space inside", "a.b:c_d"} {
		if err := checkID("id", id); err != nil {
			t.Errorf("checkID(%q): %v", id, err)
		}
	}
}

// TestCheckNewID: the ids a new job or node may have (docs/design/jobs.md#ids).
func TestCheckNewID(t *testing.T) {
	cases := []struct {
		id   string
		want string // "" accepted, else a fragment of the message
	}{
		{"a", ""},
		{"job-1", ""},
		{"Job_2.primary", ""},
		{"9lives", ""},
		{"0f8fad5b-d9cb-469f-a165-70867728950e", ""},                     // a minted UUID
		{strings.Repeat("b", 128) + ".1." + strings.Repeat("j", 64), ""}, // the longest bundle-derived id
		{strings.Repeat("x", maxNewIDLen), ""},
		{strings.Repeat("x", maxNewIDLen+1), "the limit is 200"},
		{"", "must not be empty"},
		{"bad id!", "letters, digits"},
		{"with space", "letters, digits"},
		{"a/b", "letters, digits"},
		{"a:b", "letters, digits"},
		{"ünïcode", "letters, digits"},
		{".hidden", "starting with a letter or digit"},
		{"-flag", "starting with a letter or digit"},
		{"_x", "starting with a letter or digit"},
		{".", "starting with a letter or digit"},
		{"..", "starting with a letter or digit"},
		{"a\x00b", "letters, digits"},
		{"a\u200bb", "letters, digits"},
	}
	for _, tc := range cases {
		t.Run(tc.id, func(t *testing.T) {
			err := checkNewID("job.job_id", tc.id)
			if tc.want == "" {
				if err != nil {
					t.Fatalf("checkNewID(%q): %v", tc.id, err)
				}
				return
			}
			msg := status.Convert(err).Message()
			if status.Code(err) != codes.InvalidArgument || !strings.HasPrefix(msg, "job.job_id: ") || !strings.Contains(msg, tc.want) {
				t.Fatalf("checkNewID(%q) = %v, want InvalidArgument naming job.job_id and saying %q", tc.id, err, tc.want)
			}
		})
	}
}
